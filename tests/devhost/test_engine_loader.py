"""Loader tests: host.json, local settings, app discovery and function classification."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from devhost.functions.loader import load_app
from devhost.functions.model import AppLoadError

BASIC = Path(__file__).resolve().parents[1] / "apps" / "durable_basic"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for key in ("DEVHOST_TEST_HUB", "PYTHON_SCRIPT_FILE_NAME", "LOADER_TEST_SETTING", "WEBSITE_SITE_NAME"):
        # setenv first so monkeypatch restores the variable's absence after the test
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    yield monkeypatch


def write_app(root: Path, source: str, host: dict | None = None, script: str = "function_app.py") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / script).write_text(textwrap.dedent(source), encoding="utf-8")
    (root / "host.json").write_text(json.dumps(host or {"version": "2.0"}), encoding="utf-8")
    return root


def test_classifies_functions_and_durable_names(clean_env: pytest.MonkeyPatch) -> None:
    app = load_app(BASIC)
    kinds = {f.name: f.kind for f in app.functions}
    assert kinds["chain"] == "orchestrator"
    assert kinds["say_hello"] == "activity"
    renamed = next(f for f in app.functions if f.name == "renamed_activity_function")
    assert renamed.durable_name == "Renamed"
    assert app.find("activity", "renamed") is renamed
    assert next(f for f in app.functions if f.name == "double").is_async
    assert not next(f for f in app.functions if f.name == "say_hello").is_async
    assert next(f for f in app.functions if f.name == "who_am_i").wants_context
    assert app.host.hub_name == "TestHubName"  # %DEVHOST_TEST_HUB% is unset
    assert app.host.max_concurrent_activities == 8
    assert app.host.max_concurrent_orchestrators == 4
    assert app.host.function_timeout_s == 300.0


def test_hub_name_resolves_env(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DEVHOST_TEST_HUB", "MyHub")
    assert load_app(BASIC).host.hub_name == "MyHub"


def test_each_load_imports_a_fresh_module(clean_env: pytest.MonkeyPatch) -> None:
    first = load_app(BASIC)
    second = load_app(BASIC)
    f1 = next(f for f in first.functions if f.name == "flaky").user_function
    f2 = next(f for f in second.functions if f.name == "flaky").user_function
    assert f1 is not f2
    assert f1.__globals__["_attempts"] is not f2.__globals__["_attempts"]


def test_http_app_with_client_binding_and_route_prefix(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    root = write_app(
        tmp_path / "app",
        """
        import azure.durable_functions as df
        import azure.functions as func

        app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

        @app.route(route="start/{name}", methods=["POST"])
        @app.durable_client_input(client_name="client")
        async def start(req: func.HttpRequest, client) -> func.HttpResponse:
            return func.HttpResponse("ok")

        @app.route(route="plain")
        def plain(req: func.HttpRequest) -> str:
            return "plain"
        """,
        host={"version": "2.0", "extensions": {"http": {"routePrefix": ""}}, "functionTimeout": "1.02:00:30"},
    )
    app = load_app(root)
    start = next(f for f in app.functions if f.name == "start")
    assert start.kind == "http" and start.client_binding == "client" and start.is_async
    assert start.trigger["route"] == "start/{name}"
    plain = next(f for f in app.functions if f.name == "plain")
    assert plain.client_binding is None and not plain.is_async
    assert app.host.route_prefix == ""
    assert app.host.function_timeout_s == 86400 + 7200 + 30


def test_local_settings_do_not_override_environment(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    root = write_app(
        tmp_path / "app",
        """
        import os
        import azure.functions as func
        app = func.FunctionApp()
        SEEN = os.environ.get("LOADER_TEST_SETTING")

        @app.route(route="x")
        def x(req: func.HttpRequest) -> str:
            return SEEN
        """,
    )
    (root / "local.settings.json").write_text(
        json.dumps({"IsEncrypted": False, "Values": {"LOADER_TEST_SETTING": "from-file", "WEBSITE_SITE_NAME": "site"}}),
        encoding="utf-8",
    )
    clean_env.setenv("LOADER_TEST_SETTING", "from-env")
    app = load_app(root)
    assert app.functions[0].user_function.__globals__["SEEN"] == "from-env"
    assert os.environ["WEBSITE_SITE_NAME"] == "site"
    assert app.host.hub_name == "site"


def test_custom_script_name(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    root = write_app(
        tmp_path / "app",
        """
        import azure.functions as func
        app = func.FunctionApp()

        @app.route(route="x")
        def x(req: func.HttpRequest) -> str:
            return "x"
        """,
        script="main_app.py",
    )
    clean_env.setenv("PYTHON_SCRIPT_FILE_NAME", "main_app.py")
    assert [f.name for f in load_app(root).functions] == ["x"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("X = 1\n", "Could not find top level function app instances"),
        (
            "import azure.functions as func\na = func.FunctionApp()\nb = func.FunctionApp()\n",
            "More than one top level function app instances",
        ),
        ("import azure.functions as func\nraise RuntimeError('broken import here')\n", "broken import here"),
        (
            "import azure.functions as func\napp = func.FunctionApp()\n"
            "@app.function_name('Same')\n@app.route(route='a')\ndef a(req): return 'a'\n"
            "@app.function_name('same')\n@app.route(route='b')\ndef b(req): return 'b'\n",
            "'Same' and 'same'",
        ),
    ],
)
def test_load_errors(tmp_path: Path, clean_env: pytest.MonkeyPatch, source: str, message: str) -> None:
    root = write_app(tmp_path / "app", source)
    with pytest.raises(AppLoadError) as info:
        load_app(root)
    assert message in str(info.value)


def test_import_error_contains_traceback(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    root = write_app(tmp_path / "app", "import no_such_module_xyz\n")
    with pytest.raises(AppLoadError) as info:
        load_app(root)
    assert "Traceback" in str(info.value) and "no_such_module_xyz" in str(info.value)


def test_missing_script(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    (tmp_path / "host.json").write_text("{}", encoding="utf-8")
    with pytest.raises(AppLoadError) as info:
        load_app(tmp_path)
    assert str(tmp_path / "function_app.py") in str(info.value)


def test_bad_host_json(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    root = write_app(tmp_path / "app", "X = 1\n")
    (root / "host.json").write_text("{nope", encoding="utf-8")
    with pytest.raises(AppLoadError, match="not valid JSON"):
        load_app(root)
