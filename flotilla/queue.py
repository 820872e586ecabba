"""Queues: competing receivers with leases, `Queue` (sync; `flotilla.Client.queue(...)`) and
`AsyncQueue` (asyncio; `flotilla.aio.Client.queue(...)`), the same calls.

    with client.queue("workers", "jobs") as q:
        while True:
            ds = q.receive()                  # list[Delivery]
            for d in ds:
                handle(d.record)
            q.ack(ds)

The receivers of a queue group share every partition of the topic record by record: each
record is leased to one receiver at a time, until its deadline (`invisible_ms` after it was
handed out), and is then acked, released, rejected to the dead-letter topic, or — if the
deadline passes — handed out again after a backoff. Every lease, ack and dead letter is an
entry of the group coordinator's Raft log, so a failover keeps them.

Each call is a plan of `flotilla._queue_plans` (shared by both); these classes run its gRPC
calls and sleeps, and the member's heartbeat on a thread of its own (sync) or a task (asyncio),
so work that takes long between receives does not end the session. A queue is used from one
thread (or task) at a time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from flotilla._core import ClientCore, Rpc
from flotilla._queue import QueueState, check_delay_ms, check_invisible_ms, check_queue
from flotilla._queue_plans import Join, QueueCore, QueuePlan
from flotilla.types import Delivery

__all__ = ["AsyncQueue", "Queue"]

T = TypeVar("T")
HEARTBEAT_JOIN_S = 1.0  # how long close() waits for the heartbeat thread's call in flight
Deliveries = Delivery | Sequence[Delivery]


def _core(
    core: ClientCore, wake: Callable[[], None], group: str, topic: str, **options: Any
) -> QueueCore:
    settings = check_queue(group, topic, **options)
    return QueueCore(core, QueueState(settings, time.monotonic()), wake)


class Queue:
    """A receiver of queue group `group` on `topic` (`flotilla.Client.queue`; see the module
    text). It joins on its first `receive` (or `with`), then heartbeats from a thread of its
    own. `invisible_ms`: how long a received record stays this receiver's (its lease) unless
    settled or extended. `max_deliveries`: hand-outs after which a record goes to the
    dead-letter topic. `session_timeout_ms`: how long the receiver may go without an
    acknowledged heartbeat before its leases are released. `dead_letter_topic`: where dead
    letters go (None: "<topic>.<group>.dlq", created on first use). `ordering`: "none", or
    "key" (a record is not handed out while an earlier one with the same key is in flight).
    `backoff_ms` (redelivery delays after an expired lease; None: 1 s, 5 s, 30 s, 2 min) and
    `max_in_flight` (per partition; None: 2000) are the group's too: the last join's win."""

    def __init__(
        self,
        core: ClientCore,
        call: Callable[[Rpc], Any],
        group: str,
        topic: str,
        **options: Any,
    ) -> None:
        self._call = call
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._join_lock = threading.Lock()
        self._core = _core(core, self._wake.set, group, topic, **options)
        self._thread: threading.Thread | None = None
        self.group, self.topic = group, topic

    # -- the driver --------------------------------------------------------------------------------
    def _run(self, plan: QueuePlan[T]) -> T:
        outcome: Any = None
        try:
            step = next(plan)
            while True:
                if isinstance(step, Rpc):
                    outcome = self._call(step)
                elif isinstance(step, Join):
                    self._join()
                    outcome = None
                else:
                    time.sleep(step.seconds)
                    outcome = None
                step = plan.send(outcome)
        except StopIteration as done:
            return done.value

    def _join(self) -> None:
        with self._join_lock:
            if self._core.state.needs_join():
                self._run(self._core.heartbeat())
        self._started()

    def _started(self) -> None:
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(
                target=self._heartbeats, name=f"flotilla-queue-{self.group}", daemon=True
            )
            self._thread.start()

    def _heartbeats(self) -> None:
        while not self._stop.is_set():
            try:
                with self._join_lock:
                    wait_s = self._run(self._core.heartbeat())
            except Exception:  # the session is this thread: it never dies of one bad answer
                wait_s = 0.25
            self._wake.wait(wait_s)
            self._wake.clear()

    # -- the calls ---------------------------------------------------------------------------------
    def receive(
        self, max_records: int = 100, timeout_s: float = 1.0, ack: Deliveries | None = None
    ) -> list[Delivery]:
        """Up to `max_records` records leased to this receiver, waiting up to about
        `timeout_s` for some ([] when none came), in (partition, offset) order. Each is this
        receiver's until its `deadline_ms`: settle it before then. `ack`: deliveries to ack
        first, in the same call (one round trip and one coordinator write for both, as
        `ack(...)` then `receive(...)`); LeaseLost, leasing nothing, names those whose lease
        was lost (the others were acked)."""
        self._core.check_receive(max_records, timeout_s)
        return self._run(self._core.receive(max_records, timeout_s, ack))

    def ack(self, deliveries: Deliveries) -> None:
        """Done with them: they are never handed out again. LeaseLost names those whose lease
        expired or moved (the others were acked)."""
        self._run(self._core.settle(deliveries, "ack"))

    def release(self, deliveries: Deliveries, delay_ms: int = 0) -> None:
        """Gives them back: handed out again (to any receiver) after `delay_ms`; their delivery
        count is not raised by this. LeaseLost as `ack`."""
        self._run(self._core.settle(deliveries, "release", delay_ms=check_delay_ms(delay_ms)))

    def reject(self, deliveries: Deliveries) -> None:
        """Sends them to the dead-letter topic (reason "rejected"), once. LeaseLost as `ack`."""
        self._run(self._core.settle(deliveries, "reject"))

    def extend(self, deliveries: Deliveries, invisible_ms: int) -> list[Delivery]:
        """Keeps them `invisible_ms` longer from now: returns them with their new deadlines
        (the deliveries given stay valid to settle). LeaseLost as `ack`."""
        return self._run(
            self._core.settle(deliveries, "extend", invisible_ms=check_invisible_ms(invisible_ms))
        )

    def close(self) -> None:
        """Releases every lease it holds (handed out again at once) and leaves the group.
        Idempotent."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(HEARTBEAT_JOIN_S)
        with self._join_lock:
            self._run(self._core.close())

    def __enter__(self) -> Queue:
        """`with client.queue(...) as q:` joins now and closes on the way out."""
        self._join()
        return self

    def __exit__(self, *exc: object) -> None:
        """Closes the queue (release what it holds, leave)."""
        self.close()


