"""Blueprint with renamed functions, to check durable names and blueprint registration."""

import azure.durable_functions as df

bp = df.Blueprint()


@bp.function_name("renamed_activity_function")
@bp.activity_trigger(input_name="item", activity="Renamed")
def renamed_impl(item: str) -> str:
    """Activity registered under a durable name different from its function name."""
    return f"renamed:{item}"
