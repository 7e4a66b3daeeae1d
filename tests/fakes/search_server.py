"""A fake Azure AI Search service: a real HTTP(S) server on loopback speaking the REST shapes the
``azure-search-documents`` SDK sends for index create/get, document upload and search.

It keeps uploaded documents in memory and scores them for real: BM25 over the index's searchable
fields, cosine similarity for vector queries, reciprocal-rank fusion for hybrid queries, a term-
coverage "semantic reranker" with extractive captions, and a small OData ``$filter`` evaluator
(``eq``/``ne``/``gt``/``ge``/``lt``/``le``, ``and``/``or``/``not``, parentheses, ``search.in``,
``collection/any(v: ...)``) that only accepts filterable fields. It also answers OpenAI-style
``POST .../embeddings`` with the same toy vectorizer, as the embedding deployment. Every request is
recorded (method, path, query, headers, JSON body) so tests can assert what the client sent, and
faults (status, Retry-After, delay) can be scripted.

Authentication mirrors the service: an ``api-key`` header or an ``Authorization: Bearer`` token;
missing credentials give 401 and wrong ones 403. Bearer tokens need TLS in azure-core, so the server
can serve HTTPS with a self-signed certificate made at start-up (``tls=True``); point the SDK at it
with ``connection_verify=server.ca_file``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.loopback import LoopbackServer

KNOWN_SEARCH_KEYS = {
    "count",
    "facets",
    "filter",
    "highlight",
    "highlightPostTag",
    "highlightPreTag",
    "minimumCoverage",
    "orderby",
    "queryType",
    "scoringStatistics",
    "sessionId",
    "scoringParameters",
    "scoringProfile",
    "debug",
    "search",
    "searchFields",
    "searchMode",
    "queryLanguage",
    "speller",
    "answers",
    "select",
    "skip",
    "top",
    "semanticConfiguration",
    "semanticErrorHandling",
    "semanticMaxWaitInMilliseconds",
    "semanticQuery",
    "captions",
    "queryRewrites",
    "semanticFields",
    "vectorQueries",
    "vectorFilterMode",
    "hybridSearch",
}
_KEY_CHARS = re.compile(r"^[A-Za-z0-9_\-=]+$")
_WORD = re.compile(r"\w+", re.UNICODE)
_PATH = re.compile(r"^/indexes(?:\('(?P<name>[^']+)'\))?(?P<rest>/.*)?$")
RRF_K = 60


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (the fake's stand-in for the standard Lucene analyzer)."""
    return [t.lower() for t in _WORD.findall(text)]


@dataclass
class Fault:
    """A scripted failure: the next ``times`` matching requests get it."""

    status: int
    route: str = "any"  # "search", "upload", "index" or "any"
    times: int = 1
    retry_after: str | None = None
    retry_after_ms: int | None = None
    delay_s: float = 0.0
    message: str = "scripted fault"


@dataclass
class Recorded:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    route: str
    status: int = 0


class ODataError(ValueError):
    """The filter is not valid OData for this index."""


