"""README's examples as a newcomer runs them: a fresh devhost with no settings and no file copied, the example
definitions applied with the CLI, then every request of docs/api.http in order, each answering a status it
names (`# expect:`), each answer as the OpenAPI document (docs/openapi.json) describes it.

docs/api.http is written for VS Code's REST Client: ``@var = value`` lines, ``###`` between requests,
``# @name x`` to keep an answer, ``{{x.response.body.$.a.b}}`` to use it, ``{{$processEnv NAME}}``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.contract.openapi import build_document
from tests.api.schema_check import schema_problems
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess

HTTP_FILE = REPO_ROOT / "docs" / "api.http"
README = REPO_ROOT / "README.md"
APPLY = [
    ["agents", "apply", "-f", "examples/runs/agents.yaml"],
    ["workflows", "apply", "-f", "examples/runs/workflow.yaml"],
    ["teams", "apply", "-f", "examples/runs/team.yaml"],
]
VARIABLE = re.compile(r"\{\{\s*([^}]+?)\s*\}\}")
# A hang guard for `# until:` on a loaded machine, not a speed target.
UNTIL_S = 240.0


@dataclass
class Request:
    """One request of the file, with what the test reads from its comments."""

    title: str
    method: str
    url: str
    headers: dict[str, str]
    body: str
    name: str | None = None
    expect: list[int] = field(default_factory=list)
    until: tuple[str, str] | None = None


def parse(text: str) -> tuple[dict[str, str], list[Request]]:
    """The file's variables (before the first ``###``) and its requests, in order."""
    preamble, *blocks = re.split(r"^###", text, flags=re.MULTILINE)
    variables: dict[str, str] = {}
    for line in preamble.splitlines():
        if line.startswith("@") and "=" in line:
            key, _, value = line[1:].partition("=")
            variables[key.strip()] = value.strip()
    requests: list[Request] = []
    for block in blocks:
        title, *lines = block.splitlines()
        request = Request(title.strip(), "", "", {}, "")
        body: list[str] | None = None
        for line in lines:
            stripped = line.strip()
            if body is not None:
                body.append(line)
            elif not request.method:
                if stripped.startswith("# @name "):
                    request.name = stripped.split()[2]
                elif stripped.startswith("# expect:"):
                    request.expect = [int(s) for s in stripped.split(":", 1)[1].split()]
                elif stripped.startswith("# until:"):
                    path, _, value = stripped.split(":", 1)[1].partition("==")
                    request.until = (path.strip(), value.strip())
                elif stripped and not stripped.startswith("#"):
                    request.method, request.url = stripped.split(maxsplit=1)
            elif not stripped:
                body = []
            else:
                key, _, value = stripped.partition(":")
                request.headers[key.strip()] = value.strip()
        request.body = "\n".join(body or []).strip()
        assert request.method, f"no request in block {request.title!r}"
        requests.append(request)
    return variables, requests


def json_path(value: Any, path: str) -> Any:
    """``$.a.b.0`` inside a JSON value (None when it is not there)."""
    current = value
    for part in path.removeprefix("$").strip(".").split("."):
        if isinstance(current, dict):
            current = current.get(part)
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return None
    return current


def fill(text: str, variables: dict[str, str], answers: dict[str, Any], env: dict[str, str]) -> str:
    """The text with every ``{{...}}`` replaced, as REST Client does."""

    def one(match: re.Match[str]) -> str:
        ref = match.group(1)
        if ref.startswith("$processEnv "):
            return env[ref.split()[1]]
        if ".response.body." in ref:
            name, _, path = ref.partition(".response.body.")
            found = json_path(answers[name], path)
            assert found is not None, f"{{{{{ref}}}}} is not in the answer of {name}"
            return str(found)
        return fill(variables[ref], variables, answers, env)

    return VARIABLE.sub(one, text)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    # What a fresh clone has: no storage setting in the environment (and, in CI, no local.settings.json).
    with pytest.MonkeyPatch.context() as patch:
        for name in [k for k in os.environ if k.startswith("AzureWebJobsStorage")]:
            patch.delenv(name)
        proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("fresh") / "data", default_storage=True)
        proc.start()
    yield proc
    proc.stop()


def cli(host: DevHostProcess, *args: str) -> subprocess.CompletedProcess[str]:
    assert host.keys is not None
    env = {**os.environ, "DEVHOST_FUNCTION_KEY": host.keys.function, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "devhost", *args, "--url", host.base_url],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_a_fresh_host_keeps_definitions_in_the_storage_it_starts(host: DevHostProcess) -> None:
    assert "AzureWebJobsStorage was not set, so the local default" in host.output()
    assert host.keys is not None
    answered = host.client.get("/api/agents", headers={"x-functions-key": host.keys.function})
    assert (answered.status_code, answered.json()) == (200, {"agents": []})


