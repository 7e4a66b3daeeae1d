"""Partial output of running steps on a side channel: local SQLite, or Azure Blob Storage."""
