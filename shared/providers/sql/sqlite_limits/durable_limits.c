/*
 * durable_limits: per-connection resource limits and a sealing authorizer for the SQLite sample
 * database, loaded by the SQLite3 ODBC driver through its LoadExt= connection option.
 *
 * Why a C extension: the driver offers no way to call sqlite3_limit() or sqlite3_set_authorizer(),
 * and both must hold before any untrusted statement runs.  shared/providers/sql/sqlite_limits/__init__.py builds
 * this file with gcc (make install, or lazily on first use) and shared/providers/sql/sqlite.py loads it on every
 * connection, then calls durable_seal() before the query and checks its answer, so a missing or
 * stale build fails the query instead of running it unbounded.
 *
 * On connect (sqlite3_extension_init):
 *   - sqlite3_limit(): no string, blob or row longer than DURABLE_MAX_LENGTH bytes (so printf/replace
 *     amplification, group_concat and string-doubling recursive CTEs fail with "string or blob too
 *     big" instead of taking gigabytes), and smaller SQL text, nesting, compound, argument, column,
 *     LIKE-pattern and program-size limits;
 *   - SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION off and load_extension() denied: the driver turns
 *     extension loading on for every connection, which would let a statement load any shared library;
 *   - defensive mode, untrusted schema (views and triggers of a user's own file cannot call
 *     functions with side effects);
 *   - an authorizer that, once durable_seal() has run, denies ATTACH/DETACH (the sensitive file is
 *     attached by the provider before sealing, and only for an approved statement), any pragma that
 *     sets a value, and temp or virtual objects; writes already fail on the read-only files.
 */
#include <string.h>

#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#define DURABLE_LIMITS_VERSION "durable_limits 2"
#define DURABLE_MAX_LENGTH 65536

typedef struct {
    int sealed;
} DurableState;

static int is_load_extension(const char *name) {
    return name != 0 && sqlite3_stricmp(name, "load_extension") == 0;
}

static int is_schema_pragma(const char *name) {
    static const char *const allowed[] = {"table_info", "table_xinfo", "index_info", "index_xinfo",
                                          "index_list", "foreign_key_list", "table_list", 0};
    int i;
    for (i = 0; name != 0 && allowed[i] != 0; i++) {
        if (sqlite3_stricmp(name, allowed[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

static int durable_authorizer(void *arg, int action, const char *a1, const char *a2, const char *db,
                              const char *trigger) {
    DurableState *state = (DurableState *)arg;
    (void)a1;
    (void)db;
    (void)trigger;
    if (action == SQLITE_FUNCTION && is_load_extension(a2)) {
        return SQLITE_DENY;
    }
    if (!state->sealed) {
        return SQLITE_OK; /* the provider's own setup (ATTACH of the sensitive file) runs first */
    }
    switch (action) {
        case SQLITE_ATTACH:
        case SQLITE_DETACH:
        case SQLITE_CREATE_TEMP_INDEX:
        case SQLITE_CREATE_TEMP_TABLE:
        case SQLITE_CREATE_TEMP_TRIGGER:
        case SQLITE_CREATE_TEMP_VIEW:
        case SQLITE_CREATE_VTABLE:
        case SQLITE_DROP_VTABLE:
            return SQLITE_DENY;
        case SQLITE_PRAGMA:
            /* a1 is the pragma, a2 its argument: reading a pragma is harmless, setting one could undo a
             * cap.  The schema pragmas take a table name as argument (pragma_table_info('orders')). */
            return a2 == 0 || is_schema_pragma(a1) ? SQLITE_OK : SQLITE_DENY;
        default:
            /* Reads, and what the engine refuses anyway: every file is opened read-only (mode=ro) and
             * no temp object can be created, so a write has nowhere to go.  (Table-valued functions
             * such as json_each report an internal UPDATE of sqlite_master when they are set up.) */
            return SQLITE_OK;
    }
}

/* durable_seal(): from now on only reads are authorized on this connection; returns the version. */
static void durable_seal(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    DurableState *state = (DurableState *)sqlite3_user_data(ctx);
    (void)argc;
    (void)argv;
    state->sealed = 1;
    sqlite3_result_text(ctx, DURABLE_LIMITS_VERSION, -1, SQLITE_STATIC);
}

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_extension_init(sqlite3 *db, char **err, const sqlite3_api_routines *api) {
    DurableState *state;
    int rc;
    SQLITE_EXTENSION_INIT2(api);
    (void)err;

    sqlite3_limit(db, SQLITE_LIMIT_LENGTH, DURABLE_MAX_LENGTH);
    sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, DURABLE_MAX_LENGTH);
    sqlite3_limit(db, SQLITE_LIMIT_COLUMN, 100);
    sqlite3_limit(db, SQLITE_LIMIT_EXPR_DEPTH, 100);
    sqlite3_limit(db, SQLITE_LIMIT_COMPOUND_SELECT, 50);
    sqlite3_limit(db, SQLITE_LIMIT_VDBE_OP, 100000);
    sqlite3_limit(db, SQLITE_LIMIT_FUNCTION_ARG, 32);
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 1);
    sqlite3_limit(db, SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1000);
    sqlite3_limit(db, SQLITE_LIMIT_VARIABLE_NUMBER, 1);
    sqlite3_limit(db, SQLITE_LIMIT_TRIGGER_DEPTH, 1);
    sqlite3_limit(db, SQLITE_LIMIT_WORKER_THREADS, 0);

    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int *)0);
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0);
    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)0);

    state = (DurableState *)sqlite3_malloc(sizeof(DurableState));
    if (state == 0) {
        return SQLITE_NOMEM;
    }
    memset(state, 0, sizeof(*state));
    /* The function owns the state (freed with the connection); the authorizer borrows it. */
    rc = sqlite3_create_function_v2(db, "durable_seal", 0, SQLITE_UTF8 | SQLITE_DIRECTONLY, state, durable_seal, 0,
                                    0, sqlite3_free);
    if (rc != SQLITE_OK) {
        sqlite3_free(state);
        return rc;
    }
    return sqlite3_set_authorizer(db, durable_authorizer, state);
}