class _FilterParser:
    """Recursive-descent parser for the OData subset; returns a predicate over a document."""

    _TOKEN = re.compile(
        r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<punct>[(),/:])|(?P<word>[A-Za-z_][\w.]*))"
    )

    def __init__(self, text: str, filterable: set[str]) -> None:
        self.tokens: list[tuple[str, Any]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = self._TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise ODataError(f"Invalid expression: syntax error at position {pos} in '{text}'.")
            pos = m.end()
            if m.group("str") is not None:
                self.tokens.append(("str", m.group("str")[1:-1].replace("''", "'")))
            elif m.group("num") is not None:
                self.tokens.append(("num", float(m.group("num"))))
            elif m.group("punct") is not None:
                self.tokens.append(("punct", m.group("punct")))
            else:
                self.tokens.append(("word", m.group("word")))
        self.i = 0
        self.filterable = filterable
        self.text = text

    def _peek(self) -> tuple[str, Any] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _take(self) -> tuple[str, Any]:
        tok = self._peek()
        if tok is None:
            raise ODataError(f"Invalid expression: unexpected end of '{self.text}'.")
        self.i += 1
        return tok

    def _expect(self, kind: str, value: Any) -> None:
        tok = self._take()
        if tok != (kind, value):
            raise ODataError(f"Invalid expression: expected '{value}' in '{self.text}'.")

    def parse(self) -> Callable[[dict[str, Any]], bool]:
        pred = self._or()
        if self._peek() is not None:
            raise ODataError(f"Invalid expression: unexpected '{self._peek()[1]}' in '{self.text}'.")  # type: ignore[index]
        return pred

    def _or(self) -> Callable[[dict[str, Any]], bool]:
        left = self._and()
        while self._peek() == ("word", "or"):
            self._take()
            right = self._and()
            left = (lambda a, b: lambda d: a(d) or b(d))(left, right)
        return left

    def _and(self) -> Callable[[dict[str, Any]], bool]:
        left = self._not()
        while self._peek() == ("word", "and"):
            self._take()
            right = self._not()
            left = (lambda a, b: lambda d: a(d) and b(d))(left, right)
        return left

    def _not(self) -> Callable[[dict[str, Any]], bool]:
        if self._peek() == ("word", "not"):
            self._take()
            inner = self._not()
            return lambda d: not inner(d)
        return self._primary()

    def _field(self, name: str) -> str:
        if name not in self.filterable:
            raise ODataError(f"Invalid expression: '{name}' is not a filterable field.")
        return name

    def _literal(self) -> Any:
        kind, value = self._take()
        if kind in ("str", "num"):
            return value
        if kind == "word" and value in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[value]
        raise ODataError(f"Invalid expression: expected a literal, got '{value}'.")

    def _primary(self) -> Callable[[dict[str, Any]], bool]:
        tok = self._take()
        if tok == ("punct", "("):
            inner = self._or()
            self._expect("punct", ")")
            return inner
        if tok == ("word", "search.in"):
            self._expect("punct", "(")
            kind, name = self._take()
            if kind != "word":
                raise ODataError("Invalid expression: search.in needs a field name.")
            fname = self._field(name)
            self._expect("punct", ",")
            kind, values = self._take()
            if kind != "str":
                raise ODataError("Invalid expression: search.in needs a string of values.")
            delimiters = " ,"
            if self._peek() == ("punct", ","):
                self._take()
                kind, delimiters = self._take()
                if kind != "str":
                    raise ODataError("Invalid expression: search.in delimiters must be a string.")
            self._expect("punct", ")")
            allowed = {v for v in re.split("[" + re.escape(delimiters) + "]", values) if v}
            return lambda d: d.get(fname) in allowed
        if tok[0] == "word" and self._peek() == ("punct", "/"):
            # collection/any(v: <predicate over v>)
            fname = self._field(tok[1])
            self._take()
            self._expect("word", "any")
            self._expect("punct", "(")
            kind, var = self._take()
            if kind != "word":
                raise ODataError("Invalid expression: any() needs a range variable.")
            self._expect("punct", ":")
            outer = self.filterable
            self.filterable = {var}
            try:
                inner = self._or()
            finally:
                self.filterable = outer
            self._expect("punct", ")")
            return lambda d: any(inner({var: item}) for item in d.get(fname) or [])
        if tok[0] == "word":
            fname = self._field(tok[1])
            kind, op = self._take()
            if kind != "word" or op not in ("eq", "ne", "gt", "ge", "lt", "le"):
                raise ODataError(f"Invalid expression: expected a comparison after '{fname}'.")
            value = self._literal()
            ops: dict[str, Callable[[Any, Any], bool]] = {
                "eq": lambda a, b: a == b,
                "ne": lambda a, b: a != b,
                "gt": lambda a, b: a is not None and b is not None and a > b,
                "ge": lambda a, b: a is not None and b is not None and a >= b,
                "lt": lambda a, b: a is not None and b is not None and a < b,
                "le": lambda a, b: a is not None and b is not None and a <= b,
            }
            compare = ops[op]
            return lambda d: compare(d.get(fname), value)
        raise ODataError(f"Invalid expression: unexpected '{tok[1]}' in '{self.text}'.")


@dataclass
class FakeIndex:
    """An index definition plus its documents."""

    definition: dict[str, Any]
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    etag: int = 1

    def fields(self) -> list[dict[str, Any]]:
        return list(self.definition.get("fields") or [])

    def key_field(self) -> str:
        return next(f["name"] for f in self.fields() if f.get("key"))

    def searchable(self) -> list[str]:
        return [f["name"] for f in self.fields() if f.get("searchable") and f.get("type") == "Edm.String"]

    def filterable(self) -> set[str]:
        return {f["name"] for f in self.fields() if f.get("filterable")}

    def vector_fields(self) -> dict[str, dict[str, Any]]:
        return {f["name"]: f for f in self.fields() if str(f.get("type", "")).startswith("Collection(Edm.Single")}

    def retrievable(self) -> list[str]:
        return [
            f["name"]
            for f in self.fields()
            if f.get("retrievable", True) is not False and f["name"] not in self.vector_fields()
        ]

    def vectorizer_for(self, field_name: str) -> dict[str, Any] | None:
        vs = self.definition.get("vectorSearch") or {}
        fdef = self.vector_fields()[field_name]
        profile = next((p for p in vs.get("profiles") or [] if p.get("name") == fdef.get("vectorSearchProfile")), None)
        if not profile or not profile.get("vectorizer"):
            return None
        return next((v for v in vs.get("vectorizers") or [] if v.get("name") == profile["vectorizer"]), None)

    def semantic_config(self, name: str | None) -> dict[str, Any] | None:
        sem = self.definition.get("semantic") or {}
        name = name or sem.get("defaultConfiguration")
        return next((c for c in sem.get("configurations") or [] if c.get("name") == name), None)


class _HttpError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class FakeSearchServer:
    """Start with ``with FakeSearchServer(api_key="k") as srv:`` and use ``srv.endpoint``."""

    def __init__(
        self,
        *,
        api_key: str | None = "fake-search-key",
        bearer_token: str | None = None,
        tls: bool = False,
        vectorizer: Callable[[str], list[float]] | None = None,
        embedding_api_key: str | None = "fake-embedding-key",
    ) -> None:
        self.api_key = api_key
        self.bearer_token = bearer_token
        self.tls = tls
        # Stands in for the index's integrated vectorizer (the embedding deployment it would call).
        self.vectorizer = vectorizer
        # The same function also answers OpenAI-style ``.../embeddings`` calls on this server, standing
        # in for the Azure OpenAI embedding deployment that both the app and the vectorizer call.
        self.embedding_api_key = embedding_api_key
        self.embedding_calls = 0
        self.indexes: dict[str, FakeIndex] = {}
        self.requests: list[Recorded] = []
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        self._loopback: LoopbackServer | None = None
        self.ca_file: str | None = None
        self.port = 0

    # --- lifecycle -----------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> FakeSearchServer:
        """Listen on a free loopback port (HTTPS when ``tls``), in a background thread."""
        app = Starlette(routes=[Route("/{path:path}", self._dispatch, methods=["GET", "POST", "PUT", "DELETE"])])
        self._loopback = LoopbackServer(app, name="fake-search", tls=self.tls)
        self._loopback.start()
        self.port, self.ca_file = self._loopback.port, self._loopback.ca_file
        return self

    def stop(self) -> None:
        """Stop the server."""
        if self._loopback is not None:
            self._loopback.stop()

    def __enter__(self) -> FakeSearchServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- test helpers --------------------------------------------------------------------------

    def add_fault(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def searches(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.route == "search"]

    def documents(self, index: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self.indexes[index].docs)

    # --- request handling ----------------------------------------------------------------------

    def _take_fault(self, route: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and fault.route in ("any", route):
                    fault.times -= 1
                    if fault.times == 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def _auth(self, request: Request) -> JSONResponse | None:
        key = request.headers.get("api-key")
        auth = request.headers.get("authorization", "")
        if key is not None:
            if self.api_key is not None and key == self.api_key:
                return None
            return _error(403, "Forbidden", "The api-key is not valid for this service.")
        if auth.lower().startswith("bearer "):
            if self.bearer_token is not None and auth[7:] == self.bearer_token:
                return None
            return _error(403, "Forbidden", "The bearer token is not authorized for this service.")
        return _error(401, "Unauthorized", "No api-key or bearer token was sent.")

    async def _dispatch(self, request: Request) -> Response:
        path = unquote(request.url.path)
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        match = _PATH.match(path)
        name = match.group("name") if match else None
        rest = (match.group("rest") if match else None) or ""
        route = "unknown"
        if path.endswith("/embeddings") and request.method == "POST":
            route = "embeddings"
        elif match and name and rest == "/docs/search.post.search" and request.method == "POST":
            route = "search"
        elif match and name and rest == "/docs/search.index" and request.method == "POST":
            route = "upload"
        elif match and not rest:
            route = "index"
        record = Recorded(
            method=request.method,
            path=path,
            query=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            route=route,
        )
        with self._lock:
            self.requests.append(record)
        response = await self._respond(request, route, name, body)
        record.status = response.status_code
        return response

    async def _respond(self, request: Request, route: str, name: str | None, body: Any) -> Response:
        fault = self._take_fault(route)
        if fault is not None:
            if fault.delay_s:
                await asyncio.sleep(fault.delay_s)
            if fault.status:
                headers: dict[str, str] = {}
                if fault.retry_after is not None:
                    headers["Retry-After"] = fault.retry_after
                if fault.retry_after_ms is not None:
                    headers["retry-after-ms"] = str(fault.retry_after_ms)
                return _error(fault.status, f"Scripted{fault.status}", fault.message, headers)
        if route == "embeddings":
            return self._embeddings(request, body)
        denied = self._auth(request)
        if denied is not None:
            return denied
        if not request.query_params.get("api-version"):
            return _error(400, "MissingApiVersionParameter", "The api-version query parameter is required.")
        try:
            if route == "search":
                return JSONResponse(self._search(self._index(name), body))
            if route == "upload":
                return self._upload(self._index(name), body)
            if route == "index":
                return self._index_route(request, name, body)
        except _HttpError as exc:
            return _error(exc.status, exc.code, exc.message)
        return _error(404, "NotFound", f"No route for {request.method} {request.url.path}.")

    def _embeddings(self, request: Request, body: Any) -> Response:
        """OpenAI/Azure OpenAI ``POST .../embeddings``, answered with the fake's vectorizer."""
        sent = request.headers.get("api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
        if self.embedding_api_key is not None and sent != self.embedding_api_key:
            return JSONResponse({"error": {"code": "401", "message": "Access denied: invalid key."}}, status_code=401)
        if self.vectorizer is None or not isinstance(body, dict) or "input" not in body:
            return JSONResponse({"error": {"code": "BadRequest", "message": "input is required"}}, status_code=400)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        tokens = 0
        for i, text in enumerate(inputs):
            vector = [float(x) for x in self.vectorizer(str(text))]
            tokens += len(tokenize(str(text)))
            if body.get("encoding_format") == "base64":
                import base64
                import struct

                encoded: Any = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
            else:
                encoded = vector
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        with self._lock:
            self.embedding_calls += 1
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "fake-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    def _index(self, name: str | None) -> FakeIndex:
        with self._lock:
            index = self.indexes.get(name or "")
        if index is None:
            raise _HttpError(404, "ResourceNotFound", f"The index '{name}' was not found.")
        return index

    def _index_route(self, request: Request, name: str | None, body: Any) -> Response:
        if request.method == "GET" and name:
            index = self._index(name)
            return JSONResponse({**index.definition, "@odata.etag": f'"{index.etag}"'})
        if request.method == "DELETE" and name:
            with self._lock:
                removed = self.indexes.pop(name, None)
            if removed is None:
                raise _HttpError(404, "ResourceNotFound", f"The index '{name}' was not found.")
            return Response(status_code=204)
        if request.method in ("PUT", "POST"):
            if not isinstance(body, dict):
                raise _HttpError(400, "InvalidRequestBody", "The index definition must be a JSON object.")
            index_name = body.get("name")
            if not isinstance(index_name, str) or not index_name:
                raise _HttpError(400, "InvalidRequestBody", "The index definition needs a name.")
            if request.method == "PUT" and index_name != name:
                raise _HttpError(400, "InvalidRequestBody", "The index name in the URL and body differ.")
            self._validate_definition(body)
            with self._lock:
                existing = self.indexes.get(index_name)
                if existing is not None and request.method == "POST":
                    raise _HttpError(409, "ResourceNameAlreadyInUse", f"Index '{index_name}' already exists.")
                if existing is None:
                    self.indexes[index_name] = FakeIndex(definition=body)
                    status = 201
                    etag = 1
                else:
                    existing.definition = body
                    existing.etag += 1
                    status = 200
                    etag = existing.etag
            if request.headers.get("prefer") == "return=minimal":
                return Response(status_code=204)
            return JSONResponse({**body, "@odata.etag": f'"{etag}"'}, status_code=status)
        raise _HttpError(405, "MethodNotAllowed", f"{request.method} is not allowed here.")

    def _validate_definition(self, body: dict[str, Any]) -> None:
        fields = body.get("fields")
        if not isinstance(fields, list) or not fields:
            raise _HttpError(400, "InvalidRequestBody", "An index needs at least one field.")
        keys = [f for f in fields if f.get("key")]
        if len(keys) != 1 or keys[0].get("type") != "Edm.String":
            raise _HttpError(400, "InvalidRequestBody", "An index needs exactly one Edm.String key field.")
        names = [f.get("name") for f in fields]
        if len(set(names)) != len(names):
            raise _HttpError(400, "InvalidRequestBody", "Field names must be unique.")
        vs = body.get("vectorSearch") or {}
        profiles = {p.get("name"): p for p in vs.get("profiles") or []}
        algorithms = {a.get("name") for a in vs.get("algorithms") or []}
        vectorizers = {v.get("name") for v in vs.get("vectorizers") or []}
        for f in fields:
            if str(f.get("type", "")).startswith("Collection(Edm.Single"):
                if not isinstance(f.get("dimensions"), int) or f["dimensions"] < 2:
                    raise _HttpError(400, "InvalidRequestBody", f"Vector field '{f['name']}' needs dimensions.")
                profile = profiles.get(f.get("vectorSearchProfile"))
                if profile is None:
                    raise _HttpError(400, "InvalidRequestBody", f"Vector field '{f['name']}' has no valid profile.")
                if profile.get("algorithm") not in algorithms:
                    raise _HttpError(400, "InvalidRequestBody", "The vector profile names an unknown algorithm.")
                if profile.get("vectorizer") and profile["vectorizer"] not in vectorizers:
                    raise _HttpError(400, "InvalidRequestBody", "The vector profile names an unknown vectorizer.")
        field_names = set(names)
        for config in (body.get("semantic") or {}).get("configurations") or []:
            pf = config.get("prioritizedFields") or {}
            used = [(pf.get("titleField") or {}).get("fieldName")] + [
                c.get("fieldName") for c in pf.get("prioritizedContentFields") or []
            ]
            for used_name in used:
                if used_name is not None and used_name not in field_names:
                    raise _HttpError(400, "InvalidRequestBody", f"Semantic field '{used_name}' does not exist.")

    def _upload(self, index: FakeIndex, body: Any) -> Response:
        if not isinstance(body, dict) or not isinstance(body.get("value"), list):
            raise _HttpError(400, "InvalidRequestBody", "The request body must have a 'value' array.")
        if len(body["value"]) > 1000:
            raise _HttpError(413, "RequestEntityTooLarge", "A batch may hold at most 1000 actions.")
        key_field = index.key_field()
        known = {f["name"] for f in index.fields()}
        vectors = index.vector_fields()
        results = []
        for action in body["value"]:
            kind = action.get("@search.action", "upload")
            doc = {k: v for k, v in action.items() if k != "@search.action"}
            key = doc.get(key_field)
            unknown = set(doc) - known
            if unknown:
                raise _HttpError(
                    400, "InvalidDocument", f"The property '{sorted(unknown)[0]}' does not exist on the index."
                )
            error = None
            if not isinstance(key, str) or not _KEY_CHARS.match(key):
                error = f"Invalid document key: '{key}'."
            for vname, vdef in vectors.items():
                value = doc.get(vname)
                if value is not None and (not isinstance(value, list) or len(value) != vdef["dimensions"]):
                    raise _HttpError(
                        400,
                        "InvalidDocument",
                        f"The vector field '{vname}' expects {vdef['dimensions']} dimensions.",
                    )
            if error is None and isinstance(key, str):
                with self._lock:
                    if kind in ("upload", "mergeOrUpload"):
                        merged = index.docs.get(key, {}) if kind == "mergeOrUpload" else {}
                        index.docs[key] = {**merged, **doc}
                    elif kind == "delete":
                        index.docs.pop(key, None)
                    else:
                        error = f"Unsupported action '{kind}'."
            results.append(
                {
                    "key": key,
                    "status": error is None,
                    "errorMessage": error,
                    "statusCode": 201 if error is None else 400,
                }
            )
        status = 200 if all(r["status"] for r in results) else 207
        return JSONResponse({"value": results}, status_code=status)

    def _search(self, index: FakeIndex, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _HttpError(400, "InvalidRequestBody", "The search request must be a JSON object.")
        unknown = set(body) - KNOWN_SEARCH_KEYS
        if unknown:
            raise _HttpError(400, "InvalidRequestParameter", f"Unknown search parameter '{sorted(unknown)[0]}'.")
        top = body.get("top", 50)
        if not isinstance(top, int) or top < 0:
            raise _HttpError(400, "InvalidRequestParameter", "top must be a non-negative integer.")
        with self._lock:
            docs = list(index.docs.values())
        if body.get("filter"):
            try:
                predicate = _FilterParser(body["filter"], index.filterable()).parse()
            except ODataError as exc:
                raise _HttpError(400, "InvalidRequestParameter", str(exc)) from exc
            docs = [d for d in docs if predicate(d)]
        key_field = index.key_field()
        text = (body.get("search") or "").strip()
        ranked_lists: list[list[tuple[str, float]]] = []
        if text and text != "*":
            ranked_lists.append(self._keyword(index, docs, tokenize(text), key_field))
        for vq in body.get("vectorQueries") or []:
            ranked_lists.append(self._vector(index, docs, vq, key_field))
        by_key = {d[key_field]: d for d in docs}
        if not ranked_lists:
            scores = {k: 1.0 for k in by_key}
        elif len(ranked_lists) == 1:
            scores = dict(ranked_lists[0])
        else:
            scores = {}
            for ranked in ranked_lists:
                for rank, (k, _) in enumerate(ranked, start=1):
                    scores[k] = scores.get(k, 0.0) + 1.0 / (RRF_K + rank)
        order = sorted(scores, key=lambda k: (-scores[k], k))
        if body.get("orderby"):
            for clause in reversed([c.strip() for c in str(body["orderby"]).split(",") if c.strip()]):
                name, _, direction = clause.partition(" ")
                if name not in {f["name"] for f in index.fields() if f.get("sortable") or f.get("key")}:
                    raise _HttpError(400, "InvalidRequestParameter", f"'{name}' is not a sortable field.")

                def sort_key(k: str, n: str = name) -> tuple[bool, Any]:
                    return (by_key[k].get(n) is None, by_key[k].get(n))

                order.sort(key=sort_key)
                if direction.strip().lower() == "desc":
                    order.reverse()
        semantic = body.get("queryType") == "semantic"
        rerank: dict[str, float] = {}
        captions: dict[str, str] = {}
        if semantic:
            config = index.semantic_config(body.get("semanticConfiguration"))
            if config is None:
                raise _HttpError(
                    400,
                    "InvalidRequestParameter",
                    f"Unknown semantic configuration '{body.get('semanticConfiguration')}'.",
                )
            pf = config.get("prioritizedFields") or {}
            content_fields = [c["fieldName"] for c in pf.get("prioritizedContentFields") or []]
            title_field = (pf.get("titleField") or {}).get("fieldName")
            terms = set(tokenize(body.get("semanticQuery") or text))
            for k in order[:50]:
                doc = by_key[k]
                words = set(tokenize(" ".join(str(doc.get(f) or "") for f in [title_field, *content_fields] if f)))
                rerank[k] = round(4.0 * len(terms & words) / len(terms), 4) if terms else 0.0
                if str(body.get("captions") or "").startswith("extractive"):
                    captions[k] = self._caption(" ".join(str(doc.get(f) or "") for f in content_fields), terms)
            order = sorted(order[:50], key=lambda k: (-rerank[k], -scores[k], k))
        select = body.get("select")
        fields = [s.strip() for s in select.split(",")] if isinstance(select, str) and select else index.retrievable()
        retrievable = set(index.retrievable())
        bad = [f for f in fields if f not in retrievable]
        if bad:
            raise _HttpError(400, "InvalidRequestParameter", f"'{bad[0]}' is not a retrievable field.")
        skip = body.get("skip") or 0
        value = []
        for k in order[skip : skip + top]:
            doc = by_key[k]
            item: dict[str, Any] = {f: doc.get(f) for f in fields}
            item["@search.score"] = round(scores[k], 6)
            if semantic:
                item["@search.rerankerScore"] = rerank[k]
                if k in captions:
                    item["@search.captions"] = [{"text": captions[k], "highlights": None}]
            value.append(item)
        result: dict[str, Any] = {"value": value}
        if body.get("count"):
            result["@odata.count"] = len(order)
        return result

    def _keyword(
        self, index: FakeIndex, docs: list[dict[str, Any]], terms: list[str], key_field: str
    ) -> list[tuple[str, float]]:
        """BM25 (k1=1.2, b=0.75) summed over the searchable fields; documents with no term drop out."""
        fields = index.searchable()
        if not terms or not fields or not docs:
            return []
        doc_tokens = {d[key_field]: tokenize(" ".join(str(d.get(f) or "") for f in fields)) for d in docs}
        avg_len = sum(len(t) for t in doc_tokens.values()) / len(doc_tokens) or 1.0
        n = len(doc_tokens)
        df = Counter(term for toks in doc_tokens.values() for term in set(toks))
        scored = []
        for key, toks in doc_tokens.items():
            tf = Counter(toks)
            score = 0.0
            for term in set(terms):
                if tf[term]:
                    idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                    score += idf * tf[term] * 2.2 / (tf[term] + 1.2 * (1 - 0.75 + 0.75 * len(toks) / avg_len))
            if score > 0:
                scored.append((key, score))
        return sorted(scored, key=lambda kv: (-kv[1], kv[0]))

    def _vector(
        self, index: FakeIndex, docs: list[dict[str, Any]], vq: dict[str, Any], key_field: str
    ) -> list[tuple[str, float]]:
        vectors = index.vector_fields()
        field_name = vq.get("fields")
        if field_name not in vectors:
            raise _HttpError(400, "InvalidRequestParameter", f"'{field_name}' is not a vector field.")
        kind = vq.get("kind")
        if kind == "vector":
            query = vq.get("vector")
        elif kind == "text":
            if index.vectorizer_for(field_name) is None:
                raise _HttpError(
                    400, "InvalidRequestParameter", f"No vectorizer is configured for vector field '{field_name}'."
                )
            if self.vectorizer is None:
                raise _HttpError(502, "VectorizerFailed", "The fake has no vectorizer function.")
            query = self.vectorizer(str(vq.get("text") or ""))
        else:
            raise _HttpError(400, "InvalidRequestParameter", f"Unsupported vector query kind '{kind}'.")
        dims = vectors[field_name]["dimensions"]
        if not isinstance(query, list) or len(query) != dims:
            raise _HttpError(400, "InvalidRequestParameter", f"The vector query must have {dims} dimensions.")
        k = vq.get("k") or 50
        scored = [
            (d[key_field], (1.0 + _cosine(query, d[field_name])) / 2.0)  # cosine mapped into (0, 1]
            for d in docs
            if isinstance(d.get(field_name), list)
        ]
        return sorted(scored, key=lambda kv: (-kv[1], kv[0]))[:k]

    @staticmethod
    def _caption(content: str, terms: set[str]) -> str:
        """The sentence with the most query terms (extractive caption)."""
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", content) if s.strip()]
        if not sentences:
            return ""
        return max(sentences, key=lambda s: len(terms & set(tokenize(s))))


def seed_index(
    server: FakeSearchServer,
    folder: Path,
    *,
    index: str = "jobs-docs",
    semantic_config: str | None = "default",
    embed: Callable[[str], list[float]] | None = None,
) -> dict[str, str]:
    """Ingest ``folder`` into the fake through the app's real sink; return the environment that points
    the app (``SEARCH_PROVIDER=azure``) at the fake.

    With ``embed`` (and ``server.vectorizer`` set to the same function), documents get vectors and the
    app's queries use the index's integrated vectorizer, so no embedding endpoint is involved.
    """
    from pydantic import SecretStr

    from shared.ingest.pipeline import ingest
    from shared.providers.search.azure_index import build_azure_sink
    from shared.providers.search.azure_sink import AzureIngestSink
    from shared.runtime.settings import Settings

    settings = Settings(
        search_provider="azure",
        azure_search_endpoint=server.endpoint,
        azure_search_api_key=SecretStr(server.api_key or ""),
        azure_search_index=index,
        azure_search_semantic_config=semantic_config,
        # The index's vectorizer names this deployment; the fake's vectorizer function stands in for it.
        azure_search_vector_mode="integrated" if embed is not None else "off",
        azure_openai_endpoint=server.endpoint,
        azure_openai_embedding_deployment="fake-embedding",
    )
    sink = build_azure_sink(settings, embed, connection_verify=server.ca_file)
    report = ingest(folder, AzureIngestSink(sink), rebuild=True)
    if not report.ok:
        raise RuntimeError(f"nothing was ingested from {folder}")
    env = {
        "SEARCH_PROVIDER": "azure",
        "AZURE_SEARCH_ENDPOINT": server.endpoint,
        "AZURE_SEARCH_API_KEY": server.api_key or "",
        "AZURE_SEARCH_INDEX": index,
        "AZURE_SEARCH_VECTOR_MODE": "integrated" if embed is not None else "off",
    }
    if semantic_config:
        env["AZURE_SEARCH_SEMANTIC_CONFIG"] = semantic_config
    return env
