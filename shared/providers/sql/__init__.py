"""SQL: the catalog and the databases (SQLite sample over ODBC, Azure SQL); the guard is shared/runtime/sqlguard."""
