"""Load a Python v2 function app the way the Functions host and Python worker do.

``load_app(root)`` reads ``host.json`` and ``local.settings.json``, imports the script module
(``PYTHON_SCRIPT_FILE_NAME``, default ``function_app.py``) with the app root first on
``sys.path``, finds the single top-level ``azure.functions.FunctionRegister`` and enumerates its
functions once. The loader never changes the working directory: the worker runs with cwd = app
root (``azure.durable_functions`` reads ``host.json`` from the cwd at import), so the CLI sets the
cwd before calling this.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import json
import logging
import os
import re
import sys
import threading
import traceback
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

from devhost.functions.model import AppLoadError, FunctionInfo, FunctionKind, HostConfig, LoadedApp

log = logging.getLogger("devhost.loader")

_TRIGGER_KINDS: dict[str, FunctionKind] = {
    "httptrigger": "http",
    "orchestrationtrigger": "orchestrator",
    "activitytrigger": "activity",
    "entitytrigger": "entity",
    "timertrigger": "timer",  # run by devhost.functions.timers
    "queuetrigger": "queue",  # run by devhost.storage.triggers (or listed with the reason it is not)
    "blobtrigger": "blob",
}
# Trigger dict key that overrides the durable name, per trigger kind.
_DURABLE_NAME_KEYS: dict[FunctionKind, str] = {
    "orchestrator": "orchestration",
    "activity": "activity",
    "entity": "entityName",
}
_ENV_REF = re.compile(r"%([^%]+)%")
_load_counter = itertools.count(1)
_load_lock = threading.Lock()
# Module names each earlier load brought into sys.modules, with the root they came from.
_loaded_modules: dict[str, Path] = {}


def load_app(root: Path, *, allow_missing_script: bool = False) -> LoadedApp:
    """Load the function app under ``root`` and describe its functions.

    ``allow_missing_script``: without the script the app has no functions (devhost then only hosts Durable
    state, e.g. for workers of the gRPC sidecar protocol) instead of refusing to load.
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise AppLoadError(f"App root {root} is not a directory.")
    load_local_settings(root)
    host = read_host_config(root)
    script_name = os.environ.get("PYTHON_SCRIPT_FILE_NAME") or "function_app.py"
    script = root / script_name
    if not script.is_file() and allow_missing_script:
        return LoadedApp(root=root, host=host, functions=[])
    if not script.is_file():
        raise AppLoadError(
            f"Script file {script} not found. The Python v2 model needs {script_name} in the app root "
            "(set PYTHON_SCRIPT_FILE_NAME to use another file)."
        )
    with _load_lock:
        module = _import_script(root, script)
    app = _find_function_register(module, script_name)
    try:
        functions = app.get_functions()
    except Exception as exc:
        raise AppLoadError(f"Indexing the functions of {script_name} failed: {type(exc).__name__}: {exc}") from exc
    infos = [_describe(fn) for fn in functions]
    _check_unique_names(infos)
    for note in startup_notes(host):
        log.warning("%s", note)
    enabled = _enabled(infos)
    # Imported here: devhost.storage.bindings imports this module.
    from devhost.storage.bindings import binding_notes  # noqa: PLC0415

    for note in binding_notes(enabled):
        log.warning("%s", note)
    return LoadedApp(root=root, host=host, functions=enabled)


def _enabled(infos: list[FunctionInfo]) -> list[FunctionInfo]:
    """The functions not turned off by an ``AzureWebJobs.<name>.Disabled`` setting of true or 1.

    The host indexes a disabled function (its bindings are checked above) but starts no listener for it: no
    route, no timer, and the Durable extension does not know it, so calling it fails the orchestration with
    the extension's "doesn't exist, is disabled" message. Linux App Service spells the setting with
    underscores; setting names are case-insensitive, as in the host's configuration.
    """
    settings = {key.lower().replace("_", "."): value for key, value in os.environ.items()}
    kept = []
    for info in infos:
        value = settings.get(f"azurewebjobs.{info.name.lower().replace('_', '.')}.disabled", "")
        if value.strip().lower() in ("true", "1"):
            log.info("Function '%s' is disabled (AzureWebJobs.%s.Disabled).", info.name, info.name)
        else:
            kept.append(info)
    return kept


