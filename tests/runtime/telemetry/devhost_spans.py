"""Run devhost with the app's spans captured by the OpenTelemetry SDK's InMemorySpanExporter (tests only).

``python tests/runtime/telemetry/devhost_spans.py OUT.json serve --app ...``: serves exactly like
``python -m devhost serve ...`` and, when the host stops, writes every finished span to OUT.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def span_record(span: Any) -> dict[str, Any]:
    """A JSON-friendly view of one finished SDK span."""
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": format(span.context.trace_id, "032x"),
        "span_id": format(span.context.span_id, "016x"),
        "parent_span_id": format(parent.span_id, "016x") if parent is not None else None,
        "kind": span.kind.name,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }


def main() -> int:
    """Install the in-memory exporter, serve, then dump the spans."""
    out = Path(sys.argv[1]).resolve()
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from shared.runtime import telemetry

    exporter = InMemorySpanExporter()
    telemetry.install_span_exporter(exporter)
    from devhost.cli import main as devhost_main

    try:
        return devhost_main(sys.argv[2:])
    finally:
        out.write_text(json.dumps([span_record(s) for s in exporter.get_finished_spans()]))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    raise SystemExit(main())
