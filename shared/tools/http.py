"""The ``http`` tool family: HTTP APIs declared in the TOOLS_HTTP setting, one tool each.

The configuration fixes everything a call may reach: the method, the URL (host and port literal), the
hosts a redirect may lead to, the headers and the credential. A model's arguments only fill the URL's
``{param}`` placeholders (percent-encoded, in the path and query) and, for POST/PUT/PATCH, the JSON body.

Against server-side request forgery, every hop (the first request and each redirect) checks that its
origin is allowed (scheme, host and port: another port of an allowed host is another service), resolves its
host once, refuses non-public addresses (private, loopback, link-local, multicast, reserved; IPv6 too,
IPv4-mapped included) unless the host is listed in ``private_hosts``, and connects to exactly the address it
checked: the URL carries the IP, while the Host header and TLS (SNI and certificate check) keep the host
name, so a second DNS answer cannot redirect the connection. A Location that is not a URL fails the call
(final, TOOL_ERROR). Bodies are read as a stream and cut at ``max_response_bytes``.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlsplit

import httpx

from shared.jobs.contracts import ErrorCode
from shared.runtime.settings import ConfigError, HttpToolSetting, SettingRef
from shared.tools import register_family
from shared.tools.base import IDEMPOTENCY_HEADER, MAX_RESULT_CHARS, Tool, ToolContext, ToolFailure, ToolSpec

if TYPE_CHECKING:
    from azure.core.credentials import AccessToken

    from shared.runtime.settings import Settings

FAMILY = "http"
SETTING = "TOOLS_HTTP"
MAX_REDIRECTS = 3
# How much of an error response the model is shown (enough for an API's "which argument is wrong").
ERROR_EXCERPT_CHARS = 300
# Text bodies are shown up to this many characters (the envelope's own bound, less room for the labels).
MAX_TEXT_CHARS = MAX_RESULT_CHARS - 500
USER_AGENT = "durable-ai-jobs-tools/1"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SCALAR_TYPES = {"string", "integer", "number", "boolean"}
_BODY_METHODS = {"POST", "PUT", "PATCH"}
_TEXT_TYPES = re.compile(r"^(text/|application/(json|xml|javascript|x-www-form-urlencoded)|[^;]*\+(json|xml))")
# Public-looking addresses that are Azure platform endpoints (the wire server): never a tool's target.
_ALWAYS_REFUSED = (ipaddress.ip_network("168.63.129.16/32"),)

# (host, port) -> the addresses it resolves to, in the resolver's order.
Resolver = Callable[[str, int], list[str]]
# (scheme, host, port): what a hop is allowed by.
Origin = tuple[str, str, int]
_DEFAULT_PORTS = {"http": 80, "https": 443}
_REDIRECTS = (301, 302, 303, 307, 308)
# Where the response hook puts a redirect's Location (taken off the headers: see _take_location).
_LOCATION = "durable_ai_jobs.location"


class TokenCredential(Protocol):
    """What the HTTP tools need of an azure-identity credential."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        """A bearer token for the scopes."""
        ...


def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses as the system resolver answers (one lookup: the caller connects to what it checks)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_public_address(address: str) -> bool:
    """True for a globally routable unicast address; private, loopback, link-local, multicast, reserved are not."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        # An IPv6 form of an IPv4 address (mapped, 6to4, Teredo) is judged as that IPv4 address.
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return is_public_address(str(embedded))
    if any(ip in net for net in _ALWAYS_REFUSED):
        return False
    bad = ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_reserved
    return ip.is_global and not bad and not ip.is_unspecified


def _config_error(entry: str, why: str) -> ConfigError:
    return ConfigError([(SETTING, f"entry {entry!r}: {why}")])


