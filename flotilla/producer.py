"""The batching producer: `send` returns at once with a Future; records are grouped per
partition into batches of up to `batch_bytes`, sent when full or `linger_ms` after the first
record arrived, with up to `max_in_flight` batches in flight across partitions and one per
partition (so records of one partition are written in the order they were sent).

    p = client.producer(linger_ms=5, batch_bytes=1 << 20)
    futures = [p.send("orders", value, key=key) for value in values]
    p.flush()                # every future is settled
    p.close()
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flotilla._routing import Headers, RecordMetadata, check_value, now_ms
from flotilla.errors import FlotillaError, InvalidArgument

if TYPE_CHECKING:
    from flotilla.client import Client

__all__ = ["Producer"]

_RECORD_OVERHEAD = 16


@dataclass(slots=True)
class _Pending:
    key: bytes | None
    value: bytes
    headers: Headers | None
    timestamp_ms: int
    future: concurrent.futures.Future[RecordMetadata]


@dataclass(slots=True)
class _Partition:
    records: deque[_Pending] = field(default_factory=deque)
    bytes: int = 0
    first_at: float = 0.0
    in_flight: bool = False


class Producer:
    def __init__(
        self, client: Client, *, linger_ms: float, batch_bytes: int, max_in_flight: int
    ) -> None:
        if linger_ms < 0 or batch_bytes < 1024 or max_in_flight < 1:
            raise InvalidArgument(
                f"linger_ms={linger_ms}, batch_bytes={batch_bytes}, max_in_flight={max_in_flight}: "
                "need linger_ms >= 0, batch_bytes >= 1024, max_in_flight >= 1"
            )
        self.client = client
        self.linger_s = linger_ms / 1000
        self.batch_bytes = batch_bytes
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._condition = threading.Condition()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_in_flight, "flotilla-producer")
        self._in_flight = 0
        self._max_in_flight = max_in_flight
        self._flushing = 0
        self._closed = False
        self._sender = threading.Thread(
            target=self._run, name="flotilla-producer-sender", daemon=True
        )
        self._sender.start()

    def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        if self._closed:
            raise InvalidArgument("the producer is closed")
        value = check_value(value)
        self.client._topic(topic)
        chosen = self.client.router.partition_for(topic, key, partition)
        future: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
        size = len(value) + (len(key) if key else 0) + _RECORD_OVERHEAD
        with self._condition:
            state = self._partitions.setdefault((topic, chosen), _Partition())
            if not state.records:
                state.first_at = time.monotonic()
            state.records.append(_Pending(key, value, headers, now_ms(), future))
            state.bytes += size
            if state.bytes >= self.batch_bytes:
                self._condition.notify()
        return future

    def flush(self, timeout_s: float | None = None) -> None:
        """Sends everything pending now and waits until every future is settled."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._condition:
            self._flushing += 1
            self._condition.notify_all()
            try:
                while any(p.records or p.in_flight for p in self._partitions.values()):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"flush did not finish within {timeout_s} s")
                    self._condition.wait(remaining if remaining is not None else 0.5)
            finally:
                self._flushing -= 1

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        self._sender.join()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the sender thread ------------------------------------------------------------------------
    def _run(self) -> None:
        with self._condition:
            while not self._closed:
                wait_s = self._dispatch_ready()
                self._condition.wait(wait_s)

    def _dispatch_ready(self) -> float:
        """Starts every batch that is due; returns how long to sleep until the next one is."""
        now = time.monotonic()
        next_due = 0.5
        for (topic, partition), state in self._partitions.items():
            if not state.records or state.in_flight:
                continue
            due_at = state.first_at + self.linger_s
            if state.bytes < self.batch_bytes and now < due_at and not self._flushing:
                next_due = min(next_due, due_at - now)
                continue
            if self._in_flight >= self._max_in_flight:
                return next_due
            batch = self._take(state)
            state.in_flight = True
            self._in_flight += 1
            self._pool.submit(self._send, topic, partition, state, batch)
        return next_due

    def _take(self, state: _Partition) -> list[_Pending]:
        batch: list[_Pending] = []
        size = 0
        while state.records and (not batch or size < self.batch_bytes):
            record = state.records.popleft()
            record_size = (
                len(record.value) + (len(record.key) if record.key else 0) + _RECORD_OVERHEAD
            )
            size += record_size
            state.bytes -= record_size
            batch.append(record)
        if state.records:
            state.first_at = time.monotonic()
        return batch

    def _send(self, topic: str, partition: int, state: _Partition, batch: list[_Pending]) -> None:
        try:
            encoded = self.client.router.encode(
                topic, partition, [(r.key, r.value, r.headers, r.timestamp_ms) for r in batch]
            )
            base = self.client.send_batch(topic, partition, encoded)
            for position, record in enumerate(batch):
                record.future.set_result(RecordMetadata(topic, partition, base + position))
        except FlotillaError as error:
            for record in batch:
                record.future.set_exception(error)
        except Exception as error:  # never leave a future unsettled
            for record in batch:
                record.future.set_exception(FlotillaError(f"send failed: {error!r}"))
        finally:
            with self._condition:
                state.in_flight = False
                self._in_flight -= 1
                self._condition.notify_all()