class AsyncQueue:
    """The asyncio twin of `Queue` (`flotilla.aio.Client.queue`): the same arguments and calls,
    as coroutines; the heartbeat is a task on the event loop."""

    def __init__(
        self,
        core: ClientCore,
        call: Callable[[Rpc], Awaitable[Any]],
        group: str,
        topic: str,
        **options: Any,
    ) -> None:
        self._call = call
        self._wake: asyncio.Event | None = None
        self._join_lock: asyncio.Lock | None = None
        self._core = _core(core, self._set_wake, group, topic, **options)
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.group, self.topic = group, topic

    def _set_wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _lock(self) -> asyncio.Lock:
        if self._join_lock is None:  # made on the loop that uses it
            self._join_lock = asyncio.Lock()
            self._wake = asyncio.Event()
        return self._join_lock

    # -- the driver --------------------------------------------------------------------------------
    async def _run(self, plan: QueuePlan[T]) -> T:
        outcome: Any = None
        try:
            step = next(plan)
            while True:
                if isinstance(step, Rpc):
                    outcome = await self._call(step)
                elif isinstance(step, Join):
                    await self._join()
                    outcome = None
                else:
                    await asyncio.sleep(step.seconds)
                    outcome = None
                step = plan.send(outcome)
        except StopIteration as done:
            return done.value

    async def _join(self) -> None:
        async with self._lock():
            if self._core.state.needs_join():
                await self._run(self._core.heartbeat())
        if self._task is None and not self._stopped:
            self._task = asyncio.get_running_loop().create_task(self._heartbeats())

    async def _heartbeats(self) -> None:
        lock = self._lock()
        assert self._wake is not None
        while not self._stopped:
            try:
                async with lock:
                    wait_s = await self._run(self._core.heartbeat())
            except Exception:  # the session is this task: it never dies of one bad answer
                wait_s = 0.25
            try:
                await asyncio.wait_for(self._wake.wait(), wait_s)
            except TimeoutError:
                pass
            self._wake.clear()

    # -- the calls ---------------------------------------------------------------------------------
    async def receive(
        self, max_records: int = 100, timeout_s: float = 1.0, ack: Deliveries | None = None
    ) -> list[Delivery]:
        """Records leased to this receiver (`ack`: acked first, in the same call), as
        `Queue.receive`."""
        self._core.check_receive(max_records, timeout_s)
        return await self._run(self._core.receive(max_records, timeout_s, ack))

    async def ack(self, deliveries: Deliveries) -> None:
        """Done with them, as `Queue.ack`."""
        await self._run(self._core.settle(deliveries, "ack"))

    async def release(self, deliveries: Deliveries, delay_ms: int = 0) -> None:
        """Gives them back after `delay_ms`, as `Queue.release`."""
        await self._run(self._core.settle(deliveries, "release", delay_ms=check_delay_ms(delay_ms)))

    async def reject(self, deliveries: Deliveries) -> None:
        """To the dead-letter topic, as `Queue.reject`."""
        await self._run(self._core.settle(deliveries, "reject"))

    async def extend(self, deliveries: Deliveries, invisible_ms: int) -> list[Delivery]:
        """Keeps them longer, as `Queue.extend`."""
        return await self._run(
            self._core.settle(deliveries, "extend", invisible_ms=check_invisible_ms(invisible_ms))
        )

    async def close(self) -> None:
        """Releases what it holds and leaves the group, as `Queue.close`. Idempotent."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        async with self._lock():
            await self._run(self._core.close())

    async def __aenter__(self) -> AsyncQueue:
        """`async with client.queue(...) as q:` joins now, closes on the way out."""
        await self._join()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Closes the queue (release what it holds, leave)."""
        await self.close()