@dataclass(frozen=True)
class _Template:
    """The declared URL, split so that arguments only ever fill path segments and query values."""

    origin: str  # scheme://host[:port] exactly as declared
    segments: tuple[str, ...]
    query: tuple[tuple[str, str], ...]
    placeholders: frozenset[str]

    @classmethod
    def parse(cls, config: HttpToolSetting) -> _Template:
        """Split the url; placeholders must be declared scalar properties (required unless a whole query value)."""
        parts = urlsplit(config.url)
        props: dict[str, Any] = config.parameters.get("properties") or {}
        required = set(config.parameters.get("required") or [])
        query: list[tuple[str, str]] = []
        for piece in filter(None, parts.query.split("&")):
            key, _, value = piece.partition("=")
            if "{" in key or "}" in key:
                raise _config_error(config.name, "url query keys must be literal; placeholders go in values")
            query.append((key, value))
        segments = tuple(parts.path.split("/"))
        found: set[str] = set()
        # Only a whole query value may be optional (left out with its key); anything else needs its argument.
        parts_to_check = [(text, False) for text in segments] + [
            (value, _PLACEHOLDER.fullmatch(value) is not None) for _, value in query
        ]
        for text, may_be_absent in parts_to_check:
            if "{" in _PLACEHOLDER.sub("", text) or "}" in _PLACEHOLDER.sub("", text):
                raise _config_error(config.name, f"url part {text!r} has a brace that is not a {{param}}")
            for name in _PLACEHOLDER.findall(text):
                if (props.get(name) or {}).get("type") not in _SCALAR_TYPES:
                    raise _config_error(config.name, f"{{{name}}} must be a parameter of type string/number/boolean")
                if name not in required and not may_be_absent:
                    raise _config_error(config.name, f"{{{name}}} must be a required parameter")
                found.add(name)
        origin = f"{parts.scheme}://{parts.netloc}"
        return cls(origin=origin, segments=segments, query=tuple(query), placeholders=frozenset(found))

    def render(self, args: dict[str, Any]) -> httpx.URL:
        """The URL for these arguments: each value percent-encoded whole, so it cannot add a segment or a host."""
        path = "/".join(self._fill_segment(text, args) for text in self.segments)
        pairs: list[str] = []
        for key, value in self.query:
            whole = _PLACEHOLDER.fullmatch(value)
            if whole and args.get(whole.group(1)) is None:
                continue  # an optional query parameter the model left out
            pairs.append(f"{key}={_PLACEHOLDER.sub(lambda m: _encode(args[m.group(1)]), value)}")
        url = httpx.URL(self.origin + path + ("?" + "&".join(pairs) if pairs else ""))
        declared = httpx.URL(self.origin)
        if (url.scheme, url.raw_host, url.port) != (declared.scheme, declared.raw_host, declared.port):
            raise ToolFailure(ErrorCode.INVALID_INPUT, "the arguments would change the request's host")
        return url

    @staticmethod
    def _fill_segment(text: str, args: dict[str, Any]) -> str:
        filled = _PLACEHOLDER.sub(lambda m: _encode(args[m.group(1)]), text)
        if filled in (".", "..") and filled != text:
            # Dot segments would be resolved away and climb out of the declared path.
            raise ToolFailure(ErrorCode.INVALID_INPUT, "an argument cannot be '.' or '..' in the url path")
        return filled


def _encode(value: Any) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return quote(text, safe="")


