"""The batching producer: `send` returns at once with a Future; records are grouped per
partition into batches of up to `batch_bytes`, sent when full or `linger_ms` after the batch was
opened, with up to `max_in_flight` batches in flight across partitions and one per partition (so
records of one partition are written in the order they were sent).

    p = client.producer(linger_ms=5, batch_bytes=1 << 20)
    futures = [p.send("orders", value, key=key) for value in values]
    p.flush()                # every future is settled
    p.close()

Partitioning: a keyed record goes to `xxh64(key) % partitions`; unkeyed records stick to one
partition until its batch closes, then move to the next (round-robin across batches), so they
form full batches instead of one small batch per partition.

Delayed records (`delay_ms` / `deliver_at_ms`) travel in a lane of their own per partition: their
batches hold one due time each (a record due at another time closes the open batch), carry the
`flotilla-deliver-at` header on every record and take sequences from the partition's delayed
space, so neither kind of batch waits for, or leaves a gap in, the other's.

Memory is bounded: records waiting to be sent take at most `buffer_bytes`; `send` blocks while
the buffer is full, and raises `Timeout` after the client's `timeout_s`.

Cost: `send` is the only per-record Python work on the caller's thread, and the futures of one
batch share one lock and one outcome (`BatchOutcome`), so a hundred thousand outstanding futures
cost little memory and little garbage-collector time, and settling a batch costs the same for one
record or a thousand. Encoding, the gRPC call and settling run on the producer's own threads.

Why one module of about 540 lines: `send`, the dispatcher thread and the sender threads share
one lock, one condition and the per-partition states (`_Partition`), and the rules between them
(a partition's batches go out in ticket order; a batch that fails with its outcome unknown
retires its producer id; one refused moves the batches behind it to a new id) are easiest to
check when they stand in one place.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import xxhash

from flotilla._checks import check_record
from flotilla._delays import deliver_at_header, due_ms
from flotilla._plans import Once, now_ms
from flotilla._router import DEFAULT_MAX_BATCH_BYTES, Router
from flotilla._sequences import written_nowhere
from flotilla.errors import FlotillaError, InvalidArgument, Timeout
from flotilla.types import Headers, RecordMetadata, TopicInfo
from proto.records import BATCH_HEADER_SIZE, encode_rows

__all__ = ["Producer", "RecordFuture", "Sender"]


class Sender(Protocol):
    """What the producer needs of a client (`flotilla.Client` is one): its router (metadata,
    partitioning, producer sequences), its `timeout_s`, a topic look-up and `send_batch`. Both
    are blocking: the producer calls them from its own threads."""

    router: Router
    timeout_s: float

    def _topic(self, name: str) -> TopicInfo:
        """The topic as the client knows it, asking the cluster only when it knows none."""
        ...

    def send_batch(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        on_issued: Callable[[], None] | None = None,
        abandoned: Callable[[], bool] | None = None,
        on_moved: Callable[[int, int], None] | None = None,
        deliver_at_ms: int = 0,
    ) -> int:
        """Sends an encoded batch until it commits; its base offset (`Client.send_batch`)."""
        ...


# A record's encoding beyond its key and value bytes, at most (msgpack: the record's array, the
# key's and value's lengths, its headers' array, the timestamp delta), and a header's beyond its
# name and value; a batch's beyond its records (its header, the records' array).
_RECORD_OVERHEAD = 24
_HEADER_OVERHEAD = 12
_BATCH_OVERHEAD = BATCH_HEADER_SIZE + 8
# A batch is one produce request; a node refuses one over its max_batch_bytes (4 MiB unless
# configured otherwise; a smaller one, reported in metadata, caps batches lower: see `send`),
# so a producer never aims higher (bigger batches gain nothing anyway).
MAX_BATCH_BYTES = DEFAULT_MAX_BATCH_BYTES - 64 * 1024
# A record's row is a tuple, and its headers a tuple of tuples (msgpack writes a tuple as it
# writes a list: the bytes are the same): a tuple of bytes, ints, None and the empty tuple holds
# nothing the garbage collector follows, so it stops tracking it at its first pass, and the rows
# of a hundred thousand buffered records do not lengthen every later collection.
_NO_HEADERS: tuple[tuple[str, bytes], ...] = ()
_PENDING, _FINISHED = "PENDING", "FINISHED"  # concurrent.futures' state names


class BatchOutcome:
    """What the futures of one batch share: one condition, and the batch's outcome, set once
    for all of them (`settle_batch`, `fail_batch`), so settling costs the same for one record or a
    thousand. A record's metadata is made when it is asked for, from the batch's base offset
    and the record's position in it."""

    __slots__ = ("base", "condition", "deliver_at_ms", "exception", "partition", "state",
                 "topic", "watched")  # fmt: skip

    def __init__(self, topic: str = "", partition: int = 0) -> None:
        self.condition = threading.Condition()
        self.topic = topic
        self.partition = partition
        self.deliver_at_ms = 0  # 0: ordinary; else every record's due time (offset None)
        self.state = _PENDING
        self.base = 0
        self.exception: BaseException | None = None
        self.watched: list[RecordFuture] = []  # futures with waiters or callbacks


