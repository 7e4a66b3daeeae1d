"""The listening sockets the CLI binds give accepted connections TCP_NODELAY.

asyncio only sets TCP_NODELAY on accepted sockets whose protocol is IPPROTO_TCP; a socket created
with protocol 0 keeps Nagle on, and h11's separate header and body writes then wait for the
client's delayed ACK (about 40 ms per request on a kept-alive connection).
"""

from __future__ import annotations

import asyncio
import socket

from devhost.serve import bind_socket


def test_accepted_connections_have_nodelay() -> None:
    async def main() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        listener = bind_socket("127.0.0.1", 0)
        server = await asyncio.start_server(on_connect, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
            flag = await asyncio.wait_for(accepted, 10)
            writer.close()
            return flag

    assert asyncio.run(main()) != 0