# extensions.durableTask.storageProvider.type values the extension's provider factories answer to.
_STORAGE_PROVIDERS = {
    "azurestorage": "Azure Storage",
    "netherite": "Netherite",
    "mssql": "MSSQL",
    "azuremanaged": "Durable Task Scheduler",
}


def startup_notes(host: HostConfig) -> list[str]:
    """One line per host.json Durable setting devhost does not follow, saying what it does instead."""
    durable = _dict_at(_dict_at(host.raw, "extensions"), "durableTask")
    notes: list[str] = []
    provider = _dict_at(durable, "storageProvider").get("type")
    if provider is not None:
        label = _STORAGE_PROVIDERS.get(str(provider).lower())
        if label is None:
            notes.append(
                f"host.json storageProvider type '{provider}' is none the extension knows "
                f"(AzureStorage, Netherite, mssql, azureManaged); devhost keeps Durable state in SQLite regardless."
            )
        else:
            notes.append(
                f"host.json storageProvider '{provider}' ({label}): devhost keeps Durable state in SQLite in its data "
                f"directory instead and ignores the provider's settings; no {label} backend is contacted."
            )
    hub = durable.get("hubName")
    missing = _missing_refs(hub)
    if missing:
        names = ", ".join(missing)
        notes.append(
            f"host.json hubName '{hub}': app setting {names} is not set (the extension would keep the name as "
            f"written, which Azure Storage refuses); devhost uses task hub '{host.hub_name}' instead."
        )
    return notes


def _missing_refs(value: Any) -> list[str]:
    """The ``%NAME%`` app-setting references in ``value`` whose setting is unset or empty."""
    if not isinstance(value, str):
        return []
    return [name for name in _ENV_REF.findall(value) if not os.environ.get(name)]


def read_host_config(root: Path) -> HostConfig:
    """Read the host.json settings the devhost honours (defaults when the file is absent)."""
    path = root / "host.json"
    raw: dict[str, Any] = {}
    if path.is_file():
        raw = read_json_file(path)
        if not isinstance(raw, dict):
            raise AppLoadError(f"{path} must contain a JSON object.")
    extensions = _dict_at(raw, "extensions")
    http = _dict_at(extensions, "http")
    durable = _dict_at(extensions, "durableTask")
    route_prefix = http.get("routePrefix", "api")
    if not isinstance(route_prefix, str):
        raise AppLoadError("host.json extensions.http.routePrefix must be a string.")
    hub = _resolve_env_refs(durable.get("hubName")) or os.environ.get("WEBSITE_SITE_NAME") or "TestHubName"
    default_version = durable.get("defaultVersion")
    return HostConfig(
        route_prefix=route_prefix.strip("/"),
        hub_name=hub,
        max_concurrent_activities=_positive_int(durable, "maxConcurrentActivityFunctions", 10),
        max_concurrent_orchestrators=_positive_int(durable, "maxConcurrentOrchestratorFunctions", 10),
        max_orchestration_actions=_positive_int(durable, "maxOrchestrationActions", 100_000),
        extended_sessions=_bool(durable, "extendedSessionsEnabled", False),
        extended_session_idle_timeout_s=_positive_int(durable, "extendedSessionIdleTimeoutInSeconds", 30),
        default_version=str(default_version) if default_version not in (None, "") else None,
        function_timeout_s=_parse_timeout(raw.get("functionTimeout")),
        raw=raw,
    )