def test_every_request_of_the_http_file_answers_as_it_says(host: DevHostProcess) -> None:
    assert host.keys is not None
    for args in APPLY:
        applied = cli(host, *args)
        assert applied.returncode == 0, applied.stdout + applied.stderr
    variables, requests = parse(HTTP_FILE.read_text(encoding="utf-8"))
    variables["host"] = host.base_url
    env = {"DEVHOST_FUNCTION_KEY": host.keys.function}
    assert len(requests) >= 20 and all(r.expect for r in requests), [r.title for r in requests if not r.expect]
    answers: dict[str, Any] = {}
    document = build_document()
    with httpx.Client(timeout=60.0) as client:
        for request in requests:
            url = fill(request.url, variables, answers, env)
            headers = {k: fill(v, variables, answers, env) for k, v in request.headers.items()}
            body = fill(request.body, variables, answers, env) if request.body else None
            if body:
                json.loads(body)  # the file's bodies are JSON as written
            deadline = time.monotonic() + UNTIL_S
            while True:
                response = client.request(request.method, url, headers=headers, content=body)
                if request.until is None or response.status_code != 200:
                    break
                path, wanted = request.until
                now = json_path(response.json(), path)
                if str(now) == wanted:
                    break
                assert now not in ("failed", "cancelled"), f"{request.title}: {response.text[:2000]}"
                assert time.monotonic() < deadline, f"{request.title}: still {now!r} after {UNTIL_S:.0f} s"
                time.sleep(0.5)
            where = f"{request.method} {url} ({request.title})"
            assert response.status_code in request.expect, f"{where}: {response.status_code} {response.text[:1000]}"
            if response.status_code == 401:
                assert response.content == b""  # the Functions host refuses before the app runs, as on Azure
            elif response.status_code >= 400:
                error = response.json()["error"]
                assert error["code"] and error["message"], where
            if response.headers.get("content-type", "").startswith("application/json"):
                # Every answer is one the OpenAPI document describes (docs/openapi.json).
                path = httpx.URL(url).path
                assert schema_problems(document, request.method, path, response.status_code, response.json()) == []
            if request.name:
                answers[request.name] = response.json()
    # What the examples show is true of the data: the change the person approves is computed from the rows.
    brief = answers["brief"]["waiting"]
    assert brief["question"].startswith("Returns changed by 48.75% in North"), brief
    assert brief["expires_at"] and brief["expiry_default"] is None


def test_the_readme_names_only_tools_the_default_app_has() -> None:
    readme, examples = README.read_text(encoding="utf-8"), HTTP_FILE.read_text(encoding="utf-8")
    for missing in ("http.exchange_rates", "mcp.crm.lookup_customer", "http.weather"):
        assert missing not in readme, missing
    assert "http.exchange_rates" not in examples and "mcp.crm.lookup_customer" not in examples
    helped = subprocess.run(
        [sys.executable, "-m", "devhost", "ask", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert "http.weather" not in helped.stdout and "function.growth_rate" in helped.stdout


def readme_blocks() -> list[list[str]]:
    """The lines of each bash block of README.md."""
    return [
        block.strip().splitlines()
        for block in re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    ]


def test_the_readme_commands_run_as_printed(host: DevHostProcess, tmp_path: Path) -> None:
    # Every devhost command of the README without a placeholder, and its curl session, as printed: only the
    # host's address differs (and the key file, which a fresh clone's `make run` writes to .devhost/).
    assert host.keys is not None
    commands = [
        line.split("   #")[0].strip()
        for block in readme_blocks()
        for line in block
        if line.startswith(".venv/bin/python -m devhost ") and not re.search(r"[A-Z]{2,}_ID|<\w+>", line)
    ]
    assert len(commands) >= 8, commands
    env = {**os.environ, "DEVHOST_URL": host.base_url, "DEVHOST_FUNCTION_KEY": host.keys.function, "COLUMNS": "200"}
    for command in commands:
        done = subprocess.run(
            command,
            shell=True,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        # 4: a job that asks a person, run without a terminal (it prints how to answer).
        assert done.returncode in (0, 4), f"{command}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        if done.returncode == 4:
            assert "jobs answer" in done.stdout, done.stdout
    (tmp_path / ".devhost").mkdir()
    (tmp_path / ".devhost" / "keys.json").write_text(json.dumps({"functionKeys": {"default": host.keys.function}}))
    session = next(block for block in readme_blocks() if any(line.startswith("curl ") for line in block))
    setup = "\n".join(line for line in session if not line.startswith("curl "))
    job = None
    for line in (line for line in session if line.startswith("curl ")):
        line = line.split("  #")[0].replace("localhost:7071", host.base_url.removeprefix("http://"))
        if "<job>" in line:
            assert job, line
            line = line.replace("<job>", job)
        done = subprocess.run(
            ["bash", "-c", f"set -e\n{setup}\n{line}"], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert not isinstance(answer.get("error"), dict), f"{line}: {answer}"
        job = answer.get("id", job)
