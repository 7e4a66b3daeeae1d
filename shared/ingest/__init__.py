"""Document ingestion: read, chunk and index documents (`python -m shared.ingest`)."""