class RecordFuture(concurrent.futures.Future[RecordMetadata[Any]]):
    """The Future of one sent record. It behaves as a `concurrent.futures.Future` (`result`,
    `exception`, `add_done_callback`, `concurrent.futures.wait`, `as_completed`), except that it
    cannot be cancelled: the record may already be on its way. All futures of one batch share
    one `BatchOutcome`: its condition, and its outcome, set once under it for the whole batch,
    so no waiter sees half a batch and settling does no work per record. (A future's own
    `set_result` / `set_exception` still work, for that future alone.)"""

    # what Future.__init__ sets: none per record but the shared outcome and the position, with
    # a shared condition instead of one Condition (and its lock and deque) per record. The
    # waiter and callback lists are made on first use, as most records never have either (and
    # such a future is noted in `BatchOutcome.watched`, the only ones settling visits).
    _own_state: str | None = None
    _own_result: RecordMetadata[Any] | None = None
    _own_exception: BaseException | None = None
    _watched = False
    _waiter_list: list[Any] | None = None
    _callback_list: (
        list[Callable[[concurrent.futures.Future[RecordMetadata[Any]]], object]] | None
    ) = None

    def __init__(self, outcome: BatchOutcome, position: int = 0) -> None:
        self._outcome = outcome
        self._position = position

    if TYPE_CHECKING:  # to the type checker, the attributes concurrent.futures declares
        _condition: threading.Condition
        _state: str
        _result: RecordMetadata[Any] | None
        _exception: BaseException | None
        _waiters: list[Any]
    else:

        @property
        def _condition(self) -> threading.Condition:
            return self._outcome.condition

        @property
        def _state(self) -> str:
            own = self._own_state
            return self._outcome.state if own is None else own

        @_state.setter
        def _state(self, value: str) -> None:
            self._own_state = value

        @property
        def _result(self) -> RecordMetadata[Any] | None:
            if self._own_state is not None:
                return self._own_result
            return self._metadata() if self._outcome.state == _FINISHED else None

        @_result.setter
        def _result(self, value: RecordMetadata[Any] | None) -> None:
            self._own_result = value

        @property
        def _exception(self) -> BaseException | None:
            if self._own_state is not None:
                return self._own_exception
            return self._outcome.exception

        @_exception.setter
        def _exception(self, value: BaseException | None) -> None:
            self._own_exception = value

        @property
        def _waiters(self) -> list[Any]:
            """concurrent.futures' waiters (`wait`, `as_completed`), under `_condition`."""
            if self._waiter_list is None:
                self._waiter_list = []
                self._watch()
            return self._waiter_list

    def _watch(self) -> None:
        if not self._watched:
            self._watched = True
            self._outcome.watched.append(self)

    @property
    def _done_callbacks(
        self,
    ) -> list[Callable[[concurrent.futures.Future[RecordMetadata[Any]]], object]]:
        if self._callback_list is None:
            self._watch()
            self._callback_list = []
        return self._callback_list

    def _metadata(self) -> RecordMetadata[Any]:
        outcome = self._outcome
        if outcome.deliver_at_ms:
            return RecordMetadata(outcome.topic, outcome.partition, None, outcome.deliver_at_ms)
        return RecordMetadata(outcome.topic, outcome.partition, outcome.base + self._position)

    def cancel(self) -> bool:
        """Always False: the record may already be on its way."""
        return False

    def result(self, timeout: float | None = None) -> RecordMetadata[Any]:
        """Where the record was written, once it is; raises what failed it, or TimeoutError
        (concurrent.futures') after `timeout` seconds."""
        # settled batches answer without taking the shared lock: `settle_batch` stores the base
        # before the state, so a FINISHED state always comes with its base
        outcome = self._outcome
        if self._own_state is None and outcome.state == _FINISHED and outcome.exception is None:
            return self._metadata()
        return super().result(timeout)


