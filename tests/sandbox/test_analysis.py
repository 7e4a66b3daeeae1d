"""Legitimate use: analysis over SQL-shaped rows producing a number and a chart, inside the real sandbox."""

from __future__ import annotations

import base64
import os
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from shared.sandbox.base import SandboxLimits, SandboxRequest
from shared.sandbox.local import LocalSandbox
from tests.sandbox.conftest import Runner

pytestmark = pytest.mark.slow

ORDERS: dict[str, list[Any]] = {
    "columns": ["region", "quarter", "revenue"],
    "rows": [
        ["North", "Q2", 1200.0],
        ["North", "Q3", 1500.0],
        ["South", "Q2", 800.0],
        ["South", "Q3", 700.0],
        ["West", "Q2", 400.0],
        ["West", "Q3", 650.0],
    ],
}

ANALYSIS = """
import matplotlib.pyplot as plt

by_quarter = orders.pivot_table(index="region", columns="quarter", values="revenue", aggfunc="sum")
growth = (by_quarter["Q3"] - by_quarter["Q2"]) / by_quarter["Q2"] * 100
total_growth = (by_quarter["Q3"].sum() - by_quarter["Q2"].sum()) / by_quarter["Q2"].sum() * 100

ax = growth.sort_values().plot.barh(title="Revenue growth Q2 to Q3 (%)")
ax.figure.tight_layout()
ax.figure.savefig("growth.png", dpi=80)
growth.round(2).to_csv("growth.csv")
print(f"total growth {total_growth:.2f}%")
result = {"total_growth_pct": round(float(total_growth), 2), "best_region": growth.idxmax(), "by_region": growth}
"""


def _png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (the signature and chunk type checked)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_growth_rate_and_chart_from_sql_rows(run: Runner) -> None:
    """SQL rows arrive as a DataFrame; the code returns a number, prints, and writes a PNG chart and a CSV."""
    result = run(ANALYSIS, SandboxLimits(wall_seconds=60), orders=ORDERS)
    assert result.status == "ok", result.error
    q2 = sum(r[2] for r in ORDERS["rows"] if r[1] == "Q2")
    q3 = sum(r[2] for r in ORDERS["rows"] if r[1] == "Q3")
    assert result.result["total_growth_pct"] == round((q3 - q2) / q2 * 100, 2)
    assert result.result["best_region"] == "West"
    assert result.result["by_region"]["North"] == pytest.approx(25.0)
    assert "total growth 18.75%" in result.stdout
    files = {f.name: f for f in result.files}
    assert set(files) == {"growth.png", "growth.csv"}
    png = base64.b64decode(files["growth.png"].data_b64)
    assert files["growth.png"].media_type == "image/png" and files["growth.png"].size == len(png)
    width, height = _png_size(png)
    assert width > 100 and height > 100
    csv = base64.b64decode(files["growth.csv"].data_b64).decode()
    assert files["growth.csv"].media_type == "text/csv"
    assert csv.splitlines()[0] == "region,0" and "West,62.5" in csv


def test_inputs_are_named_and_in_inputs(run: Runner) -> None:
    """Every input is a global by its name and in ``inputs``; a name that is no identifier only in ``inputs``."""
    code = "result = [threshold, inputs['threshold'], inputs['not a name'], type(orders).__name__, len(orders)]"
    result = run(code, None, threshold=3, orders=ORDERS, **{"not a name": [1]})
    assert result.status == "ok", result.error
    assert result.result == [3, 3, [1], "DataFrame", 6]


def test_results_are_made_json(run: Runner) -> None:
    """numpy scalars, arrays, DataFrames, dates and non-finite floats come back as plain JSON."""
    code = (
        "import numpy as np, pandas as pd, datetime\n"
        "result = {'i': np.int64(3), 'a': np.arange(3), 'nan': float('nan'), 'd': datetime.date(2024, 1, 2),\n"
        "          'df': pd.DataFrame({'x': [1, 2]})}\n"
    )
    result = run(code)
    assert result.status == "ok", result.error
    assert result.result == {
        "i": 3,
        "a": [0, 1, 2],
        "nan": None,
        "d": "2024-01-02",
        "df": {"columns": ["x"], "rows": [[1], [2]]},
    }


