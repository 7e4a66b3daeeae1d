"""Helper whose import-time code fails."""


def make_settings() -> dict[str, str]:
    """Fail like a misconfigured app does."""
    raise KeyError("MISSING_SETTING_FOR_TEST")
