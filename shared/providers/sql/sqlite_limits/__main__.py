"""``python -m shared.providers.sql.sqlite_limits``: build the SQLite limits extension."""

from shared.providers.sql.sqlite_limits import main

raise SystemExit(main())
