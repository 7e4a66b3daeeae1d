"""The SQL guard: pure checks of untrusted SQL (sqlglot parsing, no connection), used by the SQL step and the API."""
