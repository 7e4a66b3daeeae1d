"""Query-value parsing of the Durable HTTP API (pure functions; the endpoints are tested end to end)."""

from datetime import UTC, datetime

import pytest

from devhost.durable.http_wire import parse_bool, parse_datetime, parse_statuses
from devhost.functions.model import InvalidRequest


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T10:00:00Z", datetime(2024, 5, 1, 10, 0, tzinfo=UTC)),
        ("2024-05-01T10:00:00.1234567Z", datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2024-05-01T10:00:00.500000", datetime(2024, 5, 1, 10, 0, 0, 500000, tzinfo=UTC)),
        ("2024-05-01", datetime(2024, 5, 1, tzinfo=UTC)),
        ("2024-05-01T10:00", datetime(2024, 5, 1, 10, 0, tzinfo=UTC)),
        ("2024-05-01T10:00:00+02:00", datetime(2024, 5, 1, 8, 0, tzinfo=UTC)),
        ("2024-05-01T10:00:00 02:00", datetime(2024, 5, 1, 8, 0, tzinfo=UTC)),
        ("2024-05-01T10:00:00-0130", datetime(2024, 5, 1, 11, 30, tzinfo=UTC)),
    ],
)
def test_parse_datetime(text: str, expected: datetime) -> None:
    assert parse_datetime("createdTimeFrom", text) == expected


@pytest.mark.parametrize("text", ["yesterday", "2024-13-01", "2024-05-01T25:00:00Z", "2024-05-01T10:00:00+2"])
def test_parse_datetime_rejects(text: str) -> None:
    with pytest.raises(InvalidRequest, match="createdTimeFrom"):
        parse_datetime("createdTimeFrom", text)


def test_parse_bool_follows_dotnet_try_parse() -> None:
    assert parse_bool("True", False) is True
    assert parse_bool(" false ", True) is False
    assert parse_bool("yes", True) is True
    assert parse_bool("1", False) is False
    assert parse_bool(None, True) is True


def test_parse_statuses() -> None:
    assert parse_statuses("running, PENDING,,Completed") == ["Running", "Pending", "Completed"]
    assert parse_statuses("") is None
    assert parse_statuses(None) is None
    with pytest.raises(InvalidRequest, match="'Sleeping' is not a valid runtimeStatus"):
        parse_statuses("Running,Sleeping")
