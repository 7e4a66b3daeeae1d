#!/bin/sh
# azd postprovision hook: seed the environment azd just provisioned.
#   1. search index + sample documents  (python -m shared.ingest data/docs --target azure)
#   2. SQL schema + sample data          (data/sql/schema.tsql.sql, data/sql/data.sql)
#   3. contained DB user for the app identity: SELECT on one schema, DENY on sensitive tables
# Runs as the deploying principal (azd auth login): it holds Search Service/Index Data Contributor,
# Cognitive Services OpenAI User and is the SQL server's Entra admin. Re-running it is safe.
# Needs: python3, sqlcmd (go-sqlcmd), and the az CLI only to open the SQL firewall for this machine.
set -eu

cd "$(dirname "$0")/../.."

# azd passes the environment's values to hooks; when run by hand, read them from azd.
if [ -z "${AZURE_SQL_SERVER:-}" ] && command -v azd >/dev/null 2>&1; then
    eval "$(azd env get-values)"
fi

fail() {
    echo "postprovision: $*" >&2
    exit 1
}

for name in AZURE_RESOURCE_GROUP AZURE_SEARCH_ENDPOINT AZURE_SEARCH_INDEX AZURE_OPENAI_ENDPOINT \
    AZURE_OPENAI_EMBEDDING_DEPLOYMENT AZURE_SQL_SERVER AZURE_SQL_SERVER_NAME AZURE_SQL_DATABASE \
    AZURE_SQL_READER_SCHEMA APP_IDENTITY_NAME APP_IDENTITY_PRINCIPAL_ID; do
    eval "value=\${$name:-}"
    [ -n "$value" ] || fail "$name is not set; run 'azd provision' first (or 'azd env get-values' to check)"
done

SCHEMA_SQL=data/sql/schema.tsql.sql
DATA_SQL=data/sql/data.sql
DOCS_DIR=data/docs
for path in "$SCHEMA_SQL" "$DATA_SQL" "$DOCS_DIR" data/catalog.json; do
    [ -e "$path" ] || fail "$path is missing"
done

# Python with the app's requirements (the repo's .venv when there is one).
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
    if [ -x .venv/bin/python ]; then
        PYTHON=.venv/bin/python
    else
        command -v python3 >/dev/null 2>&1 || fail "python3 is required"
        echo "postprovision: creating .venv with requirements.txt"
        python3 -m venv .venv
        .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
        PYTHON=.venv/bin/python
    fi
fi

echo "postprovision: 1/3 search index '$AZURE_SEARCH_INDEX' and documents from $DOCS_DIR"
SEARCH_PROVIDER=azure LLM_PROVIDER=azure_openai \
    AZURE_SEARCH_ENDPOINT="$AZURE_SEARCH_ENDPOINT" AZURE_SEARCH_INDEX="$AZURE_SEARCH_INDEX" \
    AZURE_SEARCH_SEMANTIC_CONFIG="${AZURE_SEARCH_SEMANTIC_CONFIG:-}" \
    AZURE_SEARCH_VECTORIZER_MODEL="${AZURE_SEARCH_VECTORIZER_MODEL:-}" \
    AZURE_OPENAI_ENDPOINT="$AZURE_OPENAI_ENDPOINT" \
    AZURE_OPENAI_EMBEDDING_DEPLOYMENT="$AZURE_OPENAI_EMBEDDING_DEPLOYMENT" \
    "$PYTHON" -m shared.ingest "$DOCS_DIR" --target azure

command -v sqlcmd >/dev/null 2>&1 || fail "sqlcmd (go-sqlcmd) is required: https://aka.ms/go-sqlcmd"

if command -v az >/dev/null 2>&1 && command -v curl >/dev/null 2>&1; then
    client_ip="$(curl -fsS https://api.ipify.org || true)"
    if [ -n "$client_ip" ]; then
        echo "postprovision: allowing $client_ip through the SQL firewall"
        az sql server firewall-rule create --resource-group "$AZURE_RESOURCE_GROUP" \
            --server "$AZURE_SQL_SERVER_NAME" --name azd-postprovision-client \
            --start-ip-address "$client_ip" --end-ip-address "$client_ip" --output none
    fi
else
    echo "postprovision: az CLI not found; make sure this machine's IP may reach $AZURE_SQL_SERVER" >&2
fi

run_sql() {
    sqlcmd -S "tcp:$AZURE_SQL_SERVER,1433" -d "$AZURE_SQL_DATABASE" \
        --authentication-method ActiveDirectoryDefault -b "$@"
}

echo "postprovision: 2/3 SQL schema and sample data in $AZURE_SQL_DATABASE"
run_sql -i "$SCHEMA_SQL"
run_sql -i "$DATA_SQL"

echo "postprovision: 3/3 read-only database user for $APP_IDENTITY_NAME (schema $AZURE_SQL_READER_SCHEMA)"
grants="$(mktemp)"
trap 'rm -f "$grants"' EXIT
"$PYTHON" infra/hooks/sql_grants.py --user "$APP_IDENTITY_NAME" --object-id "$APP_IDENTITY_PRINCIPAL_ID" \
    --schema "$AZURE_SQL_READER_SCHEMA" --catalog data/catalog.json >"$grants"
run_sql -i "$grants"

echo "postprovision: done. Workbook: Azure portal > $AZURE_RESOURCE_GROUP > Application Insights > Workbooks > Durable AI Jobs"
