"""``python -m shared.sqlite_limits``: build the SQLite limits extension."""

from shared.sqlite_limits import main

raise SystemExit(main())
