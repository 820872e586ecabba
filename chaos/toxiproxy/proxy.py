"""A proxy: a listening address, an upstream, and the toxic chains applied to its connections.

Contract (Toxiproxy v2.4.0 proxy.go, toxic_collection.go, README "Proxy fields"):
- `start()` listens on `listen`; with port 0 the kernel picks one and `listen` becomes the
  address actually bound ("127.0.0.1:PORT"), so a later re-enable listens on the same port.
- `stop()` stops listening (new connects are refused) and cuts every open connection.
- Changing `listen` or `upstream` restarts the proxy (open connections are cut).
- Each accepted client gets its own upstream connection; if the upstream cannot be dialled the
  client is closed. A connection starts with the toxics present when it was accepted; later
  changes are applied to it in place (see chaos/toxiproxy/link.py).
- Toxic names are unique across both streams; the listing is upstream first, then downstream,
  each in the order added.

This emulator only listens on loopback (127.0.0.0/8, ::1, "localhost"): any other listen
address is refused with HTTP 400 before anything changes. It never resolves other names.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import random
from http import HTTPStatus

from chaos.toxiproxy.errors import ApiError
from chaos.toxiproxy.link import Connection, SocketSide
from chaos.toxiproxy.toxic_spec import Stream, ToxicSpec

__all__ = ["Proxy", "check_listen_address"]

_log = logging.getLogger(__name__)


def _split_host_port(address: str, verb: str) -> tuple[str, str]:
    """Go's net.SplitHostPort, with its error text (the real server answers 500 with it)."""
    host, separator, port = address.rpartition(":")
    if not separator:
        raise ApiError(
            f"{verb} tcp: address {address}: missing port in address",
            HTTPStatus.INTERNAL_SERVER_ERROR,
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def check_listen_address(address: str) -> tuple[str, int]:
    """(host to bind, port) for a listen address, or ApiError (400 if it is not loopback)."""
    host, port_text = _split_host_port(address, "listen")
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ApiError(
            f"listen tcp: address {address}: invalid port", HTTPStatus.INTERNAL_SERVER_ERROR
        )
    bind_host = "127.0.0.1" if host == "localhost" else host
    try:
        loopback = ipaddress.ip_address(bind_host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ApiError(
            f"listen address {address!r} is not a loopback address: this Toxiproxy emulator "
            "only listens on 127.0.0.0/8, [::1] or localhost",
            HTTPStatus.BAD_REQUEST,
        )
    return bind_host, int(port_text)


def _format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Proxy:
    def __init__(self, name: str, listen: str, upstream: str, rng: random.Random) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self._rng = rng
        self._server: asyncio.Server | None = None
        self._chains: dict[Stream, list[ToxicSpec]] = {Stream.UPSTREAM: [], Stream.DOWNSTREAM: []}
        self._connections: set[Connection] = set()
        self._dialing: set[asyncio.Task[None]] = set()
        self._generation = 0  # bumped by stop(): a dial that completes after it is dropped

    # --- views -----------------------------------------------------------------------------

    def toxics(self) -> list[ToxicSpec]:
        return [*self._chains[Stream.UPSTREAM], *self._chains[Stream.DOWNSTREAM]]

    def find_toxic(self, name: str) -> ToxicSpec | None:
        for spec in self.toxics():
            if spec.name == name:
                return spec
        return None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [spec.to_json() for spec in self.toxics()],
        }

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def connections(self) -> list[Connection]:
        return list(self._connections)

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen (no-op if already listening); ApiError 400/500 if it cannot."""
        if self.enabled:
            return
        host, port = check_listen_address(self.listen)
        loop = asyncio.get_running_loop()
        generation = self._generation
        try:
            server = await loop.create_server(
                lambda: _ClientSide(self, generation),
                host,
                port,
                reuse_address=True,
            )
        except OSError as error:
            reason = os.strerror(error.errno).lower() if error.errno else str(error)
            raise ApiError(
                f"listen tcp {self.listen}: bind: {reason}", HTTPStatus.INTERNAL_SERVER_ERROR
            ) from None
        bound_host, bound_port = server.sockets[0].getsockname()[:2]
        self._server = server
        self.listen = _format_address(bound_host, bound_port)
        self.enabled = True
        _log.info("proxy %s listening on %s -> %s", self.name, self.listen, self.upstream)

    def stop(self) -> None:
        """Stop listening and cut every open connection (no-op if not listening)."""
        if not self.enabled:
            return
        self.enabled = False
        self._generation += 1
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._dialing):
            task.cancel()
        for connection in list(self._connections):
            connection.abort()
        self._connections.clear()
        _log.info("proxy %s stopped", self.name)

    async def update(self, listen: str, upstream: str, enabled: bool) -> None:
        if listen != self.listen:
            check_listen_address(listen)
        if listen != self.listen or upstream != self.upstream:
            self.stop()
            self.listen = listen
            self.upstream = upstream
        if enabled and not self.enabled:
            await self.start()
        elif not enabled:
            self.stop()

    def accepted(self, client: SocketSide, generation: int) -> None:
        """A client connected (what it sends meanwhile waits in it): dial the upstream, join them."""
        if generation != self._generation:
            if client.transport is not None:
                client.transport.abort()
            return
        task = asyncio.get_running_loop().create_task(self._join_upstream(client, generation))
        self._dialing.add(task)
        task.add_done_callback(self._dialing.discard)

    async def _join_upstream(self, client: SocketSide, generation: int) -> None:
        assert client.transport is not None
        loop = asyncio.get_running_loop()
        try:
            host, port = _split_host_port(self.upstream, "dial")
            _transport, upstream = await loop.create_connection(SocketSide, host, int(port))
        except (OSError, ValueError, ApiError) as error:
            _log.warning("proxy %s: cannot dial upstream %s: %s", self.name, self.upstream, error)
            client.transport.close()
            return
        except asyncio.CancelledError:
            client.transport.abort()
            raise
        if generation != self._generation:
            assert upstream.transport is not None
            upstream.transport.abort()
            client.transport.abort()
            return
        chains = {stream: list(chain) for stream, chain in self._chains.items()}
        connection = Connection(client, upstream, chains, self._rng, self._connections.discard)
        self._connections.add(connection)
        connection.start()

    # --- toxics ----------------------------------------------------------------------------

    def _open_connections(self) -> list[Connection]:
        return [each for each in self._connections if not each.closed]

    async def add_toxic(self, spec: ToxicSpec) -> None:
        self._chains[spec.stream].append(spec)
        for connection in self._open_connections():
            await connection.links[spec.stream].add_toxic(spec)

    async def update_toxic(self, spec: ToxicSpec) -> None:
        chain = self._chains[spec.stream]
        chain[[each.name for each in chain].index(spec.name)] = spec
        for connection in self._open_connections():
            await connection.links[spec.stream].update_toxic(spec)

    async def remove_toxic(self, name: str) -> None:
        for stream, chain in self._chains.items():
            for index, spec in enumerate(chain):
                if spec.name == name:
                    del chain[index]
                    for connection in self._open_connections():
                        await connection.links[stream].remove_toxic(name)
                    return

    async def remove_all_toxics(self) -> None:
        for spec in self.toxics():
            await self.remove_toxic(spec.name)


class _ClientSide(SocketSide):
    """The accepted socket of a client: reports itself to its proxy once connected."""

    def __init__(self, proxy: Proxy, generation: int) -> None:
        super().__init__()
        self._proxy = proxy
        self._generation = generation

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._proxy.accepted(self, self._generation)
