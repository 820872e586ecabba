"""Chunks of a byte stream and the bounded FIFO channels that join toxic stages.

Contract:
- A `Channel` has one consumer. `get()` returns chunks in the order they were put and `None`
  forever once the channel is closed and empty (end of stream is sticky, like a closed Go chan).
- `put()` waits while `capacity_bytes` or more are queued (so at least one chunk always fits);
  that wait is how back-pressure reaches the socket reader (and so TCP flow control) when a
  toxic is slow.
- Both waits are cancellation-safe: a cancelled `get()` takes nothing, a cancelled `put()` adds
  nothing. `put_force()` never waits: a socket reader uses it (data already read cannot be
  refused; it pauses its socket once `full`, and `on_space` tells it when to resume), and so
  does rewiring a chain, so that data a stage held when interrupted is never dropped.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Channel", "Chunk"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """Bytes read from a socket and the loop time (s) at which they were read."""

    data: bytes
    read_at_s: float


class Channel:
    __slots__ = (
        "_capacity_bytes",
        "_closed",
        "_getter",
        "_items",
        "_putters",
        "_queued_bytes",
        "on_space",
    )

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 1:
            raise ValueError(f"capacity_bytes must be >= 1, got {capacity_bytes}")
        self._capacity_bytes = capacity_bytes
        self._queued_bytes = 0
        self._items: collections.deque[Chunk] = collections.deque()
        self._closed = False
        self._getter: asyncio.Future[None] | None = None
        self._putters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.on_space: Callable[[], None] | None = None  # called when a chunk is taken out

    @property
    def full(self) -> bool:
        return self._queued_bytes >= self._capacity_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    async def get(self) -> Chunk | None:
        while not self._items:
            if self._closed:
                return None
            getter = asyncio.get_running_loop().create_future()
            self._getter = getter
            try:
                await getter
            finally:
                self._getter = None
        item = self._items.popleft()
        self._queued_bytes -= len(item.data)
        self._wake_putter()
        return item

    async def put(self, chunk: Chunk) -> None:
        while self.full and not self._closed:
            putter = asyncio.get_running_loop().create_future()
            self._putters.append(putter)
            try:
                await putter
            except BaseException:
                if putter in self._putters:
                    self._putters.remove(putter)
                elif not putter.cancelled():
                    self._wake_putter()  # pass the wake-up on; we are not using it
                raise
        self.put_force(chunk)

    def put_force(self, chunk: Chunk) -> None:
        self._items.append(chunk)
        self._queued_bytes += len(chunk.data)
        self._wake_getter()

    def close(self) -> None:
        """End of stream: after the queued chunks, `get()` returns None."""
        self._closed = True
        self._wake_getter()
        while self._putters:
            putter = self._putters.popleft()
            if not putter.done():
                putter.set_result(None)

    def take_all(self) -> list[Chunk]:
        """Remove and return every queued chunk (used while rewiring a chain)."""
        items = list(self._items)
        self._items.clear()
        self._queued_bytes = 0
        if self.on_space is not None:
            self.on_space()
        while self._putters:
            putter = self._putters.popleft()
            if not putter.done():
                putter.set_result(None)
        return items

    def _wake_getter(self) -> None:
        if self._getter is not None and not self._getter.done():
            self._getter.set_result(None)

    def _wake_putter(self) -> None:
        if self.on_space is not None:
            self.on_space()
        while self._putters:
            putter = self._putters.popleft()
            if not putter.done():
                putter.set_result(None)
                return