def test_inputs_that_are_not_json_are_a_clear_error(run: Runner) -> None:
    """Inputs must be JSON values: anything else is refused before a sandbox starts, saying what."""
    result = run("result = 1", None, tags={"a", "b"})
    assert result.status == "error"
    assert result.error is not None and result.error.startswith("the inputs are not JSON")
    assert "set" in result.error


def test_unserialisable_result_is_a_clear_error(run: Runner) -> None:
    """A result that is not JSON says so."""
    result = run("result = object()")
    assert result.status == "error"
    assert result.error == "result is not JSON-serialisable (object)"


def test_bad_code_fails_with_the_last_lines_of_its_own_traceback(run: Runner) -> None:
    """A syntax error or an exception gives the code's traceback, never the bootstrap's frames."""
    broken = run("def f(:\n    pass")
    assert broken.status == "error"
    assert "SyntaxError" in (broken.error or "")
    failing = run("def f(x):\n    return 1 / x\nresult = f(0)")
    assert failing.status == "error"
    assert failing.error is not None and failing.error.endswith("ZeroDivisionError: division by zero")
    assert 'File "<code>", line 2, in f' in failing.error
    assert "bootstrap" not in failing.error


def test_exit_codes(run: Runner) -> None:
    """sys.exit(0) is a normal end; any other code is an error that quotes it."""
    assert run("import sys\nresult = 1\nsys.exit(0)").status == "ok"
    failed = run("import sys\nsys.exit(3)")
    assert failed.status == "error" and failed.error == "SystemExit: 3"


def test_only_known_file_types_are_returned(run: Runner) -> None:
    """Files of another type, and symlinks, stay behind; media types come from the extension."""
    code = (
        "import os\n"
        "open('a.json', 'w').write('{}')\nopen('b.svg', 'w').write('<svg/>')\nopen('c.txt', 'w').write('t')\n"
        "open('d.exe', 'wb').write(b'MZ')\nos.symlink('/sandbox/bootstrap.py', 'e.txt')\n"
        "os.mkdir('sub')\nopen('sub/f.csv', 'w').write('x\\n1\\n')\n"
    )
    result = run(code)
    assert result.status == "ok", result.error
    assert {f.name: f.media_type for f in result.files} == {
        "a.json": "application/json",
        "b.svg": "image/svg+xml",
        "c.txt": "text/plain",
        "sub/f.csv": "text/csv",
    }


def test_without_pandas_a_table_is_a_list_of_dicts(tmp_path: Path) -> None:
    """In a venv without pandas (the standard library only), SQL rows arrive as a list of dicts."""
    venv = tmp_path / "bare-venv"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)  # noqa: S603
    sandbox = LocalSandbox(venv)
    if not sandbox.available():
        pytest.skip("this machine cannot isolate (see the local_sandbox fixture)")
    code = "result = [type(orders).__name__, orders[1], sum(r['revenue'] for r in orders)]"
    result = sandbox.run(SandboxRequest(code=code, inputs={"orders": ORDERS}), SandboxLimits())
    assert result.status == "ok", result.error
    assert result.result == ["list", {"region": "North", "quarter": "Q3", "revenue": 1500.0}, 5250.0]
    no_numpy = sandbox.run(SandboxRequest(code="import numpy"), SandboxLimits())
    assert no_numpy.status == "error" and "ModuleNotFoundError" in (no_numpy.error or "")


def test_runs_side_by_side_are_apart(local_sandbox: LocalSandbox) -> None:
    """Concurrent runs each get their own sandbox (and, as root, their own uid): no run sees another's files."""
    code = "import os\nopen(f'{name}.txt', 'w').write(name)\nresult = [os.getuid(), sorted(os.listdir('.'))]"
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = list(
            pool.map(
                lambda name: local_sandbox.run(SandboxRequest(code=code, inputs={"name": name}), SandboxLimits()),
                ["a", "b", "c"],
            )
        )
    assert [r.status for r in runs] == ["ok", "ok", "ok"], [r.error for r in runs]
    assert [r.result[1] for r in runs] == [["a.txt"], ["b.txt"], ["c.txt"]]
    if os.geteuid() == 0:
        assert len({r.result[0] for r in runs}) == 3
