"""``python -m api.contract [--write]``: print the OpenAPI document, or write it to docs/openapi.json."""

import sys
from pathlib import Path

from api.contract.openapi import document_text

CHECKED_IN = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"

if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        CHECKED_IN.write_text(document_text(), encoding="utf-8")
    else:
        sys.stdout.write(document_text())
