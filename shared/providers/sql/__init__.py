"""SQL: the guard, the catalog, and the databases (SQLite sample over ODBC, Azure SQL)."""
