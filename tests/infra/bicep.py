"""Helpers for tests on the parsed Bicep (pycep-parser): files, resources, variables, role assignments."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from pycep import BicepParser

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
MODULES = INFRA / "modules"
GUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def bicep_files() -> list[Path]:
    """Every .bicep file under infra/."""
    return sorted(INFRA.rglob("*.bicep"))


@cache
def parse(path: Path) -> dict[str, Any]:
    """The pycep tree of one file (cached)."""
    return cast(dict[str, Any], BicepParser().parse(text=path.read_text(encoding="utf-8")))


def module(name: str) -> dict[str, Any]:
    """The parsed tree of ``infra/modules/<name>.bicep``."""
    return parse(MODULES / f"{name}.bicep")


def body(declaration: dict[str, Any]) -> dict[str, Any]:
    """The ``config`` of a resource or module, unwrapping an ``if (...)`` condition."""
    config = declaration["config"]
    if "condition" in config and "config" in config and isinstance(config["config"], dict):
        return config["config"]
    return config


def variable(tree: dict[str, Any], name: str) -> Any:
    """The value of a ``var``."""
    return tree["variables"][name]["value"]


def resources(tree: dict[str, Any], rtype: str | None = None) -> dict[str, dict[str, Any]]:
    """Resources of a file, optionally of one type (case-insensitive), by symbolic name."""
    found = tree.get("resources", {}) or {}
    if rtype is None:
        return dict(found)
    return {k: v for k, v in found.items() if str(v["type"]).lower() == rtype.lower()}


def walk(node: Any) -> Iterator[Any]:
    """Every node of a parsed tree, depth first."""
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def function_names(node: Any) -> set[str]:
    """Names of every function called anywhere under ``node``."""
    names: set[str] = set()
    for item in walk(node):
        if isinstance(item, dict) and isinstance(item.get("function"), dict):
            names.add(str(item["function"].get("type", "")))
    return names


@dataclass(frozen=True)
class RoleAssignment:
    """One role assignment declared in a module, with its role GUID resolved from the named var."""

    file: str
    symbol: str
    role_var: str
    role_id: str
    principal: str
    conditional: bool


def role_assignments() -> list[RoleAssignment]:
    """Every ``Microsoft.Authorization/roleAssignments`` in infra/, role ids resolved to GUIDs."""
    found: list[RoleAssignment] = []
    for path in bicep_files():
        tree = parse(path)
        for symbol, res in resources(tree, "Microsoft.Authorization/roleAssignments").items():
            cfg = body(res)
            role_def = cfg["properties"]["roleDefinitionId"]["function"]
            assert role_def["type"] == "subscription_resource_id", (
                f"{path.name}:{symbol} must use subscriptionResourceId"
            )
            role_var = role_def["parameters"]["resource_name_1"]
            value = variable(tree, role_var)
            assert isinstance(value, str) and GUID_RE.match(value), f"{path.name}:{role_var} must be a GUID literal"
            found.append(
                RoleAssignment(
                    file=path.name,
                    symbol=symbol,
                    role_var=role_var,
                    role_id=value,
                    principal=str(cfg["properties"]["principalId"]),
                    conditional="condition" in res["config"],
                )
            )
    return found


def app_settings_vars() -> dict[str, dict[str, Any]]:
    """The app-setting objects of the function app module, by var name."""
    tree = module("functionapp")
    names = ("appCodeSettings", "platformSettings", "azureStorageDurableSettings", "durableTaskSchedulerSettings")
    return {name: variable(tree, name) for name in names}


def app_setting_names() -> set[str]:
    """Every app setting name the Bicep can set (both Durable backends)."""
    return {key for settings in app_settings_vars().values() for key in settings}
