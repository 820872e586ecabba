"""A local stand-in for the Toxiproxy v2.4.0 server, for machines without its binary.

Run it:   python -m chaos.toxiproxy [--host 127.0.0.1] [--port 8474] [--seed N]
It prints one line `toxiproxy listening on http://HOST:PORT` once it accepts requests (useful
with --port 0), and stops cleanly on SIGINT/SIGTERM.

Embed it: `ToxiproxyServer` runs on the caller's event loop (`await start()` / `await stop()`);
`ServerThread` runs one on its own loop in a thread, for blocking callers such as tests and the
`toxiproxy-python` client:

    with ServerThread() as server:
        client = toxiproxy.Toxiproxy(); client.update_api_consumer(server.host, server.port)

Contract: the HTTP API answers like the real server (routes, JSON, status codes:
chaos/toxiproxy/api.py); the proxies apply the same toxics (chaos/toxiproxy/toxics.py).
Everything listens on loopback only; stop() closes the API listener, the API connections, every
proxy listener and every proxied connection.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import random
import signal
import sys
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from chaos.toxiproxy.api import TOXIPROXY_VERSION, ToxiproxyApi
from chaos.toxiproxy.http11 import serve_http_connection
from chaos.toxiproxy.loop_thread import LoopThread

__all__ = ["DEFAULT_PORT", "ServerThread", "ToxiproxyServer", "main"]

DEFAULT_PORT = 8474
_T = TypeVar("_T")

ApiFactory = Callable[[random.Random], ToxiproxyApi]


def _require_loopback(host: str) -> None:
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"host must be a loopback address (127.0.0.0/8, ::1), got {host!r}")


class ToxiproxyServer:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        seed: int | None = None,
        api_factory: ApiFactory = ToxiproxyApi,
    ) -> None:
        _require_loopback(host)
        self.host = host
        self.port = port
        self.api = api_factory(random.Random(seed))
        self._server: asyncio.Server | None = None
        self._http_connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_http, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _on_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._http_connections[task] = writer
        try:
            await serve_http_connection(reader, writer, self.api.handle)
        finally:
            del self._http_connections[task]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        # Cut the API connections; their tasks then end on their own (no cancellation noise).
        tasks = list(self._http_connections)
        for writer in self._http_connections.values():
            writer.transport.abort()
        if tasks:
            await asyncio.wait(tasks)
        await self.api.close()
        await asyncio.sleep(0)  # let aborted transports run their connection_lost callbacks


class ServerThread:
    """A ToxiproxyServer on its own event loop in a daemon thread; a context manager."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int | None = 0,
        api_factory: ApiFactory = ToxiproxyApi,
    ) -> None:
        self.server = ToxiproxyServer(host, port, seed, api_factory)
        self._loop_thread = LoopThread("toxiproxy-server")
        self._started = False

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> ServerThread:
        self._loop_thread.start()
        try:
            self._loop_thread.run(self.server.start)
        except BaseException:
            self._loop_thread.stop()
            raise
        self._started = True
        return self

    def call(self, function: Callable[[], Awaitable[_T]], timeout_s: float = 10.0) -> _T:
        """Run `function()` on the server's loop and return its result (for inspection)."""
        return self._loop_thread.run(function, timeout_s)

    def stop(self) -> None:
        if self._started:
            self._started = False
            try:
                self._loop_thread.run(self.server.stop)
            finally:
                self._loop_thread.stop()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


async def _serve(host: str, port: int, seed: int | None) -> None:
    server = ToxiproxyServer(host, port, seed)
    await server.start()
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stop_requested.set)
    print(f"toxiproxy listening on {server.url} (API of Toxiproxy {TOXIPROXY_VERSION})", flush=True)
    try:
        await stop_requested.wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.toxiproxy",
        description="Serve Toxiproxy v2.4.0's HTTP API and proxies (loopback only).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="API address (loopback only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="API port; 0 = any free")
    parser.add_argument("--seed", type=int, default=None, help="seed for toxicity and jitter")
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    arguments = parser.parse_args(argv)
    try:
        _require_loopback(arguments.host)
    except ValueError as error:
        parser.error(str(error))
    logging.basicConfig(level=arguments.log_level.upper(), stream=sys.stderr)
    asyncio.run(_serve(arguments.host, arguments.port, arguments.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