def read_json_file(path: Path) -> Any:
    """A JSON config file's content; AppLoadError with a one-line reason when it is not UTF-8 JSON."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise AppLoadError(
            f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); save it as UTF-8."
        ) from None
    except OSError as exc:
        raise AppLoadError(f"{path} cannot be read: {exc.strerror or exc}.") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise AppLoadError(f"{path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise AppLoadError(f"{path} is not valid JSON: nested too deeply") from None


def load_local_settings(root: Path) -> None:
    """Copy ``local.settings.json`` ``Values`` into ``os.environ`` without overriding set variables."""
    path = root / "local.settings.json"
    if not path.is_file():
        return
    data = read_json_file(path)
    if not isinstance(data, dict):
        raise AppLoadError(f'{path} must contain a JSON object like {{"Values": {{"NAME": "value"}}}}.')
    values = data.get("Values")
    if values is None:
        return
    if not isinstance(values, dict):
        raise AppLoadError(f'{path}: "Values" must be an object of setting names to strings.')
    # Core Tools reads Values as strings; anything else is a mistake worth naming, not a str() guess.
    wrong = [key for key, value in values.items() if value is not None and not isinstance(value, str)]
    if wrong:
        raise AppLoadError(f'{path}: "Values" must map names to strings; not a string: {", ".join(wrong)}.')
    for key, value in values.items():
        if key not in os.environ and value is not None:
            os.environ[key] = value


def _dict_at(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _resolve_env_refs(value: Any) -> str | None:
    """Resolve ``%VAR%`` app-setting references; None when empty or any reference is unset."""
    if not isinstance(value, str) or not value:
        return None
    missing = False

    def repl(match: re.Match[str]) -> str:
        nonlocal missing
        resolved = os.environ.get(match.group(1))
        if not resolved:
            missing = True
            return ""
        return resolved

    text = _ENV_REF.sub(repl, value)
    return None if missing or not text else text


def _positive_int(section: dict[str, Any], key: str, default: int) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AppLoadError(f"host.json extensions.durableTask.{key} must be a positive integer, got {value!r}.")
    return value


def _bool(section: dict[str, Any], key: str, default: bool) -> bool:
    value = section.get(key, default)
    # The host's configuration binder takes "true"/"false" strings too.
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise AppLoadError(f"host.json extensions.durableTask.{key} must be true or false, got {value!r}.")
    return value


def _parse_timeout(value: Any) -> float | None:
    """Parse host.json functionTimeout (``[d.]hh:mm:ss[.fff]``; ``-1``/absent = unlimited)."""
    if value is None or value == "-1":
        return None
    if not isinstance(value, str):
        raise AppLoadError(f"host.json functionTimeout must be a string like '00:10:00', got {value!r}.")
    match = re.fullmatch(r"(?:(\d+)\.)?(\d{1,2}):(\d{1,2}):(\d{1,2}(?:\.\d+)?)", value.strip())
    if not match:
        raise AppLoadError(f"host.json functionTimeout {value!r} is not in the hh:mm:ss format.")
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _is_under(path_text: str | None, root: Path) -> bool:
    if not path_text:
        return False
    try:
        Path(path_text).resolve().relative_to(root)
    except (ValueError, OSError):
        return False
    return True


def _purge_previous_app_modules() -> None:
    """Drop modules earlier loads imported from app roots so this load imports fresh copies.

    Only modules the loader itself brought in (and whose file lives under that load's root) are
    dropped, so third-party packages and the devhost/test modules are never touched. Objects of a
    previous load stay alive through the references its engine holds.
    """
    for name, origin in list(_loaded_modules.items()):
        module = sys.modules.get(name)
        if module is not None and _is_under(getattr(module, "__file__", None), origin):
            del sys.modules[name]
        _loaded_modules.pop(name, None)


def _import_script(root: Path, script: Path) -> ModuleType:
    _purge_previous_app_modules()
    root_text = str(root)
    if root_text in sys.path:
        sys.path.remove(root_text)
    sys.path.insert(0, root_text)
    module_name = f"{script.stem}__devhost{next(_load_counter)}"
    spec = importlib.util.spec_from_file_location(module_name, script)
    if spec is None or spec.loader is None:
        raise AppLoadError(f"Cannot import {script}.")
    module = importlib.util.module_from_spec(spec)
    before = set(sys.modules)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        _record_new_modules(before, root)
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        text = "".join(traceback.format_exception(exc))
        # The reason first (e.g. a setting the app rejected at import), then the stack, as the host logs it.
        summary = traceback.format_exception_only(exc)[-1].strip()
        raise AppLoadError(f"Importing {script} failed: {summary}\n{text}") from exc
    _record_new_modules(before, root)
    return module


def _record_new_modules(before: set[str], root: Path) -> None:
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        if module is not None and _is_under(getattr(module, "__file__", None), root):
            _loaded_modules[name] = root


def _find_function_register(module: ModuleType, script_name: str) -> Any:
    import azure.functions as func  # noqa: PLC0415 - keep the devhost importable without side effects

    apps = [(name, value) for name, value in vars(module).items() if isinstance(value, func.FunctionRegister)]
    if not apps:
        raise AppLoadError(
            f"Could not find top level function app instances in {script_name}. "
            "Define exactly one module-level func.FunctionApp or df.DFApp (e.g. app = df.DFApp())."
        )
    if len(apps) > 1:
        names = ", ".join(name for name, _ in apps)
        raise AppLoadError(
            f"More than one top level function app instances found in {script_name} ({names}). "
            "Keep a single FunctionApp/DFApp and register blueprints into it."
        )
    return apps[0][1]


def _describe(fn: Any) -> FunctionInfo:
    name: str = fn.get_function_name()
    trigger = fn.get_trigger()
    trigger_dict: dict[str, Any] = trigger.get_dict_repr() if trigger is not None else {}
    bindings = [b.get_dict_repr() for b in fn.get_bindings()]
    trigger_type = str(trigger_dict.get("type", "")).lower()
    kind: FunctionKind = _TRIGGER_KINDS.get(trigger_type, "other")
    durable_name: str | None = None
    if kind in _DURABLE_NAME_KEYS:
        override = trigger_dict.get(_DURABLE_NAME_KEYS[kind])
        durable_name = override if isinstance(override, str) and override else name
    user_function = fn.get_user_function()
    binding_names = {str(b.get("name")) for b in bindings}
    try:
        params = inspect.signature(user_function).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    wants_context = "context" in params and "context" not in binding_names
    _check_parameters(name, user_function, set(params), binding_names)
    client_binding = next(
        (str(b["name"]) for b in bindings if str(b.get("type", "")).lower() == "durableclient" and b.get("name")),
        None,
    )
    return FunctionInfo(
        name=name,
        kind=kind,
        trigger=trigger_dict,
        bindings=bindings,
        user_function=user_function,
        durable_name=durable_name,
        is_async=inspect.iscoroutinefunction(user_function),
        wants_context=wants_context,
        client_binding=client_binding,
    )


def _check_parameters(name: str, user_function: Any, params: set[str], binding_names: set[str]) -> None:
    """Refuse a function whose parameters and bindings differ, with the Python worker's FunctionLoadError text."""
    # azure_functions_runtime/functions.py (azure-functions-runtime 1.3.0), Registry.is_context_required and
    # validate_function_params; the worker fails indexing with these, so no function of the app is loaded.
    bound = binding_names - {"$return"}
    if "context" in params and "context" not in bound:
        params = params - {"context"}
        _check_context_annotation(name, user_function)
    if params - bound:
        raise _function_load_error(
            name,
            "the following parameters are declared in Python but not in the function definition "
            f"(function.json or function decorators):  {params - bound!r}",
        )
    if bound - params:
        raise _function_load_error(
            name,
            "Extra parameters in binding definition \u2014 the following parameters are declared as bindings "
            f"but are not present in Python: {bound - params!r}",
        )


def _check_context_annotation(name: str, user_function: Any) -> None:
    try:
        annotation = typing.get_type_hints(user_function).get("context")
    except Exception:  # noqa: BLE001 - an annotation Python cannot resolve is the app's, not checked here
        return
    if annotation is not None and (not isinstance(annotation, type) or annotation.__name__ != "Context"):
        raise _function_load_error(
            name, f'the "context" parameter is expected to be of type azure.functions.Context, got "{annotation!r}"'
        )


def _function_load_error(name: str, message: str) -> AppLoadError:
    return AppLoadError(
        f"Worker failed to index functions: FunctionLoadError: cannot load the {name} function: {message}"
    )


def _check_unique_names(infos: list[FunctionInfo]) -> None:
    seen: dict[str, str] = {}
    duplicates: list[str] = []
    for info in infos:
        key = info.name.lower()
        if key in seen:
            duplicates.append(f"'{seen[key]}' and '{info.name}'")
        else:
            seen[key] = info.name
    if duplicates:
        raise AppLoadError(
            "Function names must be unique (compared case-insensitively): " + ", ".join(duplicates) + "."
        )
