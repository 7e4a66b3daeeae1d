"""One way to run a fake service: an ASGI app served by uvicorn on a free 127.0.0.1 port, from a thread.

With ``tls=True`` it serves HTTPS with a self-signed certificate made at start (``ca_file`` is what
clients must trust): azure-core refuses bearer tokens over plain HTTP.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

import uvicorn


def make_certificate(directory: Path, name: str = "fake") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1/localhost that also acts as its own CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name}.localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / f"{name}.crt"
    key_path = directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class LoopbackServer:
    """Serves one ASGI app on 127.0.0.1 until ``stop()``."""

    def __init__(self, app: Any, *, name: str, tls: bool = False) -> None:
        self.app = app
        self.name = name
        self.tls = tls
        self.port = 0
        self.ca_file: str | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def origin(self) -> str:
        """``http(s)://127.0.0.1:<port>``."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Bind a free port and serve from a daemon thread; returns once the server accepts connections."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        ssl_kwargs: dict[str, Any] = {}
        if self.tls:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"{self.name}-")
            cert, key = make_certificate(Path(self._tmp.name), self.name)
            self.ca_file = str(cert)
            ssl_kwargs = {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=1, **ssl_kwargs
        )
        server = self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])), name=self.name, daemon=True
        )
        self._thread.start()
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"{self.name} failed to start")
            threading.Event().wait(0.01)

    def stop(self) -> None:
        """Stop without waiting for clients' keep-alive connections, and remove the certificate."""
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
