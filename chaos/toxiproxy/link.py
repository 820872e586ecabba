"""One proxied TCP connection: two links (upstream, downstream), each a chain of toxic stages.

A link moves bytes from a source socket to a destination socket:

    source --data_received--> [stage 1] -> ... -> [stage n] --writer task--> destination

Contract:
- Bytes leave a link in the order they entered it; no byte is dropped except by a toxic whose
  job it is (timeout, limit_data, reset_peer).
- A link that never had a toxic runs in *direct mode*: each read is written to the destination
  from the protocol callback, with no task or queue in between, and the source stops reading
  while the destination's send buffer is full. So an untouched proxy costs little.
- The first toxic switches the link to channel mode for the rest of its life (which keeps the
  ordering trivial): reads go into the first stage's channel, and the source stops reading
  while that channel is full (back-pressure down to TCP flow control).
- Adding, updating or removing a toxic rewires open links in place: the affected stage and its
  predecessor are interrupted, push on any chunk they held, and restart (v2.4.0 link.go).
- When one link ends (end of stream, a toxic closing it, a socket error), its destination is
  closed and the other link stops reading, so the whole connection closes, like the real
  server, which does not keep half-closed connections.
- `Connection.reset()` (reset_peer) sets SO_LINGER 0 and aborts both sockets: both peers see
  a TCP RST. `Connection.abort()` (proxy disabled or deleted) cuts both sockets at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import socket
import struct
from collections.abc import Callable, Mapping, Sequence

from chaos.toxiproxy.channel import Channel, Chunk
from chaos.toxiproxy.toxic_spec import Stream, ToxicSpec, ToxicType
from chaos.toxiproxy.toxics import Stage

__all__ = ["Connection", "Link", "SocketSide"]

_WRITER_CAPACITY_BYTES = 1  # one chunk at a time to the writer


class SocketSide(asyncio.Protocol):
    """One socket of a proxied connection: feeds the link it is the source of, and tells the
    link it is the destination of when its send buffer fills or drains.

    (A plain Protocol on purpose: each read is a fresh `bytes` that the destination transport
    may keep. A BufferedProtocol with a reused buffer would be unsafe from Python 3.12 on,
    whose transports queue the memoryview they are given instead of copying it.)

    Until its links exist (the upstream is being dialled) a side keeps what it reads and its
    end of input for `Connection.start`, pausing on its first read. Not in `connection_made`:
    CPython 3.11.2 (Debian bookworm, the compose image) starts reading after it regardless, so
    a TLS ClientHello sent at once was dropped and the handshake stalled (the chaos runs in
    the image did not converge)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.source_of: Link | None = None
        self.destination_of: Link | None = None
        self.write_paused = False
        self.lost = False
        self.early: list[bytes] = []  # read before the links existed, for Connection.start
        self.early_eof = False  # its input ended before the links existed
        self._writable: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.source_of is not None:
            self.source_of.on_data(data)
            return
        self.early.append(data)  # no link yet: kept, and no more read until there is one
        if self.transport is not None:
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        if self.source_of is not None:
            self.source_of.on_source_end()
        else:
            self.early_eof = True
        return True  # the links decide when the socket closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._wake_writer()
        if self.source_of is not None:
            self.source_of.on_source_end()
        if self.destination_of is not None:
            self.destination_of.finish()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.destination_of is not None:
            self.destination_of.on_destination_full(True)

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_writer()
        if self.destination_of is not None:
            self.destination_of.on_destination_full(False)

    async def wait_writable(self) -> None:
        while self.write_paused and not self.lost:
            self._writable = asyncio.get_running_loop().create_future()
            await self._writable

    def _wake_writer(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def set_linger_zero(self) -> None:
        sock = None if self.transport is None else self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class _Pause(enum.Enum):
    DESTINATION_FULL = "destination send buffer full"  # direct mode
    CHANNEL_FULL = "first stage's channel full"  # channel mode
    ENDED = "input ended"


class Link:
    """One direction of one connection."""

    def __init__(
        self,
        connection: Connection,
        stream: Stream,
        source: SocketSide,
        destination: SocketSide,
        chain: Sequence[ToxicSpec],
        rng: random.Random,
    ) -> None:
        self.connection = connection
        self.stream = stream
        self.source = source
        self.destination = destination
        self._rng = rng
        self._loop = asyncio.get_running_loop()
        self.finished = False
        self._stages: list[Stage] = []
        self._reader_output: Channel | None = None  # None: direct mode
        self._reader_ended = False
        self._pauses: set[_Pause] = set()
        self._writer_input: Channel | None = None
        self._writer_task: asyncio.Task[None] | None = None
        if chain:
            self._writer_input = Channel(_WRITER_CAPACITY_BYTES)
            next_output = self._writer_input
            for spec in reversed(chain):
                stage = self._new_stage(spec, next_output)
                self._stages.insert(0, stage)
                next_output = stage.input
            self._set_reader_output(next_output)

    @property
    def reader_paused(self) -> bool:
        """The source is not being read because the link is full (for tests, diagnostics)."""
        return bool(self._pauses - {_Pause.ENDED})

    def _new_stage(self, spec: ToxicSpec, output: Channel) -> Stage:
        return Stage(
            spec, Channel(spec.input_capacity_bytes), output, self._rng, self.connection.reset
        )

    def start(self) -> None:
        for stage in self._stages:
            stage.start()
        if self._writer_input is not None:
            self._writer_task = self._loop.create_task(self._run_writer())

    # --- the data path -------------------------------------------------------------------

    def on_data(self, data: bytes) -> None:
        """Bytes read from the source."""
        if self._reader_ended or self.finished:
            return
        output = self._reader_output
        if output is None:
            assert self.destination.transport is not None
            self.destination.transport.write(data)
        else:
            output.put_force(Chunk(data, self._loop.time()))
            if output.full:
                self._pause(_Pause.CHANNEL_FULL)

    def on_destination_full(self, full: bool) -> None:
        if self._reader_output is not None:
            return  # channel mode: the writer task waits for the destination instead
        if full:
            self._pause(_Pause.DESTINATION_FULL)
        else:
            self._resume(_Pause.DESTINATION_FULL)

    def _on_output_space(self) -> None:
        output = self._reader_output
        if output is not None and not output.full:
            self._resume(_Pause.CHANNEL_FULL)

    def _pause(self, reason: _Pause) -> None:
        if not self._pauses and self.source.transport is not None:
            self.source.transport.pause_reading()
        self._pauses.add(reason)

    def _resume(self, reason: _Pause) -> None:
        if reason in self._pauses:
            self._pauses.discard(reason)
            if not self._pauses and self.source.transport is not None:
                self.source.transport.resume_reading()

    def _set_reader_output(self, output: Channel) -> None:
        if self._reader_output is not None:
            self._reader_output.on_space = None
        self._reader_output = output
        output.on_space = self._on_output_space
        self._resume(_Pause.DESTINATION_FULL)
        if output.full:
            self._pause(_Pause.CHANNEL_FULL)
        else:
            self._resume(_Pause.CHANNEL_FULL)

    async def _run_writer(self) -> None:
        channel = self._writer_input
        transport = self.destination.transport
        assert channel is not None and transport is not None
        try:
            while (chunk := await channel.get()) is not None:
                if self.destination.lost:
                    break
                transport.write(chunk.data)
                if self.destination.write_paused:
                    await self.destination.wait_writable()
        except asyncio.CancelledError:
            return
        self.finish()

    def on_source_end(self) -> None:
        """End of input (EOF, a read error, or the other direction ended)."""
        if self._reader_ended or self.finished:
            return
        self._reader_ended = True
        self._pause(_Pause.ENDED)
        if self._reader_output is None:
            self.finish()
        else:
            self._reader_output.close()

    def finish(self) -> None:
        """End this link for good: stop its tasks and let the connection close its sockets."""
        if self.finished:
            return
        self.finished = True
        current = asyncio.current_task()
        for stage in self._stages:
            if stage.task is not current:
                stage.cancel()
        if self._writer_task is not None and self._writer_task is not current:
            self._writer_task.cancel()
        self.connection.link_finished(self)

    # --- rewiring (called by the proxy, one change at a time) ------------------------------

    def _find(self, name: str) -> int | None:
        for index, stage in enumerate(self._stages):
            if stage.spec.name == name:
                return index
        return None

    async def add_toxic(self, spec: ToxicSpec) -> None:
        if self.finished or self._reader_ended:
            return
        if self._writer_input is None:  # leave direct mode for good
            self._writer_input = Channel(_WRITER_CAPACITY_BYTES)
            self._set_reader_output(self._writer_input)
            self._writer_task = self._loop.create_task(self._run_writer())
        stage = self._new_stage(spec, self._writer_input)
        if self._stages:
            previous = self._stages[-1]
            if not await previous.interrupt() or self.finished:
                return
            previous.output = stage.input
            self._stages.append(stage)
            stage.start()
            previous.start()
        else:
            self._stages.append(stage)
            self._set_reader_output(stage.input)
            stage.start()

    async def update_toxic(self, spec: ToxicSpec) -> None:
        index = self._find(spec.name)
        if index is None or self.finished:
            return
        stage = self._stages[index]
        if await stage.interrupt() and not self.finished:
            stage.spec = spec
            stage.roll()
            stage.start()

    async def remove_toxic(self, name: str) -> None:
        index = self._find(name)
        if index is None or self.finished:
            return
        stage = self._stages[index]
        if not await stage.interrupt() or self.finished:
            return
        if stage.spec.type is ToxicType.TIMEOUT:
            stage.close()  # v2.4.0: removing a timeout toxic closes its connections
            return
        previous = self._stages[index - 1] if index > 0 else None
        previous_running = await previous.interrupt() if previous is not None else True
        if self.finished:
            return
        # Whatever waits in the removed stage's input goes on, after what it already sent.
        for chunk in stage.input.take_all():
            stage.output.put_force(chunk)
        if stage.input.closed:
            stage.output.close()
        del self._stages[index]
        if previous is None:
            self._set_reader_output(stage.output)
        else:
            previous.output = stage.output
            if previous_running:
                previous.start()


class Connection:
    """A client connection and its upstream connection, joined by two links."""

    def __init__(
        self,
        client: SocketSide,
        upstream: SocketSide,
        chains: Mapping[Stream, Sequence[ToxicSpec]],
        rng: random.Random,
        on_closed: Callable[[Connection], None],
    ) -> None:
        self._sides = (client, upstream)
        self._on_closed = on_closed
        self._cutting = False  # abort sockets instead of a graceful close
        self.closed = False
        self.links: dict[Stream, Link] = {
            Stream.UPSTREAM: Link(
                self, Stream.UPSTREAM, client, upstream, chains[Stream.UPSTREAM], rng
            ),
            Stream.DOWNSTREAM: Link(
                self, Stream.DOWNSTREAM, upstream, client, chains[Stream.DOWNSTREAM], rng
            ),
        }
        client.source_of = upstream.destination_of = self.links[Stream.UPSTREAM]
        upstream.source_of = client.destination_of = self.links[Stream.DOWNSTREAM]

    def start(self) -> None:
        for link in self.links.values():
            link.start()
        for side in self._sides:
            source_of = side.source_of
            assert source_of is not None
            early, side.early = side.early, []
            for data in early:  # what it said before the links existed, first
                source_of.on_data(data)
            if side.early_eof:
                source_of.on_source_end()
            if side.lost:  # a peer that left before the links existed
                side.connection_lost(None)
            elif (  # it reads again, unless it ended or its early bytes filled the link
                side.transport is not None
                and not side.early_eof
                and not source_of.reader_paused
                and not side.transport.is_reading()
            ):
                side.transport.resume_reading()

    def link_finished(self, link: Link) -> None:
        transport = link.destination.transport
        if transport is not None:
            if self._cutting:
                transport.abort()
            else:
                transport.close()
        for other in self.links.values():
            if other is not link:
                other.on_source_end()
        if all(each.finished for each in self.links.values()) and not self.closed:
            self.closed = True
            self._on_closed(self)

    def abort(self) -> None:
        """Cut both sockets now (a disabled or deleted proxy)."""
        if self.closed:
            return
        self._cutting = True
        for link in self.links.values():
            link.finish()

    def reset(self) -> None:
        """TCP RST to both peers (reset_peer)."""
        if self.closed:
            return
        for side in self._sides:
            side.set_linger_zero()
        self.abort()
