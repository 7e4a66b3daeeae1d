"""Every Bicep file parses, and the files agree with each other (there is no Bicep compiler in CI)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.infra.bicep import INFRA, REPO, bicep_files, body, parse


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: str(p.relative_to(INFRA)))
def test_every_bicep_file_parses(path: Path) -> None:
    tree = parse(path)
    assert tree.get("resources") or tree.get("modules"), f"{path.name} declares nothing"


def test_expected_files_exist() -> None:
    names = {p.relative_to(INFRA).as_posix() for p in bicep_files()}
    assert "main.bicep" in names
    for mod in (
        "identity",
        "storage",
        "monitoring",
        "functionapp",
        "openai",
        "search",
        "sql",
        "dts",
        "workbook",
        "alerts",
    ):
        assert f"modules/{mod}.bicep" in names


def test_main_targets_the_subscription_and_creates_the_resource_group() -> None:
    text = (INFRA / "main.bicep").read_text()
    assert re.search(r"^targetScope = 'subscription'$", text, re.M)
    tree = parse(INFRA / "main.bicep")
    rgs = [r for r in tree["resources"].values() if r["type"] == "Microsoft.Resources/resourceGroups"]
    assert len(rgs) == 1


def test_module_calls_match_module_parameters_and_outputs() -> None:
    main_path = INFRA / "main.bicep"
    main = parse(main_path)
    outputs_by_symbol: dict[str, set[str]] = {}
    for symbol, mod in main["modules"].items():
        target = (INFRA / mod["detail"]["path"]).resolve()
        assert target.is_file(), f"module {symbol} points at a missing file"
        child = parse(target)
        declared = child.get("parameters", {}) or {}
        passed = set(body(mod).get("params", {}) or {})
        required = {name for name, p in declared.items() if p.get("default") is None}
        assert not passed - set(declared), f"{symbol}: unknown params {sorted(passed - set(declared))}"
        assert not required - passed, f"{symbol}: missing params {sorted(required - passed)}"
        outputs_by_symbol[symbol] = set(child.get("outputs", {}) or {})
    for symbol, output in re.findall(r"\b(\w+)\.outputs\.(\w+)", main_path.read_text()):
        assert output in outputs_by_symbol[symbol], f"main.bicep reads {symbol}.outputs.{output}, which is not declared"


def test_loaded_text_files_exist() -> None:
    for path in bicep_files():
        for rel in re.findall(r"load(?:Text|Json)Content\('([^']+)'\)", path.read_text()):
            assert (path.parent / rel).is_file(), f"{path.name} loads missing {rel}"


def test_parameters_file_matches_main_parameters() -> None:
    declared = parse(INFRA / "main.bicep")["parameters"]
    given = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert not set(given) - set(declared), "main.parameters.json sets unknown parameters"
    required = {name for name, p in declared.items() if p.get("default") is None}
    assert required <= set(given), f"required parameters not mapped: {sorted(required - set(given))}"
    assert given["principalId"]["value"] == "${AZURE_PRINCIPAL_ID}"
    assert given["environmentName"]["value"] == "${AZURE_ENV_NAME}"
    assert given["location"]["value"] == "${AZURE_LOCATION}"


def test_azure_yaml_declares_the_function_service_and_the_hook() -> None:
    text = (REPO / "azure.yaml").read_text()
    assert re.search(r"^services:\n  api:\n    project: \.\n    language: python\n    host: function$", text, re.M)
    for hook in re.findall(r"run: \./(infra/hooks/\S+)", text):
        assert (REPO / hook).is_file(), hook
    assert "postprovision.sh" in text
