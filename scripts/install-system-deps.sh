#!/usr/bin/env bash
# Installs the Debian packages the project needs, only when they are missing.
# unixodbc + libsqliteodbc: the real ODBC path (pyodbc) against the SQLite sample database.
# gcc + libsqlite3-dev: build the per-connection limits extension the SQLite provider loads.
# chromium: the web console's browser tests (driven by Python Playwright; never `playwright install`).
# bubblewrap: the code sandbox (shared/sandbox/local.py) runs model-written Python under bwrap.
# nodejs + npm: Azurite, the local Azure Storage emulator (npm ci in tools/azurite, run by make).
# postgresql: the PostgreSQL member's tests start a throw-away server (initdb + pg_ctl, as the postgres user).
set -euo pipefail

need=()
command -v odbcinst >/dev/null 2>&1 || need+=(unixodbc)
odbcinst -q -d 2>/dev/null | grep -qx '\[SQLite3\]' || need+=(libsqliteodbc unixodbc)
[ -e /usr/include/sql.h ] || need+=(unixodbc-dev)
# gcc + libsqlite3-dev: the SQLite limits extension (shared/providers/sql/sqlite_limits/durable_limits.c).
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
[ -e /usr/include/sqlite3ext.h ] || need+=(libsqlite3-dev)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
# The Debian package puts initdb/pg_ctl under /usr/lib/postgresql/<version>/bin and creates the postgres user.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "Installing system packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
