"""A loopback TCP proxy that cuts an event stream in the middle of a message, to test resuming it.

Bytes pass through unchanged. On a connection that carries a request for ``/events``, the proxy records the
request's ``Last-Event-ID`` (header or ``after=``) and, while ``cuts`` remain, forwards the response only up to
the middle of message ``after_messages + 1`` (counted by its ``id:`` field), then closes both sides: the client
sees a broken connection with half a message, as when a network path dies.
"""

from __future__ import annotations

import re
import socket
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

_ID_FIELD = re.compile(rb"(?:^|\n)id: ?([^\r\n]*)\r?\n")


@dataclass
class StreamRequest:
    """One request for the event stream, as the proxy saw it."""

    path: str
    last_event_id: str | None
    ids_forwarded: list[str] = field(default_factory=list)
    cut: bool = False


class CutProxy:
    """Forward 127.0.0.1:<port> to ``upstream``; cut the first ``cuts`` event streams after ``after_messages``."""

    def __init__(self, upstream_port: int, *, cuts: int = 1, after_messages: int = 3) -> None:
        self.upstream_port = upstream_port
        self.cuts = cuts
        self.after_messages = after_messages
        self.streams: list[StreamRequest] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        """The proxy's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop accepting connections."""
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            state: dict[str, StreamRequest | None] = {"stream": None}
            threading.Thread(target=self._requests, args=(client, upstream, state), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, state), daemon=True).start()

    def _requests(self, src: socket.socket, dst: socket.socket, state: dict[str, StreamRequest | None]) -> None:
        """Client to host: note each request for the stream (a connection may carry other requests before)."""
        try:
            while chunk := src.recv(65536):
                head = chunk.split(b"\r\n\r\n", 1)[0].decode("latin-1")
                line = head.split("\r\n", 1)[0]
                if re.match(r"^[A-Z]+ /", line):
                    # A new request on this connection: the earlier response has been read in full.
                    stream = "/events" in line.split(" ")[1].split("?")[0]
                    state["stream"] = self._stream_request(head) if stream else None
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            _shut(dst)

    def _stream_request(self, head: str) -> StreamRequest:
        lines = head.split("\r\n")
        target = lines[0].split(" ")[1]
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        after = parse_qs(urlsplit(target).query).get("after", [None])[0]
        request = StreamRequest(unquote(urlsplit(target).path), headers.get("last-event-id") or after)
        with self._lock:
            self.streams.append(request)
        return request

    def _responses(self, src: socket.socket, dst: socket.socket, state: dict[str, StreamRequest | None]) -> None:
        """Host to client: pass bytes on, and cut a stream that is due for it in the middle of a message."""
        seen, current = b"", None
        try:
            while chunk := src.recv(65536):
                stream = state["stream"]
                if stream is None:
                    dst.sendall(chunk)
                    continue
                if stream is not current:
                    seen, current = b"", stream
                seen += chunk
                stream.ids_forwarded = [m.decode() for m in _ID_FIELD.findall(seen)]
                cut_at = self._cut_point(seen, stream)
                if cut_at is None:
                    dst.sendall(chunk)
                    continue
                dst.sendall(chunk[: max(0, cut_at - (len(seen) - len(chunk)))])
                stream.ids_forwarded = [m.decode() for m in _ID_FIELD.findall(seen[:cut_at])]
                stream.cut = True
                break
        except OSError:
            pass
        finally:
            _shut(dst)
            _shut(src)

    def _cut_point(self, seen: bytes, stream: StreamRequest) -> int | None:
        """Where to cut this stream: just after the ``id:`` line of message after_messages + 1, or None."""
        matches = list(_ID_FIELD.finditer(seen))
        with self._lock:
            if self.cuts <= 0 or stream.cut or len(matches) <= self.after_messages:
                return None
            self.cuts -= 1
        return matches[self.after_messages].end()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
