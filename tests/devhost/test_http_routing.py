"""Route template parsing and matching (pure functions; the HTTP behaviour is covered end to end elsewhere)."""

import pytest

from devhost.functions.http.routing import RouteTable, RouteTemplate, RouteTemplateError, split_path


def _table(*templates: str, prefix: str = "api") -> RouteTable[str]:
    table: RouteTable[str] = RouteTable(prefix)
    for t in templates:
        table.add(t, None, t)
    return table


def _resolve(table: RouteTable[str], path: str, method: str = "GET") -> tuple[str, dict[str, str]] | None:
    found = table.resolve(method, path)
    return (found[0].target, found[1]) if found else None


def test_literal_beats_constrained_beats_plain_parameter_regardless_of_order() -> None:
    table = _table("items/{name}", "items/{id:int}", "items/special")
    assert _resolve(table, "/api/items/special") == ("items/special", {})
    assert _resolve(table, "/api/items/7") == ("items/{id:int}", {"id": "7"})
    assert _resolve(table, "/api/items/x7") == ("items/{name}", {"name": "x7"})


def test_matching_is_case_insensitive_and_values_keep_their_case() -> None:
    table = _table("Orders/{Id}")
    assert _resolve(table, "/API/orders/AbC") == ("Orders/{Id}", {"Id": "AbC"})


def test_prefix_must_match_and_may_be_empty() -> None:
    assert _resolve(_table("x"), "/x") is None
    assert _resolve(_table("x", prefix=""), "/x") == ("x", {})
    assert _resolve(_table("x", prefix="v1/api"), "/v1/api/x") == ("x", {})


@pytest.mark.parametrize(
    ("template", "path", "expected"),
    [
        ("n/{n:int}", "/api/n/-12", {"n": "-12"}),
        ("n/{n:int}", "/api/n/99999999999", None),
        ("n/{n:long}", "/api/n/99999999999", {"n": "99999999999"}),
        ("n/{n:min(1)}", "/api/n/0", None),
        ("n/{n:max(5)}", "/api/n/5", {"n": "5"}),
        ("n/{n:range(2,4)}", "/api/n/5", None),
        ("a/{x:alpha}", "/api/a/abcXYZ", {"x": "abcXYZ"}),
        ("a/{x:alpha}", "/api/a/ab1", None),
        ("g/{x:guid}", "/api/g/6f1c0e2a-1b2c-4d5e-8f90-123456789abc", {"x": "6f1c0e2a-1b2c-4d5e-8f90-123456789abc"}),
        ("g/{x:guid}", "/api/g/not-a-guid", None),
        ("b/{x:bool}", "/api/b/TRUE", {"x": "TRUE"}),
        ("b/{x:bool}", "/api/b/yes", None),
        ("d/{x:decimal}", "/api/d/1.5", {"x": "1.5"}),
        ("d/{x:datetime}", "/api/d/2024-05-01", {"x": "2024-05-01"}),
        ("l/{x:length(3)}", "/api/l/abcd", None),
        ("l/{x:minlength(2):maxlength(3)}", "/api/l/abc", {"x": "abc"}),
        ("r/{x:regex(^a\\d{{2}}$)}", "/api/r/a12", {"x": "a12"}),
        ("r/{x:regex(^a\\d{{2}}$)}", "/api/r/a123", None),
        ("o/{x?}", "/api/o", {}),
        ("o/{x?}", "/api/o/1", {"x": "1"}),
        ("o/{x:int?}", "/api/o/z", None),
        ("dv/{x=10}", "/api/dv", {"x": "10"}),
        ("dv/{x=10}", "/api/dv/3", {"x": "3"}),
        ("c/{*rest}", "/api/c/a/b/c", {"rest": "a/b/c"}),
        ("c/{**rest}", "/api/c", {}),
        ("f/{name}.{ext}", "/api/f/report.tar.gz", {"name": "report.tar", "ext": "gz"}),
        ("f/{name}.{ext?}", "/api/f/report", {"name": "report"}),
        ("f/{name}.{ext?}", "/api/f/report.tar.gz", {"name": "report.tar", "ext": "gz"}),
        ("p/{a}-{b:int}", "/api/p/x-y-3", {"a": "x-y", "b": "3"}),
        ("s/{x}", "/api/s/a%20b%2Fc", {"x": "a b/c"}),
        ("s/{x}", "/api/s/a/b", None),
        ("t", "/api/t/", {}),
    ],
)
def test_templates(template: str, path: str, expected: dict[str, str] | None) -> None:
    found = _resolve(_table(template), path)
    assert (found[1] if found else None) == expected


