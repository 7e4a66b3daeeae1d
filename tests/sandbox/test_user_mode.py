"""The sandbox as a developer runs it: not root, so bwrap makes a user namespace of its own (no further ones).

When the tests run as root (CI), this starts a process as ``nobody`` with the system's Python 3.11 and the
app's packages, over a bare venv (standard library only), and checks that mode's own barriers there.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.sandbox.local import REPO_ROOT

pytestmark = pytest.mark.slow

SYSTEM_PYTHON = Path("/usr/bin/python3.11")
NOBODY = 65534

CHECKS = r"""
import json, sys
from pathlib import Path
from shared.sandbox.base import SandboxLimits, SandboxRequest
from shared.sandbox.local import LocalSandbox, _runtime

sandbox = LocalSandbox(Path(sys.argv[1]))
if not sandbox.available():
    print(json.dumps({"available": False}))
    raise SystemExit(0)
limits = SandboxLimits(cpu_seconds=5, wall_seconds=30, max_processes=16)
codes = {
    "who": "import os\nresult = [os.getuid(), os.getpid(), sorted(os.listdir('/'))]",
    "fork": "import os\nwhile True:\n    os.fork()",
    "net": "import socket\nsocket.create_connection(('192.0.2.1', 80), timeout=2)",
    "dev": "open('/dev/evil', 'w')",
    "userns": "import ctypes\nif ctypes.CDLL(None).unshare(0x10000000) != 0:\n    raise PermissionError('refused')",
    "memory": "x = bytearray(4 * 1024 ** 3)",
}
out = {"available": True, "as_root": _runtime(sandbox.venv).as_root}
for name, code in codes.items():
    r = sandbox.run(SandboxRequest(code=code), limits)
    out[name] = [r.status, r.result, (r.error or "")[-300:]]
print(json.dumps(out))
"""


# What the child imports: the sandbox package and pydantic with its dependencies.
PACKAGES = ("pydantic", "pydantic_core", "typing_extensions", "annotated_types", "typing_inspection")


def _copy_for_nobody(root: Path) -> list[str]:
    """Copy the sandbox package and its libraries under ``root``: the checkout (and its .venv) may sit in a
    directory only root can enter, e.g. a clone in a ``mktemp -d`` folder (mode 0700)."""
    app = root / "app"
    (app / "shared").mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "shared" / "__init__.py", app / "shared" / "__init__.py")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO_ROOT / "shared" / "sandbox", app / "shared" / "sandbox", ignore=ignore)
    lib = root / "lib"
    lib.mkdir()
    for name in PACKAGES:
        module = importlib.import_module(name)
        source = Path(module.__file__ or "")
        if source.name == "__init__.py":
            shutil.copytree(source.parent, lib / name, ignore=ignore)
        else:
            shutil.copy2(source, lib / source.name)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return [str(app), str(lib)]


@pytest.fixture
def bare_venv() -> Iterator[tuple[Path, list[str]]]:
    """A venv of the system Python without packages, and the import path of the app's sandbox code, in a
    directory ``nobody`` can read."""
    if os.geteuid() != 0 or not SYSTEM_PYTHON.is_file() or shutil.which("setpriv") is None:
        pytest.skip("needs root (to become nobody), setpriv and /usr/bin/python3.11")
    with tempfile.TemporaryDirectory(prefix="sandbox-user-", dir="/tmp") as tmp:
        root = Path(tmp)
        paths = _copy_for_nobody(root)
        venv = root / "venv"
        subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True)  # noqa: S603
        yield venv, paths


def test_user_namespace_mode_as_nobody(bare_venv: tuple[Path, list[str]]) -> None:
    """As a plain user: the code runs as that user in its own namespaces, with the same limits and barriers."""
    venv, paths = bare_venv
    cmd = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
    cmd += ["env", "-i", f"PYTHONPATH={os.pathsep.join(paths)}", "PATH=/usr/bin:/bin"]
    cmd += [str(SYSTEM_PYTHON), "-c", CHECKS, str(venv)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)  # noqa: S603
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if not out["available"]:
        pytest.skip("user namespaces are off for plain users here: the sandbox refuses (the intended answer)")
    assert out["as_root"] is False
    assert out["who"][0] == "ok" and out["who"][1][0] == NOBODY and out["who"][1][1] == 1
    assert "work" not in out["who"][1][2] and "etc" not in out["who"][1][2]
    assert out["fork"][0] == "limit" and "process limit of 16" in out["fork"][2]
    assert out["net"][0] == "error" and "Network is unreachable" in out["net"][2]
    assert out["dev"][0] == "error" and "Read-only file system" in out["dev"][2]
    assert out["userns"][0] == "error" and "PermissionError: refused" in out["userns"][2]
    assert out["memory"][0] == "limit"