def settle_batch(outcome: BatchOutcome, base: int) -> None:
    """Settles every future of a batch at once, under their shared lock: the base offset and
    the state are set on the outcome, and only the futures something waits on are visited."""
    _finish(outcome, base, None)


def fail_batch(outcome: BatchOutcome, failure: BaseException) -> None:
    """Fails every future of a batch at once (as `settle_batch`)."""
    _finish(outcome, 0, failure)


def _finish(outcome: BatchOutcome, base: int, failure: BaseException | None) -> None:
    with outcome.condition:
        if outcome.state == _FINISHED:
            return
        outcome.base = base
        outcome.exception = failure
        outcome.state = _FINISHED
        watched = list(outcome.watched)
        for future in watched:
            if future._own_state is None and future._waiter_list:  # wait / as_completed
                for waiter in future._waiter_list:
                    if failure is None:
                        waiter.add_result(future)
                    else:
                        waiter.add_exception(future)
        outcome.condition.notify_all()
    for future in watched:
        if future._own_state is None and future._callback_list:
            future._invoke_callbacks()  # type: ignore[attr-defined]


class _Batch:
    __slots__ = (
        "bytes",
        "deliver_at_ms",
        "first_timestamp",
        "opened_at",
        "outcome",
        "partition",
        "producer_id",
        "records",
        "sequence",
        "ticket",
        "topic",
    )

    def __init__(self, topic: str, partition: int, deliver_at_ms: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.deliver_at_ms = deliver_at_ms  # 0: ordinary; else every record's due time
        # (key, value, ((name, data), ...), timestamp_ms - first_timestamp): the stored shape
        self.records: list[tuple[Any, ...]] = []
        self.first_timestamp = 0
        self.bytes = 0
        self.opened_at = time.monotonic()
        self.outcome = BatchOutcome(topic, partition)  # its futures'
        self.producer_id = self.sequence = self.ticket = 0  # set when dispatched


class _Partition:
    __slots__ = (
        "closed",
        "failed_producers",
        "in_flight",
        "issued",
        "open",
        "proven",
        "tickets",
        "turn",
    )

    def __init__(self) -> None:
        self.open: _Batch | None = None
        self.closed: deque[_Batch] = deque()  # full or lingered, waiting for their turn
        self.in_flight = 0
        self.tickets = 0  # batches dispatched so far: each one's place in the sending order
        self.issued = 0  # of those, how many have gone out (the next may go now); under `turn`
        # the partition's own lock for the sending order: its batches wait for their turn on it,
        # not on the producer's condition (whose every notify would wake every sending thread)
        self.turn = threading.Condition(threading.Lock())
        self.proven = False  # a batch under the current producer id has been acknowledged
        self.failed_producers: set[int] = set()  # ids a batch of which failed, outcome unknown


class Producer:
    """The batching producer a `Client.producer(...)` call returns (see the module's text):
    `send` queues a record and returns a Future, `flush` waits for every one, `close` flushes
    and stops its threads. Thread-safe."""

    def __init__(
        self,
        client: Sender,
        *,
        linger_ms: float,
        batch_bytes: int,
        max_in_flight: int,
        buffer_bytes: int = 64 * 1024 * 1024,
        max_in_flight_per_partition: int = 4,
    ) -> None:
        if (
            linger_ms < 0
            or not 1024 <= batch_bytes <= MAX_BATCH_BYTES
            or max_in_flight < 1
            or buffer_bytes < batch_bytes
            or max_in_flight_per_partition < 1
        ):
            raise InvalidArgument(
                f"linger_ms={linger_ms}, batch_bytes={batch_bytes}, max_in_flight={max_in_flight}, "
                f"buffer_bytes={buffer_bytes}, max_in_flight_per_partition="
                f"{max_in_flight_per_partition}: need linger_ms >= 0, 1024 <= batch_bytes <= "
                f"{MAX_BATCH_BYTES} (within a node's default max_batch_bytes, 4 MiB), "
                "max_in_flight >= 1, buffer_bytes >= batch_bytes, max_in_flight_per_partition >= 1"
            )
        self.max_in_flight_per_partition = max_in_flight_per_partition
        self.client = client
        self.linger_s = linger_ms / 1000
        self.batch_bytes = batch_bytes
        self.buffer_bytes = buffer_bytes
        self._partitions: dict[tuple[str, int, bool], _Partition] = {}  # by (t, p, delayed)
        self._sticky: dict[str, int] = {}  # topic -> partition of its unkeyed records
        self._lock = threading.RLock()  # `send` takes it itself: Condition.__enter__ is Python
        self._condition = threading.Condition(self._lock)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_in_flight, "flotilla-producer")
        self._buffered = 0  # bytes of records sent to the producer and not yet settled
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
        delay_ms: int | None = None,
        deliver_at_ms: int | None = None,
    ) -> concurrent.futures.Future[RecordMetadata[Any]]:
        """Queues one record; the Future resolves to its `RecordMetadata` once committed. A
        delayed record (`delay_ms` or `deliver_at_ms`, as `Client.produce`) resolves once
        durably accepted, with `offset` None and its `deliver_at_ms`; delayed records go in
        batches of their own, one due time and partition each, in a sequence space of their
        own (records of one partition due at one time keep their order)."""
        if self._closed:
            raise InvalidArgument("the producer is closed")
        if type(value) is not bytes or (key is not None and type(key) is not bytes) or headers:
            value, key, headers = check_record(value, key, headers)
        timestamp = now_ms()
        due = 0
        if delay_ms is not None or deliver_at_ms is not None:
            due = due_ms(delay_ms, deliver_at_ms, timestamp) or 0
            headers = deliver_at_header(due, headers)
        info = self.client.router.topic(topic) or self.client._topic(topic)
        count = len(info.partitions)
        if partition is not None:
            if not 0 <= partition < count:
                self.client.router.partition_for(topic, None, partition)  # raises, with the range
        elif key is not None:
            partition = xxhash.xxh64_intdigest(key) % count
        size = len(value) + (len(key) if key else 0) + _RECORD_OVERHEAD
        if headers:
            size += sum(len(n.encode()) + len(v) + _HEADER_OVERHEAD for n, v in headers)
        # batches stay within what every node accepts (it may be configured below the default)
        limit = self.client.router.max_batch_bytes
        if size + _BATCH_OVERHEAD > limit:  # not even alone in a batch: refused before queueing
            raise InvalidArgument(
                f"a record of {size} bytes (encoded, at most; {_BATCH_OVERHEAD} more as a batch) "
                f"cannot fit max_batch_bytes={limit}, the largest batch the nodes accept; "
                "nothing was sent: make it smaller"
            )
        cap = min(self.batch_bytes, limit - _BATCH_OVERHEAD)
        with self._lock:
            if self._buffered + size > self.buffer_bytes:
                self._wait_for_room(size)
            while True:
                if partition is not None:
                    chosen = partition
                else:  # unkeyed: the topic's sticky partition
                    sticky = self._sticky.get(topic)
                    if sticky is None or sticky >= count:
                        sticky = self._sticky[topic] = self.client.router.partition_for(
                            topic, None, None
                        )
                    chosen = sticky
                lane = (topic, chosen, due != 0)  # delayed batches are a lane of their own
                state = self._partitions.get(lane)
                if state is None:
                    state = self._partitions[lane] = _Partition()
                batch = state.open
                if batch is None or not batch.records:
                    break
                if batch.bytes + size <= cap and batch.deliver_at_ms == due:
                    break
                # the record would overfill the open batch, or is due at another time: close
                # it, so that a batch stays within batch_bytes unless one record is bigger,
                # and holds one due time (closing moves the sticky partition on, and an
                # unkeyed record with it)
                self._close_batch(state, batch, count)
                self._condition.notify_all()
                if partition is not None:
                    batch = None
                    break
            if batch is None:
                batch = state.open = _Batch(topic, chosen)
                self._condition.notify_all()  # the sender times this batch's linger from now
            future = RecordFuture(batch.outcome, len(batch.records))
            if not batch.records:
                batch.first_timestamp = timestamp
                batch.deliver_at_ms = batch.outcome.deliver_at_ms = due
            rows = tuple(map(tuple, headers)) if headers else _NO_HEADERS
            batch.records.append((key, value, rows, timestamp - batch.first_timestamp))
            batch.bytes += size
            self._buffered += size
            if batch.bytes >= cap:
                self._close_batch(state, batch, count)
                self._condition.notify_all()
        return future

    def _wait_for_room(self, size: int) -> None:
        """Blocks (holding nothing but the condition) until the buffer has room for `size`."""
        deadline = time.monotonic() + self.client.timeout_s
        self._flushing += 1  # send what is buffered now instead of lingering
        self._condition.notify_all()
        try:
            while self._buffered and self._buffered + size > self.buffer_bytes:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Timeout(
                        f"the producer's buffer ({self.buffer_bytes} bytes) stayed full for "
                        f"{self.client.timeout_s} s: the cluster is not keeping up"
                    )
                self._condition.wait(remaining)
        finally:
            self._flushing -= 1

    def flush(self, timeout_s: float | None = None) -> None:
        """Sends everything pending now and waits until every future is settled."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._condition:
            self._flushing += 1
            self._condition.notify_all()
            try:
                while self._buffered:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"flush did not finish within {timeout_s} s")
                    self._condition.wait(remaining if remaining is not None else 0.5)
            finally:
                self._flushing -= 1

    def close(self) -> None:
        """Flushes, then stops the producer's threads; `send` raises afterwards."""
        if self._closed:
            return
        self.flush()
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        self._sender.join()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> Producer:
        """`with client.producer() as producer:` closes (and so flushes) it on the way out."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Closes the producer (every record sent is settled first)."""
        self.close()

    # -- batches (under self._condition) ------------------------------------------------------
    def _close_batch(self, state: _Partition, batch: _Batch, count: int) -> None:
        state.open = None
        state.closed.append(batch)
        if self._sticky.get(batch.topic) == batch.partition:
            self._sticky[batch.topic] = (batch.partition + 1) % count

    # -- the sender thread ------------------------------------------------------------------------
    def _run(self) -> None:
        with self._condition:
            while not self._closed:
                wait_s = self._dispatch_ready()
                self._condition.wait(wait_s)

    def _dispatch_ready(self) -> float:
        """Closes lingered batches and starts every batch whose partition is free; returns how
        long to sleep until the next batch is due."""
        now = time.monotonic()
        next_due = 0.5
        for state in self._partitions.values():
            batch = state.open
            if batch is not None:
                due_at = batch.opened_at + self.linger_s
                if now >= due_at or self._flushing:
                    info = self.client.router.topic(batch.topic)
                    self._close_batch(state, batch, len(info.partitions) if info else 1)
                else:
                    next_due = min(next_due, due_at - now)
            # several batches of a partition may be in flight once one under the current
            # producer id was acknowledged (the leader then holds them to sequence order)
            limit = self.max_in_flight_per_partition if state.proven else 1
            while (
                state.closed and state.in_flight < limit and self._in_flight < self._max_in_flight
            ):
                batch = state.closed.popleft()
                batch.producer_id, batch.sequence = self.client.router.sequences.take(
                    batch.topic,
                    batch.partition,
                    len(batch.records),
                    delayed=batch.deliver_at_ms != 0,
                )
                batch.ticket = state.tickets
                state.tickets += 1
                state.in_flight += 1
                self._in_flight += 1
                self._pool.submit(self._send, state, batch)
        return next_due

    def _send(self, state: _Partition, batch: _Batch) -> None:
        topic, partition = batch.topic, batch.partition
        acknowledged = False
        issued = Once(partial(self._issued, state))  # this batch has gone out (or never will)
        try:
            encoded = encode_rows(
                batch.records,
                batch.first_timestamp,
                producer_id=batch.producer_id,
                base_sequence=batch.sequence,
            )
            with state.turn:  # go out in dispatch order: the leader wants them in sequence
                while state.issued != batch.ticket:
                    state.turn.wait()
            base = self.client.send_batch(
                topic,
                partition,
                encoded,
                on_issued=issued,
                abandoned=partial(self._abandoned, state, batch),
                on_moved=partial(self._moved, batch),
                deliver_at_ms=batch.deliver_at_ms,
            )
            acknowledged = True
            # every future of the batch settles before a waiter wakes
            settle_batch(batch.outcome, base)
        except Exception as error:  # never leave a future unsettled
            failure = (
                error
                if isinstance(error, FlotillaError)
                else FlotillaError(f"send failed: {error!r}")
            )
            fail_batch(batch.outcome, failure)
            if not written_nowhere(failure):  # refused: the batches behind it go on
                with self._condition:
                    if len(state.failed_producers) >= 64:
                        state.failed_producers.clear()  # bounded: old ids have nothing in flight
                    state.failed_producers.add(batch.producer_id)
        finally:
            # settled whatever happened (`send_batch` does it too, unless it never ran)
            self.client.router.sequences.settled(
                topic,
                partition,
                batch.producer_id,
                batch.sequence,
                delayed=batch.deliver_at_ms != 0,
            )
            if not issued.done:  # failed before its turn came: wait for it, then pass it on
                with state.turn:
                    while state.issued != batch.ticket:
                        state.turn.wait()
                issued()
            with self._condition:
                state.in_flight -= 1
                state.proven = acknowledged and batch.producer_id == self._current_producer(
                    topic, partition, batch.deliver_at_ms != 0
                )
                self._in_flight -= 1
                self._buffered -= batch.bytes
                self._condition.notify_all()

    def _abandoned(self, state: _Partition, batch: _Batch) -> bool:
        with self._condition:
            return batch.producer_id in state.failed_producers

    @staticmethod
    def _moved(batch: _Batch, producer_id: int, sequence: int) -> None:
        """The leader will never write the batch under its producer id: it goes under another
        (`flotilla._sequences.Sequences.move`, which keeps the partition's batches in order)."""
        batch.producer_id, batch.sequence = producer_id, sequence

    def _issued(self, state: _Partition) -> None:
        with state.turn:
            state.issued += 1
            state.turn.notify_all()

    def _current_producer(self, topic: str, partition: int, delayed: bool) -> int | None:
        current = self.client.router.sequences.next.get((topic, partition, delayed))
        return current[0] if current is not None else None
