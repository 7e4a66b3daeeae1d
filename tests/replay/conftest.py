"""The app's orchestrators, indexed once per session (the SDK refuses to index the same app twice)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.app_functions import app_functions


@pytest.fixture(scope="session")
def orchestrators() -> dict[str, Callable[[str], str]]:
    """The SDK handles of the app's orchestrators, by function name."""
    functions = app_functions()
    return {name: functions[name].get_user_function() for name in ("job_orchestrator", "workflow_part")}
