"""A TCP echo server: the upstream that proxy tests and the proxy benchmark talk to.

Run it:  python -m chaos.toxiproxy.echo_server [--host 127.0.0.1] [--port 0]
It prints `echo listening on HOST:PORT` once it accepts connections; SIGINT/SIGTERM stop it.

Contract: every byte received on a connection is sent back on it, in order. When the peer
closes its sending side the server closes the connection after sending what it had. Reading is
paused while the send buffer is above asyncio's high-water mark, so a client that does not read
slows its own sends instead of growing the server's memory. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import signal
import sys
from types import TracebackType

from chaos.toxiproxy.loop_thread import LoopThread

__all__ = ["EchoServerThread", "start_echo_server"]


class _EchoProtocol(asyncio.Protocol):
    def __init__(self, connections: set[asyncio.Transport]) -> None:
        self._connections = connections
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._connections.add(transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)

    def pause_writing(self) -> None:
        assert self._transport is not None
        self._transport.pause_reading()

    def resume_writing(self) -> None:
        assert self._transport is not None
        self._transport.resume_reading()

    def eof_received(self) -> bool:
        return False  # close once the echoed data is flushed

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._connections.discard(self._transport)


class EchoServer:
    def __init__(self, server: asyncio.Server, connections: set[asyncio.Transport]) -> None:
        self._server = server
        self._connections = connections
        bound_host, bound_port = server.sockets[0].getsockname()[:2]
        self.host: str = str(bound_host)
        self.port: int = int(bound_port)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        self._server.close()
        for transport in list(self._connections):
            transport.abort()


async def start_echo_server(host: str = "127.0.0.1", port: int = 0) -> EchoServer:
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"host must be a loopback address, got {host!r}")
    connections: set[asyncio.Transport] = set()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _EchoProtocol(connections), host, port)
    return EchoServer(server, connections)


class EchoServerThread:
    """An echo server on its own event loop thread; a context manager."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._host = host
        self._loop_thread = LoopThread("echo-server")
        self._server: EchoServer | None = None

    @property
    def address(self) -> str:
        assert self._server is not None
        return self._server.address

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.port

    def __enter__(self) -> EchoServerThread:
        self._loop_thread.start()
        try:
            self._server = self._loop_thread.run(lambda: start_echo_server(self._host))
        except BaseException:
            self._loop_thread.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        server = self._server
        if server is not None:

            async def close() -> None:
                server.close()
                await asyncio.sleep(0)

            self._loop_thread.run(close)
        self._loop_thread.stop()


async def _serve(host: str, port: int) -> None:
    server = await start_echo_server(host, port)
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stop_requested.set)
    print(f"echo listening on {server.address}", flush=True)
    try:
        await stop_requested.wait()
    finally:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.toxiproxy.echo_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    arguments = parser.parse_args(argv)
    asyncio.run(_serve(arguments.host, arguments.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
