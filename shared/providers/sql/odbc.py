"""ODBC driver discovery: which drivers unixODBC knows, logged once, and a clear error for a missing one."""

from __future__ import annotations

import logging
import threading

from shared.jobs.contracts import ErrorCode, ProviderError

logger = logging.getLogger(__name__)

MSODBC18 = "ODBC Driver 18 for SQL Server"
# Microsoft's driver is not in Debian: it comes from Microsoft's package repository.
MSODBC_INSTALL_HINT = (
    "install Microsoft's 'msodbcsql18' package from packages.microsoft.com "
    "(ACCEPT_EULA=Y apt-get install msodbcsql18; it is not in Debian). "
    "The Azure Functions Python images ship it"
)

_lock = threading.Lock()
_logged = False


def installed_drivers() -> list[str]:
    """The ODBC drivers registered with the driver manager; logged at first use."""
    global _logged
    try:
        import pyodbc
    except ImportError as exc:  # libodbc.so missing: pyodbc cannot even load
        raise ProviderError(
            ErrorCode.CONFIG_ERROR, f"pyodbc cannot load the ODBC driver manager ({exc}); install 'unixodbc'"
        ) from exc
    drivers = list(pyodbc.drivers())
    with _lock:
        if not _logged:
            _logged = True
            logger.info("ODBC drivers found: %s", ", ".join(drivers) if drivers else "none")
    return drivers


def require_driver(name: str, *, install_hint: str | None = None) -> None:
    """Raise CONFIG_ERROR naming ``name`` (and how to install it) unless the driver is registered."""
    drivers = installed_drivers()
    if name in drivers:
        return
    found = ", ".join(drivers) if drivers else "none"
    hint = install_hint or "install the driver and register it with unixODBC (odbcinst -q -d lists them)"
    raise ProviderError(
        ErrorCode.CONFIG_ERROR,
        f"the ODBC driver '{name}' is not installed (drivers found: {found}); {hint}",
    )


def odbc_value(value: str) -> str:
    """Quote a connection-string value: braces when it could be misread, with ``}`` doubled inside."""
    if value == "" or any(ch in value for ch in ";{}=") or value != value.strip():
        return "{" + value.replace("}", "}}") + "}"
    return value


def parse_connection_string(text: str) -> list[tuple[str, str]]:
    """Split an ODBC connection string into (key, value) pairs, honouring ``{...}`` quoting."""
    pairs: list[tuple[str, str]] = []
    i = 0
    n = len(text)
    while i < n:
        while i < n and text[i] in "; ":
            i += 1
        if i >= n:
            break
        eq = text.find("=", i)
        if eq < 0:
            raise ValueError(f"connection string part without '=': {text[i:]!r}")
        key = text[i:eq].strip()
        i = eq + 1
        if i < n and text[i] == "{":
            i += 1
            chars: list[str] = []
            while True:
                if i >= n:
                    raise ValueError(f"unterminated '{{' in the value of {key!r}")
                if text[i] == "}":
                    if i + 1 < n and text[i + 1] == "}":
                        chars.append("}")
                        i += 2
                        continue
                    i += 1
                    break
                chars.append(text[i])
                i += 1
            value = "".join(chars)
            while i < n and text[i] == " ":
                i += 1
            if i < n and text[i] != ";":
                raise ValueError(f"unexpected text after the braced value of {key!r}")
        else:
            end = text.find(";", i)
            end = n if end < 0 else end
            value = text[i:end].strip()
            i = end
        pairs.append((key, value))
    return pairs
