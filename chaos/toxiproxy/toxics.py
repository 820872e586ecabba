"""The toxics at work: one `Stage` per toxic per connection direction, chained by Channels.

Contract (behaviour taken from Toxiproxy v2.4.0 toxics/*.go and link.go):

- A stage reads its input channel and writes its output channel; end of stream (None) is passed
  on by closing the output. A stage that closes its output early ends the link, and the link's
  end closes the connection.
- `interrupt()` stops a stage so that the chain can be rewired or the toxic updated: a chunk the
  stage was holding (sleeping on it, half-sliced, ...) is pushed to its output, never dropped.
  It returns False when the stage has already ended its stream.
- Toxicity is rolled when the stage starts and when its toxic is updated: with probability
  `toxicity` the toxic acts, otherwise the stage passes data through untouched.

Per type:
  noop        passes data through.
  latency     holds each chunk until `latency ± jitter` ms after it was read from the socket.
  bandwidth   releases data at `rate` KB/s (1 KB = 1000 bytes), in 100 ms slices when large;
              rate <= 0 means unlimited.
  timeout     drops all data; closes the stream `timeout` ms after the last data (or the start),
              never if timeout <= 0. Removing it closes the stream too (v2.4.0 `Cleanup`).
  reset_peer  on the first data (or end of stream) waits `timeout` ms, then resets the whole
              connection: SO_LINGER 0 and close, so both peers get a TCP RST.
  slow_close  passes data through; at end of stream waits `delay` ms before closing.
  limit_data  passes the first `bytes` bytes of the connection's direction, then closes.
  slicer      cuts each chunk into slices of about `average_size` ± `size_variation` bytes,
              waiting `delay` µs after each slice.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping

from chaos.toxiproxy.channel import Channel, Chunk
from chaos.toxiproxy.toxic_spec import ToxicSpec, ToxicType

__all__ = ["Stage"]

_BANDWIDTH_SLICE_S = 0.1  # large chunks are released in slices of 100 ms of the rate


class Stage:
    """One toxic's place in one link (one direction of one connection)."""

    __slots__ = (
        "applies",
        "finished",
        "in_hand",
        "input",
        "limit_data_sent_bytes",
        "on_reset",
        "output",
        "rng",
        "spec",
        "task",
    )

    def __init__(
        self,
        spec: ToxicSpec,
        input_channel: Channel,
        output_channel: Channel,
        rng: random.Random,
        on_reset: Callable[[], None],
    ) -> None:
        self.spec = spec
        self.input = input_channel
        self.output = output_channel
        self.rng = rng
        self.on_reset = on_reset
        self.applies = False
        self.roll()
        self.in_hand: Chunk | None = None
        self.finished = False
        self.task: asyncio.Task[None] | None = None
        self.limit_data_sent_bytes = 0  # per-connection state; survives updates

    def roll(self) -> None:
        self.applies = self.rng.random() < self.spec.toxicity

    def start(self) -> None:
        if not self.finished:
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def interrupt(self) -> bool:
        task = self.task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        self.task = None
        return not self.finished

    def close(self) -> None:
        self.finished = True
        self.output.close()

    def cancel(self) -> None:
        """Stop for good (the connection is gone); nothing is flushed."""
        self.finished = True
        if self.task is not None:
            self.task.cancel()

    async def _run(self) -> None:
        pipe = _PIPES[self.spec.type] if self.applies else _pipe_noop
        try:
            await pipe(self)
        except asyncio.CancelledError:
            if self.in_hand is not None and not self.finished:
                self.output.put_force(self.in_hand)
            self.in_hand = None

    async def forward(self, chunk: Chunk) -> None:
        self.in_hand = chunk
        await self.output.put(chunk)
        self.in_hand = None


def _now_s() -> float:
    return asyncio.get_running_loop().time()


async def _pipe_noop(stage: Stage) -> None:
    while (chunk := await stage.input.get()) is not None:
        await stage.forward(chunk)
    stage.close()


async def _pipe_latency(stage: Stage) -> None:
    while (chunk := await stage.input.get()) is not None:
        stage.in_hand = chunk
        delay_ms = stage.spec.attribute("latency")
        jitter_ms = stage.spec.attribute("jitter")
        if jitter_ms > 0:
            delay_ms += stage.rng.randrange(-jitter_ms, jitter_ms)
        sleep_s = delay_ms / 1000 - (_now_s() - chunk.read_at_s)
        if sleep_s > 0:
            await asyncio.sleep(sleep_s)
            chunk = Chunk(chunk.data, chunk.read_at_s + sleep_s)
        await stage.forward(chunk)
    stage.close()


