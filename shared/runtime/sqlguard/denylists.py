"""What the SQL guard never accepts: statement kinds, functions, system catalogs, hints and options.

These lists are the guard's policy; ``shared.runtime.sqlguard.guard`` applies them to the syntax tree.
"""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.tokenizer_core import TokenType

from shared.runtime.sqlguard.bounds import TABLE_FUNCTIONS


def canon_name(name: str) -> str:
    """A function name compared without case or underscores (``OpenRowSet`` is ``open_rowset``)."""
    return name.lower().replace("_", "")


# Statement and clause node types that must not appear anywhere in an accepted query.
_FORBIDDEN_NODE_NAMES = (
    "Insert", "Update", "Delete", "Merge", "Create", "Drop", "Alter", "AlterTable", "TruncateTable",
    "Command", "Execute", "ExecuteSql", "Pragma", "Attach", "Detach", "Transaction", "Commit", "Rollback",
    "Use", "Grant", "Revoke", "LoadData", "Copy", "Returning", "Lock", "Kill", "Declare", "DeclareItem",
    "Analyze", "Cache", "Uncache", "Refresh", "Describe", "Show", "Set", "SetItem", "Summarize", "NextValueFor",
    "Export", "Put", "Get",
)  # fmt: skip


FORBIDDEN_NODES: tuple[type[exp.Expr], ...] = tuple(
    t for name in _FORBIDDEN_NODE_NAMES if isinstance(t := getattr(exp, name, None), type)
)


# Functions with side effects, file or network access, or code execution.
FORBIDDEN_FUNCTIONS = frozenset(
    canon_name(n)
    for n in {
        # SQLite (core, shell and common extensions)
        "load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "fsdir", "zipfile", "zipfile_cds",
        "sqlar_compress", "sqlar_uncompress", "sqlite_dbpage", "sqlite_dbdata", "sqlite_dbptr", "shell_add_schema",
        "shell_module_schema", "shell_escape_crnl", "shell_idquote", "lsmode", "eval", "sha3_query",
        "randomblob", "zeroblob",  # no analytic use; a huge size argument exhausts memory before the timeout
        # T-SQL
        "openrowset", "opendatasource", "openquery", "openxml", "bulk", "pwdencrypt", "pwdcompare",
        "sp_executesql", "xp_cmdshell", "xp_dirtree", "xp_fileexist", "xp_regread", "fn_get_audit_file",
        "fn_xe_file_target_read_file", "fn_dblog", "fn_dump_dblog", "fn_trace_gettable", "sys_exec",
        # PostgreSQL: settings, sequences (writes), SQL run from a string, large objects (files)
        "set_config", "nextval", "setval", "currval", "lastval", "txid_current", "query_to_xml",
        "query_to_xml_and_xmlschema", "query_to_xmlschema", "cursor_to_xml", "cursor_to_xmlschema", "table_to_xml",
        "table_to_xml_and_xmlschema", "schema_to_xml", "database_to_xml", "ts_stat", "ts_debug",
    }
)  # fmt: skip


# PostgreSQL's pg_* functions read files, settings and server state or signal backends; lo_* are large
# objects (server files); dblink* reach other servers.
FORBIDDEN_FUNCTION_PREFIXES = ("xp_", "sp_", "fn_", "pg_", "lo_", "dblink")


# Metadata and server-information functions: system catalog access.
SYSTEM_FUNCTIONS = frozenset(
    canon_name(n)
    for n in {
        "object_definition", "object_name", "object_id", "object_schema_name", "objectproperty", "objectpropertyex",
        "schema_name", "schema_id", "col_name", "col_length", "columnproperty", "type_name", "type_id",
        "indexproperty", "db_name", "db_id", "databasepropertyex", "serverproperty", "suser_name", "suser_sname",
        "suser_id", "suser_sid", "user_name", "user_id", "current_user", "session_user", "system_user",
        "has_perms_by_name", "has_dbaccess", "is_member", "is_srvrolemember", "is_rolemember", "permissions",
        "login_property", "host_name", "host_id", "app_name", "original_login", "session_context", "context_info",
        "file_name", "file_id", "filegroup_name", "fulltextcatalogproperty", "sqlite_compileoption_get",
        "sqlite_compileoption_used", "sqlite_source_id", "sqlite_version", "sqlite_offset", "current_version",
        "current_schema", "current_setting", "current_database", "current_schemas", "current_role",
        "inet_server_addr", "inet_server_port", "inet_client_addr", "inet_client_port", "has_table_privilege",
        "has_schema_privilege", "has_column_privilege", "has_database_privilege", "has_function_privilege",
        "to_regclass", "obj_description", "col_description",
    }
)  # fmt: skip


# Table-valued functions that only transform their arguments.
SAFE_TABLE_FUNCTIONS = TABLE_FUNCTIONS


# T-SQL table hints that change neither what is read nor the plan's cost: NOLOCK (dirty reads of a
# read-only analytics query are acceptable). INDEX(...), FORCESEEK, TABLOCK etc. can force costly plans.
ALLOWED_TABLE_HINTS = frozenset({"NOLOCK"})


# Query options that only lower cost; MAXRECURSION only at or below the default 100 (0 means no limit).
ALLOWED_QUERY_OPTIONS = frozenset({"MAXDOP", "RECOMPILE"})


SYSTEM_SCHEMAS = frozenset({"sys", "information_schema", "pg_catalog", "pg_toast", "pg_temp"})


SYSTEM_DATABASES = frozenset({"master", "msdb", "model", "tempdb", "mssqlsystemresource"})


TSQL_SYSTEM_TABLE = re.compile(r"^sys[a-z0-9_]*$")


SQLITE_SYSTEM_TABLE = re.compile(r"^(sqlite_[a-z0-9_]*|pragma_[a-z0-9_]*)$")


# PostgreSQL searches pg_catalog before the default schema: an unqualified pg_* name is a catalog relation.
POSTGRES_SYSTEM_TABLE = re.compile(r"^pg_[a-z0-9_]*$")


STRING_TOKENS = frozenset(
    t for name in ("STRING", "NATIONAL_STRING", "RAW_STRING", "HEREDOC_STRING", "UNICODE_STRING", "BYTE_STRING",
                   "HEX_STRING", "BIT_STRING")
    if (t := getattr(TokenType, name, None)) is not None
)  # fmt: skip
