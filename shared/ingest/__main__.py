"""``python -m shared.ingest``: the ingestion command line."""

from shared.ingest.pipeline import main

raise SystemExit(main())
