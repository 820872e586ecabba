"""A client that speaks first (a TLS ClientHello) through our Toxiproxy proxies.

The proxy accepts a client and only then dials its upstream; what the client sends meanwhile
must reach the upstream once it is joined. CPython 3.11.2 (Debian bookworm, the compose image)
delivers those bytes to the protocol even though it paused reading in `connection_made`; the
proxy dropped them, so TLS handshakes through it stalled and the chaos runs in the image with
TLS did not converge (chaos/toxiproxy/link.py, `SocketSide`).
"""

from __future__ import annotations

import asyncio
import random
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.toxiproxy.echo_server import EchoServerThread
from chaos.toxiproxy.link import Connection, SocketSide
from chaos.toxiproxy.loop_thread import LoopThread
from chaos.toxiproxy.toxic_spec import Stream
from cluster.certs import NODE_SERVER_NAME, init_ca, issue_node

HANDSHAKE_DEADLINE_S = 5.0
CONNECTIONS = 10


def test_bytes_read_before_the_upstream_is_joined_reach_it(echo_server: EchoServerThread) -> None:
    """The loop delivers a read to the accepted side before its upstream is dialled (what
    CPython 3.11.2's loop does): the bytes go upstream once the connection starts."""
    echo_host, _, echo_port = echo_server.address.rpartition(":")

    async def scenario() -> bytes:
        loop = asyncio.get_running_loop()
        accepted: asyncio.Queue[SocketSide] = asyncio.Queue()

        def accept() -> SocketSide:
            side = SocketSide()
            loop.call_soon(accepted.put_nowait, side)
            return side

        listener = await loop.create_server(accept, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            client = await asyncio.wait_for(accepted.get(), HANDSHAKE_DEADLINE_S)
            client.data_received(b"first bytes")  # read while the upstream is being dialled
            _transport, upstream = await loop.create_connection(
                SocketSide, echo_host, int(echo_port)
            )
            chains: dict[Stream, list[Any]] = {Stream.UPSTREAM: [], Stream.DOWNSTREAM: []}
            Connection(client, upstream, chains, random.Random(1), lambda _c: None).start()
            return await asyncio.wait_for(reader.readexactly(11), HANDSHAKE_DEADLINE_S)
        finally:
            writer.close()
            listener.close()
            await listener.wait_closed()

    assert asyncio.run(scenario()) == b"first bytes"


@pytest.fixture
def tls_echo(tmp_path: Path) -> Iterator[tuple[str, ssl.SSLContext]]:
    """A TLS echo server with a node certificate of our CA: its address, a client context."""
    ca = init_ca(tmp_path / "ca")
    node = issue_node(tmp_path / "ca", "n1")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(node.cert, node.key)
    client_context = ssl.create_default_context(cafile=str(ca.cert))

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def start() -> asyncio.Server:
        return await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_context)

    thread = LoopThread("test-tls-echo")
    thread.start()
    try:
        server = thread.run(start)
        port = server.sockets[0].getsockname()[1]
        yield f"127.0.0.1:{port}", client_context

        async def stop() -> None:
            server.close()

        thread.run(stop)
    finally:
        thread.stop()


def test_tls_handshakes_through_a_proxy_complete(
    client: Any, tls_echo: tuple[str, ssl.SSLContext]
) -> None:
    """Each new connection's ClientHello goes out at once, before the proxy has dialled the
    upstream: every handshake completes, and data then passes."""
    upstream, context = tls_echo
    proxy = client.create(upstream=upstream, name="tls")
    host, _, port = proxy.listen.rpartition(":")
    for number in range(CONNECTIONS):
        raw = socket.create_connection((host, int(port)), timeout=HANDSHAKE_DEADLINE_S)
        with context.wrap_socket(raw, server_hostname=NODE_SERVER_NAME) as tls:
            message = f"hello {number}".encode()
            tls.sendall(message)
            received = b""
            while len(received) < len(message):
                piece = tls.recv(len(message) - len(received))
                assert piece, f"connection {number} closed after {received!r}"
                received += piece
            assert received == message
