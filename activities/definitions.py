"""The load_definition activity: one pinned version of a definition from the store, for a run's orchestrator.

Its result is recorded in the Durable history, so a replay sees the very definition the run started with.
"""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df

from shared.jobs.runs import LOAD_DEFINITION


def load_definition(payload: dict[str, Any]) -> dict[str, Any]:
    """The definition ``{kind, id, version}`` as JSON (field aliases, as the API takes it)."""
    from shared.definitions.store import get_store
    from shared.runtime.settings import get_settings

    store = get_store(get_settings())
    definition = store.get_version(str(payload["kind"]), str(payload["id"]), int(payload["version"]))
    return definition.model_dump(mode="json", by_alias=True)


def register(bp: df.Blueprint) -> None:
    """Register the activity on the blueprint."""
    bp.function_name(LOAD_DEFINITION)(
        bp.activity_trigger(input_name="payload", activity=LOAD_DEFINITION)(load_definition)
    )