async def _pipe_bandwidth(stage: Stage) -> None:
    owed_s = 0.0  # time the data sent so far should have taken, minus the time slept
    while (chunk := await stage.input.get()) is not None:
        stage.in_hand = chunk
        rate_kb_per_s = stage.spec.attribute("rate")
        if rate_kb_per_s <= 0:
            await stage.forward(chunk)
            owed_s = 0.0
            continue
        owed_s += len(chunk.data) / (rate_kb_per_s * 1000)
        slice_bytes = int(rate_kb_per_s * 1000 * _BANDWIDTH_SLICE_S)
        while len(chunk.data) > slice_bytes:
            await asyncio.sleep(_BANDWIDTH_SLICE_S)
            await stage.output.put(Chunk(chunk.data[:slice_bytes], chunk.read_at_s))
            chunk = Chunk(chunk.data[slice_bytes:], chunk.read_at_s)
            stage.in_hand = chunk
            owed_s -= _BANDWIDTH_SLICE_S
        started_s = _now_s()
        if owed_s > 0:
            await asyncio.sleep(owed_s)
        owed_s -= _now_s() - started_s
        await stage.forward(chunk)
    stage.close()


async def _pipe_timeout(stage: Stage) -> None:
    timeout_ms = stage.spec.attribute("timeout")
    while True:
        if timeout_ms > 0:
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    chunk = await stage.input.get()
            except TimeoutError:
                break
        else:
            chunk = await stage.input.get()
        if chunk is None:
            break
        # The data is dropped: nothing gets through a timeout toxic.
    stage.close()


async def _pipe_reset_peer(stage: Stage) -> None:
    await stage.input.get()  # the first data (dropped) or the end of stream
    loop = asyncio.get_running_loop()
    reset_at_s = loop.time() + stage.spec.attribute("timeout") / 1000
    try:
        await asyncio.sleep(max(0.0, reset_at_s - loop.time()))
    except asyncio.CancelledError:
        # Interrupted while the reset is pending: the connection is doomed all the same.
        stage.finished = True
        loop.call_at(reset_at_s, stage.on_reset)
        raise
    stage.close()
    stage.on_reset()


async def _pipe_slow_close(stage: Stage) -> None:
    while (chunk := await stage.input.get()) is not None:
        await stage.forward(chunk)
    await asyncio.sleep(max(0, stage.spec.attribute("delay")) / 1000)
    stage.close()


async def _pipe_limit_data(stage: Stage) -> None:
    limit_bytes = stage.spec.attribute("bytes")
    while (chunk := await stage.input.get()) is not None:
        remaining_bytes = max(0, limit_bytes - stage.limit_data_sent_bytes)
        if remaining_bytes < len(chunk.data):
            chunk = Chunk(chunk.data[:remaining_bytes], chunk.read_at_s)
        if chunk.data:
            stage.limit_data_sent_bytes += len(chunk.data)
            await stage.forward(chunk)
        if limit_bytes - stage.limit_data_sent_bytes <= 0:
            break
    stage.close()


def slice_bounds(
    length: int, average_size: int, size_variation: int, rng: random.Random
) -> list[tuple[int, int]]:
    """Split [0, length) into slices of about average_size ± size_variation bytes, in order.

    Halves recursively (so no end is systematically small) until a piece is within
    average_size + size_variation; each cut point moves by up to ± size_variation.
    """
    variation = max(0, size_variation)
    bounds: list[tuple[int, int]] = []
    pending = [(0, length)]
    while pending:
        start, end = pending.pop()
        if end - start - average_size <= variation:
            bounds.append((start, end))
            continue
        middle = start + (end - start) // 2
        if variation > 0:
            middle += rng.randrange(-variation, variation)
        middle = min(max(middle, start + 1), end - 1)
        pending.append((middle, end))
        pending.append((start, middle))
    return bounds


async def _pipe_slicer(stage: Stage) -> None:
    while (chunk := await stage.input.get()) is not None:
        average_size = stage.spec.attribute("average_size")
        if average_size <= 0:
            await stage.forward(chunk)
            continue
        delay_s = max(0, stage.spec.attribute("delay")) / 1_000_000
        bounds = slice_bounds(
            len(chunk.data), average_size, stage.spec.attribute("size_variation"), stage.rng
        )
        for start, end in bounds:
            stage.in_hand = Chunk(chunk.data[start:], chunk.read_at_s)
            await stage.output.put(Chunk(chunk.data[start:end], chunk.read_at_s))
            rest = chunk.data[end:]
            stage.in_hand = Chunk(rest, chunk.read_at_s) if rest else None
            if delay_s > 0:
                await asyncio.sleep(delay_s)
        stage.in_hand = None
    stage.close()


_PIPES: Mapping[ToxicType, Callable[[Stage], Awaitable[None]]] = {
    ToxicType.NOOP: _pipe_noop,
    ToxicType.LATENCY: _pipe_latency,
    ToxicType.BANDWIDTH: _pipe_bandwidth,
    ToxicType.TIMEOUT: _pipe_timeout,
    ToxicType.RESET_PEER: _pipe_reset_peer,
    ToxicType.SLOW_CLOSE: _pipe_slow_close,
    ToxicType.LIMIT_DATA: _pipe_limit_data,
    ToxicType.SLICER: _pipe_slicer,
}
