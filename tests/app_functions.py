"""The app's functions, indexed once per process: the SDK refuses to index the same app twice."""

from __future__ import annotations

from functools import cache

from azure.functions.decorators.function_app import Function


@cache
def app_functions() -> dict[str, Function]:
    """Every function ``function_app.py`` registers, by function name."""
    import function_app

    return {fn.get_function_name(): fn for fn in function_app.app.get_functions()}