def test_methods_filter_and_wrong_method_is_no_match() -> None:
    table: RouteTable[str] = RouteTable("api")
    table.add("m", ["get"], "get")
    table.add("m", ["POST"], "post")
    assert table.resolve("GET", "/api/m")[0].target == "get"  # type: ignore[index]
    assert table.resolve("post", "/api/m")[0].target == "post"  # type: ignore[index]
    assert table.resolve("DELETE", "/api/m") is None


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("a/{b", "unmatched '{'"),
        ("a/{b}{c}", "separated by literal text"),
        ("a/{*b}/c", "catch-all parameter must be the last segment"),
        ("a/{b?}/c", "optional segment must not be followed"),
        ("a/{b:nope}", "unknown route constraint 'nope'"),
        ("a/{b}/{B}", "parameter name twice"),
        ("a//b", "empty segment"),
        ("a/{b:min(x)}", "integer argument"),
        ("a/{1b}", "invalid parameter name"),
    ],
)
def test_invalid_templates_are_rejected_with_reason(template: str, message: str) -> None:
    with pytest.raises(RouteTemplateError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RouteTemplate(template)


def test_split_path_decodes_segments() -> None:
    assert split_path("/a/b%2Fc/") == ["a", "b/c"]
    assert split_path("/") == []


def test_url_path_keeps_prefix_case() -> None:
    table: RouteTable[str] = RouteTable("Api")
    route = table.add("orders/{id}", None, "x")
    assert table.url_path(route) == "/Api/orders/{id}"


@pytest.mark.parametrize(
    ("template", "path", "expected"),
    [
        ("c/{*rest=home}", "/api/c", {"rest": "home"}),
        ("c/{*rest=home}", "/api/c/a/b", {"rest": "a/b"}),
        ("c/{*rest:int}", "/api/c/a/b", None),
        ("c/{*rest:int}", "/api/c", {}),
        ("c/{*rest:file}", "/api/c/x/y.txt", {"rest": "x/y.txt"}),
        ("o/{a?}/{b=2}", "/api/o", {"b": "2"}),
        ("o/{a?}/{b=2}", "/api/o/1", {"a": "1", "b": "2"}),
        ("o/{a?}/{b=2}", "/api/o/1/3/4", None),
        ("~/t/{x}", "/api/t/y", {"x": "y"}),
        ("/t/{x}/", "/api/t/y", {"x": "y"}),
        ("q/{x}", "/api/q", None),
        ("q/lit", "/api/q/LIT", {}),
        ("q/lit", "/api/q/other", None),
        ("f/{name}.{ext:int}", "/api/f/a.b", None),
        ("f/{name}.{ext}", "/api/f/noext", None),
        ("f/{name}.{ext?}/{y?}", "/api/f", None),
    ],
)
def test_catch_all_optional_and_literal_edges(template: str, path: str, expected: dict[str, str] | None) -> None:
    found = _resolve(_table(template), path)
    assert (found[1] if found else None) == expected


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("a/{x}.{*y}", "catch-all parameter cannot be part of a complex segment"),
        ("{x=1}/b", "optional segment must not be followed"),
        ("a/{x}-{y}/{X}", "parameter name twice"),
        ("a/{b?}/{c}.{d?}", "optional segment must not be followed"),
    ],
)
def test_more_invalid_templates(template: str, message: str) -> None:
    with pytest.raises(RouteTemplateError, match=message):
        RouteTemplate(template)