class HttpTool(Tool):
    """One declared HTTP API."""

    def __init__(
        self,
        config: HttpToolSetting,
        *,
        credential: Callable[[], TokenCredential] | None = None,
        resolver: Resolver = system_resolver,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.config = config
        self.template = _Template.parse(config)
        self.home = httpx.URL(self.template.origin)
        self.allowed = _allowed_origins(self.home, config.allowed_hosts)
        if not set(config.private_hosts) <= {host for _, host, _ in self.allowed}:
            raise _config_error(config.name, "every host in private_hosts must be the url's host or in allowed_hosts")
        self._credential = credential
        self._resolver = resolver
        self._verify = verify
        props = dict(config.parameters.get("properties") or {})
        body = set(props) - self.template.placeholders
        if body and config.method not in _BODY_METHODS:
            raise _config_error(config.name, f"parameter {sorted(body)[0]!r} is not in the url ({config.method})")
        self.body_params = frozenset(body)
        schema = {**config.parameters, "type": "object", "properties": props, "additionalProperties": False}
        self.spec = ToolSpec(
            name=f"{FAMILY}.{config.name}",
            family=FAMILY,
            description=config.description,
            input_schema=schema,
            # The request checks its own deadline; run_tool's bound is the backstop (DNS, a stuck thread).
            timeout_s=config.timeout_s + 2.0,
            retryable=config.retryable,
        )

    def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Call the API with the arguments; JSON → data, text → (capped) text, failures → ToolFailure."""
        deadline = time.monotonic() + self.config.timeout_s
        url = self.template.render(args)
        body = {k: v for k, v in args.items() if k in self.body_params} or None
        secrets = self._secret_headers()
        if ctx.idempotency_key:
            # The same key on every attempt of this call; like the credentials, only to the declared origin.
            secrets[IDEMPOTENCY_HEADER] = ctx.idempotency_key
        try:
            with self._client() as client, self._follow(client, url, body, secrets, deadline) as response:
                return self._read(response, deadline)
        except httpx.TimeoutException as exc:
            late = f"{self.spec.name}: no answer within {self.config.timeout_s:g} s"
            raise ToolFailure(ErrorCode.TRANSIENT, late) from exc
        except (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError) as exc:
            broken = f"{self.spec.name}: connection failed ({type(exc).__name__})"
            raise ToolFailure(ErrorCode.TRANSIENT, broken) from exc
        except httpx.HTTPError as exc:
            raise ToolFailure(ErrorCode.UPSTREAM_ERROR, f"{self.spec.name}: {type(exc).__name__}") from exc

    # --- credentials -------------------------------------------------------------------------------

    def _secret_headers(self) -> dict[str, str]:
        """Headers that go only to the declared origin: setting references resolved now, and the bearer token."""
        headers: dict[str, str] = {}
        for name, given in self.config.headers.items():
            if isinstance(given, SettingRef):
                # Read at call time: the platform resolves Key Vault references into app settings.
                value = os.environ.get(given.setting, "").strip()
                if not value:
                    why = "which is not set"
                elif not value.isascii() or "\r" in value or "\n" in value:
                    why = "whose value is not a valid header value"  # the value itself is never shown
                else:
                    headers[name] = value
                    continue
                raise ToolFailure(
                    ErrorCode.CONFIG_ERROR, f"{self.spec.name}: header {name} needs app setting {given.setting}, {why}"
                )
        if self.config.auth == "managed_identity":
            headers["Authorization"] = f"Bearer {self._token()}"
        return headers

    def _token(self) -> str:
        assert self.config.scope is not None  # the settings model requires it for managed_identity
        try:
            credential = self._credential() if self._credential else _default_credential(None)
            return credential.get_token(self.config.scope).token
        except Exception as exc:
            # azure-identity raises ClientAuthenticationError and friends; the message may name internals.
            raise ToolFailure(
                ErrorCode.AUTH_FAILED, f"{self.spec.name}: no managed identity token for {self.config.scope}"
            ) from exc

    # --- the request -------------------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        return httpx.Client(
            timeout=httpx.Timeout(self.config.timeout_s),
            follow_redirects=False,  # each hop is checked here
            trust_env=False,  # no proxy from the environment: the connection must go to the checked address
            verify=self._verify,
            # No connection reuse: a pooled connection to a shared IP must not carry another host's request.
            limits=httpx.Limits(max_keepalive_connections=0),
            event_hooks={"response": [_take_location]},
        )

    @contextmanager
    def _follow(
        self,
        client: httpx.Client,
        url: httpx.URL,
        body: dict[str, Any] | None,
        secrets: dict[str, str],
        deadline: float,
    ) -> Iterator[httpx.Response]:
        """Send, following at most MAX_REDIRECTS redirects, each hop checked like the first."""
        method = self.config.method
        for hop in range(MAX_REDIRECTS + 1):
            response = self._send(client, method, url, body, secrets, first=hop == 0)
            location = response.extensions.get(_LOCATION)
            if response.status_code not in _REDIRECTS or not location:
                try:
                    yield response
                finally:
                    response.close()
                return
            response.close()
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout("redirects took too long")
            url = self._redirect_target(url, location, response.status_code)
            if response.status_code in (301, 302, 303):
                method, body = "GET", None  # as browsers do; 307/308 keep the method and body
        raise ToolFailure(ErrorCode.BAD_REQUEST, f"{self.spec.name}: more than {MAX_REDIRECTS} redirects")

    def _redirect_target(self, url: httpx.URL, location: str, status: int) -> httpx.URL:
        """Where a redirect leads; a Location that is not a URL fails the call for good (a retry gets the same)."""
        try:
            target = url.join(location)
            _host_of(target)
            target.netloc.decode("ascii")
        except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
            shown = json.dumps(location[:200])
            raise ToolFailure(
                ErrorCode.TOOL_ERROR,
                f"{self.spec.name}: the server answered HTTP {status} with a malformed Location {shown}: not followed",
            ) from exc
        return target

    def _send(
        self,
        client: httpx.Client,
        method: str,
        url: httpx.URL,
        body: dict[str, Any] | None,
        secrets: dict[str, str],
        *,
        first: bool,
    ) -> httpx.Response:
        host = _host_of(url)
        origin = _origin_of(url)
        if origin not in self.allowed:
            raise ToolFailure(
                ErrorCode.CONFIG_ERROR if first else ErrorCode.BAD_REQUEST,
                f"{self.spec.name}: {_shown(origin)} is not allowed" + ("" if first else " (redirect)"),
            )
        addresses = self._checked_addresses(host, url.port or (443 if url.scheme == "https" else 80), first)
        headers = {"Host": url.netloc.decode("ascii"), "User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        headers["Accept"] = "application/json, text/*;q=0.9, */*;q=0.1"
        headers.update({k: v for k, v in self.config.headers.items() if isinstance(v, str)})
        same_origin = (url.scheme, url.raw_host, url.port) == (self.home.scheme, self.home.raw_host, self.home.port)
        if same_origin:
            headers.update(secrets)  # credentials never follow a redirect to another origin
        extensions: dict[str, Any] = {}
        if url.scheme == "https" and _literal_ip(host) is None:
            extensions["sni_hostname"] = host  # TLS (SNI, certificate check) for the name, TCP to the checked IP
        for address in addresses[:-1]:
            try:  # the next checked address when one does not connect (e.g. IPv6 listed first, but unreachable)
                return client.send(self._request(client, method, url, address, headers, body, extensions), stream=True)
            except httpx.ConnectError:
                continue
        return client.send(self._request(client, method, url, addresses[-1], headers, body, extensions), stream=True)

    @staticmethod
    def _request(
        client: httpx.Client,
        method: str,
        url: httpx.URL,
        address: str,
        headers: dict[str, str],
        body: dict[str, Any] | None,
        extensions: dict[str, Any],
    ) -> httpx.Request:
        """The request to ``url`` sent to ``address``: the IP in the URL, the name in the Host header and TLS."""
        return client.build_request(
            method, url.copy_with(host=address), headers=headers, json=body, extensions=extensions
        )

    def _checked_addresses(self, host: str, port: int, first: bool) -> list[str]:
        """Resolve once; every address must be public unless the host is explicitly a private one."""
        literal = _literal_ip(host)
        try:
            addresses = [literal] if literal else self._resolver(host, port)
        except OSError as exc:
            raise ToolFailure(ErrorCode.TRANSIENT, f"{self.spec.name}: cannot resolve {host}") from exc
        except UnicodeError as exc:  # a name no resolver takes (an empty or over-long label): asking again won't help
            raise ToolFailure(
                ErrorCode.CONFIG_ERROR if first else ErrorCode.TOOL_ERROR,
                f"{self.spec.name}: {host!r} is not a valid host name" + ("" if first else " (redirect)"),
            ) from exc
        if not addresses:
            raise ToolFailure(ErrorCode.TRANSIENT, f"{self.spec.name}: {host} has no address")
        if host not in self.config.private_hosts:
            refused = [a for a in addresses if not is_public_address(a)]
            if refused:
                raise ToolFailure(
                    ErrorCode.CONFIG_ERROR if first else ErrorCode.BAD_REQUEST,
                    f"{self.spec.name}: {host} resolves to a non-public address ({refused[0]});"
                    f" list it in private_hosts if that is intended",
                )
        return addresses[:4]

    # --- the response ------------------------------------------------------------------------------

    def _read(self, response: httpx.Response, deadline: float) -> Any:
        status = response.status_code
        ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if status >= 300:
            raw, _ = _read_capped(response, 4 * ERROR_EXCERPT_CHARS, deadline)
            raise self._status_failure(response, raw.decode("utf-8", "replace")[:ERROR_EXCERPT_CHARS])
        raw, cut = _read_capped(response, self.config.max_response_bytes, deadline)
        if not cut and (ctype == "application/json" or ctype.endswith("+json")):
            try:
                return json.loads(raw)
            except ValueError:
                pass  # declared JSON that is not: shown as text below, so the model sees what came back
        if ctype and not _TEXT_TYPES.match(ctype):
            return {"status": status, "content_type": ctype, "bytes": len(raw), "note": "binary body not shown"}
        text = raw.decode(response.encoding or "utf-8", "replace")
        # Text is cut here, below run_tool's bound, so the model still gets the labelled object, not a cut string.
        cut = cut or len(text) > MAX_TEXT_CHARS
        return {"status": status, "content_type": ctype, "text": text[:MAX_TEXT_CHARS], "truncated": cut}

    def _status_failure(self, response: httpx.Response, excerpt: str) -> ToolFailure:
        status = response.status_code
        said = f"{self.spec.name}: HTTP {status}" + (f": {excerpt}" if excerpt.strip() else "")
        if status in (401, 403):
            return ToolFailure(ErrorCode.AUTH_FAILED, said)
        if status == 429:
            after = response.headers.get("retry-after")
            return ToolFailure(ErrorCode.RATE_LIMITED, said + (f" (retry after {after} s)" if after else ""))
        if status == 408:
            return ToolFailure(ErrorCode.TRANSIENT, said)
        if status >= 500:
            return ToolFailure(ErrorCode.UPSTREAM_ERROR, said)
        return ToolFailure(ErrorCode.BAD_REQUEST, said)  # other 4xx, and a 3xx that is not a usable redirect


def _read_capped(response: httpx.Response, limit: int, deadline: float) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the body, read as a stream; True when there was more."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the body took too long")
        if size + len(chunk) > limit:
            chunks.append(chunk[: limit - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def _host_of(url: httpx.URL) -> str:
    return url.raw_host.decode("ascii").lower()


def _origin_of(url: httpx.URL) -> Origin:
    """Scheme, host and port (the scheme's default when the URL names none)."""
    return url.scheme, _host_of(url), url.port or _DEFAULT_PORTS.get(url.scheme, 0)


def _shown(origin: Origin) -> str:
    """An origin as people write it (``https://host:port``; another scheme only by name)."""
    scheme, host, port = origin
    if scheme not in _DEFAULT_PORTS:
        return f"a {scheme or 'relative'}: URL" if scheme else "a URL without a scheme"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def _allowed_origins(home: httpx.URL, entries: list[str]) -> frozenset[Origin]:
    """The url's own origin, and each allowed_hosts entry: an origin as written, a host name on its standard ports."""
    allowed = {_origin_of(home)}
    for entry in entries:
        if "://" in entry:
            allowed.add(_origin_of(httpx.URL(entry)))
        else:
            allowed.update((scheme, entry, port) for scheme, port in _DEFAULT_PORTS.items())
    return frozenset(allowed)


def _take_location(response: httpx.Response) -> None:
    """Take a redirect's Location off the response before httpx reads it (a response hook).

    httpx parses it to offer the next request even when it follows none, and a malformed one then surfaces
    as a connection-level RemoteProtocolError (retried as transient) or an InvalidURL nobody expects. Here
    every hop's Location is parsed and checked by the tool itself (_redirect_target, then _send).
    """
    location = response.headers.get("location")
    if location is not None and response.status_code in _REDIRECTS:
        del response.headers["location"]
        response.extensions[_LOCATION] = location


def _literal_ip(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


@functools.lru_cache(maxsize=4)
def _default_credential(client_id: str | None) -> TokenCredential:
    """The app's identity (DefaultAzureCredential; on Azure the user-assigned identity AZURE_CLIENT_ID names)."""
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential(managed_identity_client_id=client_id)


def build_tools(
    settings: Settings,
    *,
    credential: Callable[[], TokenCredential] | None = None,
    resolver: Resolver = system_resolver,
    verify: ssl.SSLContext | bool = True,
) -> list[Tool]:
    """One tool per TOOLS_HTTP entry; ConfigError (naming TOOLS_HTTP and the entry) when one cannot work."""
    client_id = settings.azure_client_id
    factory = credential or (lambda: _default_credential(client_id))
    return [HttpTool(config, credential=factory, resolver=resolver, verify=verify) for config in settings.tools_http]


@register_family(FAMILY)
def load(settings: Settings) -> list[Tool]:
    """The family's members: the HTTP APIs declared in TOOLS_HTTP."""
    return build_tools(settings)
