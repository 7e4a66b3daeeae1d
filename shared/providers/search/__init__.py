"""Document retrievers: the local SQLite FTS index and Azure AI Search."""
