"""``python -m devhost agents|workflows|teams apply|list|show`` against the app on a devhost process, its
definitions in Azurite: the example files apply, a second apply changes nothing, an edit is a new version, and
an invalid file prints every problem with its path."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devhost.jobs.definitions import CliError, load_documents
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess

EXAMPLES = REPO_ROOT / "examples" / "definitions"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    # Development storage, as local.settings.example.json asks for it: devhost starts Azurite for the app.
    env = {"AzureWebJobsStorage": "UseDevelopmentStorage=true", "DEFINITIONS_TABLE": "cli" + uuid.uuid4().hex[:12]}
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("defs-host"), env=env)
    proc.start()
    yield proc
    proc.stop()


def cli(host: DevHostProcess, *args: str) -> subprocess.CompletedProcess[str]:
    assert host.keys is not None
    command = [sys.executable, "-m", "devhost", *args, "--url", host.base_url, "--key", host.keys.function]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False)


def test_apply_the_examples_then_list_and_show(host: DevHostProcess) -> None:
    first = cli(host, "agents", "apply", "-f", str(EXAMPLES / "agents.yaml"))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "created agent sales-analyst (version 1)" in first.stdout
    assert "created agent report-writer (version 1)" in first.stdout
    for plural, name in (("workflows", "workflow.yaml"), ("teams", "team.yaml")):
        done = cli(host, plural, "apply", "-f", str(EXAMPLES / name))
        assert done.returncode == 0 and "created" in done.stdout, done.stdout + done.stderr
    again = cli(host, "agents", "apply", "-f", str(EXAMPLES / "agents.yaml"))
    assert "unchanged agent sales-analyst (version 1)" in again.stdout
    listed = cli(host, "agents", "list")
    assert "sales-analyst" in listed.stdout and "report-writer" in listed.stdout
    shown = cli(host, "workflows", "show", "regional-review")
    assert shown.returncode == 0 and "kind: condition" in shown.stdout and "version 1 of 1" in shown.stdout


def test_an_edit_is_a_new_version_and_the_old_one_stays(host: DevHostProcess, tmp_path: Path) -> None:
    edited = tmp_path / "writer.json"
    edited.write_text('{"id": "note-writer", "name": "Note writer", "instructions": "Write a note."}', encoding="utf-8")
    assert "created agent note-writer (version 1)" in cli(host, "agents", "apply", "-f", str(edited)).stdout
    edited.write_text(
        '{"id": "note-writer", "name": "Note writer", "instructions": "Write a longer note."}', encoding="utf-8"
    )
    assert "updated agent note-writer (version 2)" in cli(host, "agents", "apply", "-f", str(edited)).stdout
    old = cli(host, "agents", "show", "note-writer", "--version", "1", "--json")
    assert '"instructions": "Write a note."' in old.stdout


def test_an_invalid_file_prints_every_problem(host: DevHostProcess, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "id: broken\nname: Broken\nnodes:\n"
        "  - {id: a, kind: agent, agent: ghost, input: {prompt: {value: hi}}}\n"
        "  - {id: b, kind: agent, agent: report-writer, after: [c], input: {prompt: {value: hi}}}\n"
        "  - {id: c, kind: agent, agent: report-writer, after: [b], input: {prompt: {value: hi}}}\n",
        encoding="utf-8",
    )
    done = cli(host, "workflows", "apply", "-f", str(bad))
    assert done.returncode == 2
    out = done.stdout + done.stderr
    assert "nodes.0.agent: there is no agent 'ghost' [UNKNOWN_AGENT]" in out
    assert "nodes.1.after: nodes b → c → b form a cycle; repeat nodes with a loop node" in out
    wrong_kind = cli(host, "teams", "apply", "-f", str(EXAMPLES / "agents.yaml"))
    assert wrong_kind.returncode == 2


def test_load_documents_reads_yaml_streams_lists_and_json(tmp_path: Path) -> None:
    assert [d["id"] for d in load_documents(EXAMPLES / "agents.yaml")] == ["sales-analyst", "report-writer"]
    listed = tmp_path / "list.yaml"
    listed.write_text("- {id: a, name: A}\n- {id: b, name: B}\n", encoding="utf-8")
    assert [d["id"] for d in load_documents(listed)] == ["a", "b"]
    for text, message in (("id: [", "not valid YAML"), ("- 1\n", "mapping with an 'id'"), ("", "no definition")):
        broken = tmp_path / "broken.yaml"
        broken.write_text(text, encoding="utf-8")
        with pytest.raises(CliError, match=message):
            load_documents(broken)


def test_delete_over_http_archives(host: DevHostProcess) -> None:
    assert host.keys is not None
    headers = {"x-functions-key": host.keys.function}
    body = {"id": "scratch", "name": "Scratch", "instructions": "Nothing."}
    assert host.client.post("/api/agents", json=body, headers=headers).status_code == 201
    deleted = host.client.delete("/api/agents/scratch", headers=headers)
    assert deleted.status_code == 200 and deleted.json()["archived"] is True
    assert host.client.get("/api/agents/scratch", headers=headers).json()["error"]["code"] == "DEFINITION_NOT_FOUND"
    assert host.client.delete("/api/agents/scratch").status_code == 401  # the function key is required
