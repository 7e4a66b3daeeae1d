"""A fake Azure Blob service on loopback (HTTPS): the REST calls the append-blob partial output store makes.

Speaks enough of the Blob REST protocol for ``azure-storage-blob``: create container
(``?restype=container``), create append blob (``x-ms-blob-type: AppendBlob`` with ``x-ms-meta-*``),
Append Block (``?comp=appendblock``), Set Blob Metadata (``?comp=metadata``), Get Blob (ranged reads
answer 206 with ``Content-Range``; a ranged read of an empty blob answers 416 like the service),
Delete Blob, and List Blobs (with metadata, one page). Errors carry the service's XML body and
``x-ms-error-code``. Authentication is a bearer token (azure-core sends those only over TLS, hence the
self-signed certificate of the fake search service); everything else is 401. Requests are recorded.

    with FakeBlobServer(token="t") as blobs:
        BlobServiceClient(blobs.endpoint, credential=..., connection_verify=blobs.ca_file)
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any
from xml.sax.saxutils import escape

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes.loopback import LoopbackServer

API_VERSION = "2025-01-05"


@dataclass
class FakeBlob:
    """One append blob."""

    data: bytearray = field(default_factory=bytearray)
    metadata: dict[str, str] = field(default_factory=dict)
    modified: datetime = field(default_factory=lambda: datetime.now(UTC))
    etag: str = field(default_factory=lambda: f'"0x{uuid.uuid4().hex[:16].upper()}"')

    def touch(self) -> None:
        """Update the modification time and ETag after a write."""
        self.modified = datetime.now(UTC)
        self.etag = f'"0x{uuid.uuid4().hex[:16].upper()}"'


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]


class FakeBlobServer:
    """Blob containers in memory behind HTTPS on 127.0.0.1."""

    def __init__(self, *, token: str = "fake-storage-token") -> None:
        self.token = token
        self.containers: dict[str, dict[str, FakeBlob]] = {}
        self.requests: list[Recorded] = []
        self.port = 0
        self.ca_file = ""
        self._lock = threading.Lock()
        self._loopback: LoopbackServer | None = None

    @property
    def endpoint(self) -> str:
        """The blob service URI (like ``https://<account>.blob.core.windows.net``)."""
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> FakeBlobServer:
        """Listen on a free loopback port with TLS, in a background thread."""
        app = Starlette(routes=[Route("/{path:path}", self._dispatch, methods=["GET", "HEAD", "PUT", "DELETE"])])
        self._loopback = LoopbackServer(app, name="fake-blob", tls=True)
        self._loopback.start()
        self.port, self.ca_file = self._loopback.port, self._loopback.ca_file or ""
        return self

    def stop(self) -> None:
        """Stop the server and remove its certificate."""
        if self._loopback is not None:
            self._loopback.stop()

    def __enter__(self) -> FakeBlobServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def blob(self, container: str, name: str) -> FakeBlob | None:
        """A stored blob, for assertions."""
        with self._lock:
            return self.containers.get(container, {}).get(name)

    # --- protocol ---

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {
            "x-ms-request-id": str(uuid.uuid4()),
            "x-ms-version": API_VERSION,
            "Date": format_datetime(datetime.now(UTC), usegmt=True),
        }
        headers.update(extra or {})
        return headers

    def _error(self, status: int, code: str, message: str) -> Response:
        body = f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{message}</Message></Error>'
        return Response(body, status, headers=self._headers({"x-ms-error-code": code}), media_type="application/xml")

    def _blob_headers(self, blob: FakeBlob) -> dict[str, str]:
        return self._headers(
            {
                "ETag": blob.etag,
                "Last-Modified": format_datetime(blob.modified, usegmt=True),
                "x-ms-blob-type": "AppendBlob",
                "x-ms-blob-committed-block-count": "0",
                **{f"x-ms-meta-{k}": v for k, v in blob.metadata.items()},
            }
        )

    async def _dispatch(self, request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        query = dict(request.query_params)
        path = request.url.path.lstrip("/")
        with self._lock:
            self.requests.append(Recorded(request.method, path, query, headers))
        if headers.get("authorization") != f"Bearer {self.token}":
            return self._error(401, "InvalidAuthenticationInfo", "Server failed to authenticate the request.")
        body = await request.body()
        container, _, name = path.partition("/")
        with self._lock:
            if not name:
                return self._container(request.method, query, container)
            return self._blob_call(request.method, query, headers, container, name, body)

    def _container(self, method: str, query: dict[str, str], container: str) -> Response:
        if method == "GET" and query.get("restype") == "container" and query.get("comp") == "list":
            return self._list(container, query)
        if method != "PUT" or query.get("restype") != "container":
            return self._error(400, "UnsupportedHttpVerb", f"the fake does not serve {method} on a container")
        if container in self.containers:
            return self._error(409, "ContainerAlreadyExists", "The specified container already exists.")
        self.containers[container] = {}
        return Response(b"", 201, headers=self._headers({"ETag": '"0x1"', "Last-Modified": _http_now()}))

    def _list(self, container: str, query: dict[str, str]) -> Response:
        blobs = self.containers.get(container)
        if blobs is None:
            return self._error(404, "ContainerNotFound", "The specified container does not exist.")
        with_meta = "metadata" in query.get("include", "")
        items = []
        for name, blob in sorted(blobs.items()):
            meta = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in blob.metadata.items()) if with_meta else ""
            items.append(
                f"<Blob><Name>{escape(name)}</Name><Properties>"
                f"<Last-Modified>{format_datetime(blob.modified, usegmt=True)}</Last-Modified>"
                f"<Etag>{blob.etag.strip(chr(34))}</Etag><Content-Length>{len(blob.data)}</Content-Length>"
                f"<Content-Type>application/octet-stream</Content-Type><BlobType>AppendBlob</BlobType>"
                f"</Properties>{f'<Metadata>{meta}</Metadata>' if with_meta else ''}</Blob>"
            )
        body = (
            '<?xml version="1.0" encoding="utf-8"?>'
            f'<EnumerationResults ServiceEndpoint="{self.endpoint}/" ContainerName="{escape(container)}">'
            f"<Blobs>{''.join(items)}</Blobs><NextMarker /></EnumerationResults>"
        )
        return Response(body, 200, headers=self._headers(), media_type="application/xml")

    def _blob_call(
        self, method: str, query: dict[str, str], headers: dict[str, str], container: str, name: str, body: bytes
    ) -> Response:
        blobs = self.containers.get(container)
        if blobs is None:
            return self._error(404, "ContainerNotFound", "The specified container does not exist.")
        blob = blobs.get(name)
        comp = query.get("comp")
        if method == "PUT" and comp is None:
            if headers.get("x-ms-blob-type") != "AppendBlob":
                return self._error(400, "InvalidHeaderValue", "the fake only creates append blobs")
            if blob is not None and headers.get("if-none-match") == "*":
                return self._error(409, "BlobAlreadyExists", "The specified blob already exists.")
            blobs[name] = FakeBlob(metadata=_metadata(headers))
            return Response(b"", 201, headers=self._blob_headers(blobs[name]))
        if blob is None:
            return self._error(404, "BlobNotFound", "The specified blob does not exist.")
        if method == "PUT" and comp == "appendblock":
            offset = len(blob.data)
            blob.data.extend(body)
            blob.touch()
            extra = {"x-ms-blob-append-offset": str(offset), "x-ms-request-server-encrypted": "true"}
            return Response(b"", 201, headers=self._blob_headers(blob) | extra)
        if method == "PUT" and comp == "metadata":
            blob.metadata = _metadata(headers)
            blob.touch()
            return Response(b"", 200, headers=self._blob_headers(blob))
        if method == "DELETE":
            del blobs[name]
            return Response(b"", 202, headers=self._headers())
        if method in ("GET", "HEAD"):
            return self._get(blob, headers, method)
        return self._error(400, "UnsupportedHttpVerb", f"the fake does not serve {method} ?comp={comp}")

    def _get(self, blob: FakeBlob, headers: dict[str, str], method: str) -> Response:
        data = bytes(blob.data)
        wanted = headers.get("x-ms-range") or headers.get("range")
        extra = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
        if wanted and wanted.startswith("bytes="):
            if not data:
                return self._error(416, "InvalidRange", "The range specified is invalid for the current size.")
            start_s, _, end_s = wanted.removeprefix("bytes=").partition("-")
            start = int(start_s)
            end = min(int(end_s) if end_s else len(data) - 1, len(data) - 1)
            part = data[start : end + 1]
            extra["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            return Response(part if method == "GET" else b"", 206, headers=self._blob_headers(blob) | extra)
        return Response(data if method == "GET" else b"", 200, headers=self._blob_headers(blob) | extra)


def _metadata(headers: dict[str, str]) -> dict[str, Any]:
    return {k.removeprefix("x-ms-meta-"): v for k, v in headers.items() if k.startswith("x-ms-meta-")}


def _http_now() -> str:
    return format_datetime(datetime.now(UTC), usegmt=True)
