"""Consumer groups' consumers: `Consumer` (sync; `flotilla.Client.consumer(...)`) and
`AsyncConsumer` (asyncio; `flotilla.aio.Client.consumer(...)`), the same calls.

    with client.consumer("billing", ["orders"]) as consumer:
        while True:
            for record in consumer.poll():
                handle(record)          # record.topic, record.partition, record.offset, ...

The members of a group share the partitions of the topics they subscribe to: each partition is
read by one member at a time, and a member that joins or leaves moves only about 1/N of them
(the others never pause). Committed offsets are replicated like records and never expire; after
any rebalance or crash, the records read twice are at most those after a partition's last
commit, and none is skipped (at-least-once).

Each call is a plan of `flotilla._consumer` (shared by both); these classes run its gRPC calls,
sleeps and callbacks, and the member's heartbeat on a thread of its own (sync) or a task (asyncio),
so processing that takes long between polls does not end the session. A consumer is used from
one thread (or task) at a time, as Kafka's.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from flotilla._checks import check_consumer, check_group, check_start, check_topics
from flotilla._consumer import Callback, ConsumerCore, ConsumerPlan, PartitionsCallback
from flotilla._core import ClientCore, Rpc
from flotilla._member import MemberState
from flotilla.types import Record, TopicPartition

__all__ = ["AsyncConsumer", "Consumer"]

T = TypeVar("T")
HEARTBEAT_JOIN_S = 1.0  # how long close() waits for the heartbeat thread's call in flight


def _core(
    core: ClientCore,
    group: str,
    topics: object,
    start: str,
    auto_commit: bool,
    auto_commit_interval_ms: int,
    session_timeout_ms: int,
    instance_id: str | None,
    on_assign: PartitionsCallback | None,
    on_revoke: PartitionsCallback | None,
    wake: Callable[[], None],
) -> ConsumerCore:
    """The consumer's plans over a fresh member state, every argument checked first."""
    check_group(group)
    names = check_topics(topics)
    check_start(start)
    check_consumer(
        auto_commit, auto_commit_interval_ms, session_timeout_ms, instance_id, on_assign, on_revoke
    )
    state = MemberState(
        group,
        names,
        session_timeout_ms=session_timeout_ms,
        instance_id=instance_id,
        auto_commit_interval_ms=auto_commit_interval_ms,
        now=time.monotonic(),
    )
    return ConsumerCore(
        core,
        state,
        start=start,
        auto_commit=auto_commit,
        on_assign=on_assign,
        on_revoke=on_revoke,
        wake=wake,
    )


class Consumer:
    """A member of consumer group `group` reading `topics` (`flotilla.Client.consumer`).

    It joins on its first `poll` (or `with`), then heartbeats from a thread of its own.
    `start`: where a partition with no committed offset begins ("earliest": the log start;
    "latest": records written from then on). `auto_commit`: commit the positions every
    `auto_commit_interval_ms` (at a poll, only those that changed), before a partition moves
    away, and at `close`. `session_timeout_ms`: how long the member may go without an
    acknowledged heartbeat before its partitions move (it stops reading them itself first).
    `instance_id`: a static member: one that comes back with the same id within its session
    timeout gets its partitions back without a rebalance (and its `close` keeps them for the
    session timeout, as Kafka's static members). `on_assign` / `on_revoke`: called inside
    `poll` with the set of (topic, partition) it starts or stops reading."""

    def __init__(
        self,
        core: ClientCore,
        call: Callable[[Rpc], Any],
        group: str,
        topics: str | Sequence[str],
        *,
        start: str = "earliest",
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 10_000,
        instance_id: str | None = None,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> None:
        self._call = call
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._core = _core(
            core, group, topics, start, auto_commit, auto_commit_interval_ms,
            session_timeout_ms, instance_id, on_assign, on_revoke, self._wake.set,
        )  # fmt: skip
        self._thread: threading.Thread | None = None
        self.group = group

    # -- the driver --------------------------------------------------------------------------------
    def _run(self, plan: ConsumerPlan[T]) -> T:
        """Runs a consumer plan: its calls, sleeps and callbacks on this thread; its value."""
        outcome: Any = None
        try:
            step = next(plan)
            while True:
                error: BaseException | None = None
                if isinstance(step, Rpc):
                    outcome = self._call(step)
                elif isinstance(step, Callback):
                    try:
                        outcome = step.function(step.partitions)
                    except BaseException as raised:  # the plan's cleanup runs, then it raises
                        error = raised
                else:
                    time.sleep(step.seconds)
                    outcome = None
                step = plan.throw(error) if error is not None else plan.send(outcome)
        except StopIteration as done:
            return done.value

    def _started(self) -> None:
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(
                target=self._heartbeats, name=f"flotilla-group-{self.group}", daemon=True
            )
            self._thread.start()
            self._wake.set()

    def _heartbeats(self) -> None:
        while not self._stop.is_set():
            try:
                wait_s = self._run(self._core.heartbeat())
            except Exception:  # the session is this thread: it never dies of one bad answer
                wait_s = 0.25
            self._wake.wait(wait_s)
            self._wake.clear()

    # -- the calls ---------------------------------------------------------------------------------
    def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        """Records of the partitions this member owns (at most `max_records`), waiting up to
        about `timeout_s` for some; [] when none came. Each has `.topic` and `.partition`. The
        position of each partition moves past what it returns. Partitions given or taken by
        a rebalance are started or stopped here (on_assign, on_revoke)."""
        self._core.check_poll(max_records, timeout_s)
        self._started()
        return self._run(self._core.poll(max_records, timeout_s))

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commits the position of every partition this member owns (None), or `offsets`
        ({(topic, partition): the next offset to read}); all or nothing, once a Raft majority
        holds it. FencedMember if the member's session ended or it does not own one of them:
        nothing is committed, and the consumer rejoins by itself on its next poll."""
        self._run(self._core.commit(offsets))

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of the partition (the next to read), from its
        coordinator; None if nothing is committed."""
        return self._run(self._core.committed(topic, partition))

    def assignment(self) -> set[TopicPartition]:
        """The (topic, partition)s this member owns now."""
        return set(self._core.state.owned())

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """The next poll reads the (owned) partition from `offset`."""
        self._core.seek(topic, partition, offset)

    def position(self, topic: str, partition: int) -> int:
        """The next offset the next poll reads of the (owned) partition."""
        return self._core.owned_position(topic, partition)

    def close(self) -> None:
        """Commits (with auto-commit), calls on_revoke, and leaves the group at once: its
        partitions move now, not after the session timeout (a static member's stay its own for
        the session timeout, to come back to)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(HEARTBEAT_JOIN_S)
        self._run(self._core.close())

    def __enter__(self) -> Consumer:
        """`with client.consumer(...) as consumer:` joins now and closes on the way out."""
        self._started()
        return self

    def __exit__(self, *exc: object) -> None:
        """Closes the consumer (commit, leave)."""
        self.close()


class AsyncConsumer:
    """The asyncio twin of `Consumer` (`flotilla.aio.Client.consumer`): the same arguments and
    calls, `poll`, `commit`, `committed` and `close` as coroutines; the heartbeat is a task on the
    event loop. `on_assign` / `on_revoke` may be plain functions or coroutine functions."""

    def __init__(
        self,
        core: ClientCore,
        call: Callable[[Rpc], Awaitable[Any]],
        group: str,
        topics: str | Sequence[str],
        *,
        start: str = "earliest",
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 10_000,
        instance_id: str | None = None,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> None:
        self._call = call
        self._wake = asyncio.Event()
        self._core = _core(
            core, group, topics, start, auto_commit, auto_commit_interval_ms,
            session_timeout_ms, instance_id, on_assign, on_revoke, self._wake.set,
        )  # fmt: skip
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.group = group

    # -- the driver --------------------------------------------------------------------------------
    async def _run(self, plan: ConsumerPlan[T]) -> T:
        """Runs a consumer plan on the event loop: calls, sleeps and callbacks awaited."""
        outcome: Any = None
        try:
            step = next(plan)
            while True:
                error: BaseException | None = None
                if isinstance(step, Rpc):
                    outcome = await self._call(step)
                elif isinstance(step, Callback):
                    try:
                        outcome = step.function(step.partitions)
                        if inspect.isawaitable(outcome):
                            outcome = await outcome
                    except BaseException as raised:  # the plan's cleanup runs, then it raises
                        error = raised
                else:
                    await asyncio.sleep(step.seconds)
                    outcome = None
                step = plan.throw(error) if error is not None else plan.send(outcome)
        except StopIteration as done:
            return done.value

    def _started(self) -> None:
        if self._task is None and not self._stopped:
            self._task = asyncio.get_running_loop().create_task(self._heartbeats())

    async def _heartbeats(self) -> None:
        while not self._stopped:
            try:
                wait_s = await self._run(self._core.heartbeat())
            except Exception:  # the session is this task: it never dies of one bad answer
                wait_s = 0.25
            try:
                await asyncio.wait_for(self._wake.wait(), wait_s)
            except TimeoutError:
                pass
            self._wake.clear()

    # -- the calls ---------------------------------------------------------------------------------
    async def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        """Records of the partitions this member owns, as `Consumer.poll`."""
        self._core.check_poll(max_records, timeout_s)
        self._started()
        return await self._run(self._core.poll(max_records, timeout_s))

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commits the positions (or `offsets`), all or nothing, as `Consumer.commit`."""
        await self._run(self._core.commit(offsets))

    async def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of the partition, as `Consumer.committed`."""
        return await self._run(self._core.committed(topic, partition))

    def assignment(self) -> set[TopicPartition]:
        """The (topic, partition)s this member owns now."""
        return set(self._core.state.owned())

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """The next poll reads the (owned) partition from `offset`."""
        self._core.seek(topic, partition, offset)

    def position(self, topic: str, partition: int) -> int:
        """The next offset the next poll reads of the (owned) partition."""
        return self._core.owned_position(topic, partition)

    async def close(self) -> None:
        """Commits (with auto-commit), calls on_revoke and leaves the group, as
        `Consumer.close`."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self._run(self._core.close())

    async def __aenter__(self) -> AsyncConsumer:
        """`async with client.consumer(...) as consumer:` joins now, closes on the way out."""
        self._started()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Closes the consumer (commit, leave)."""
        await self.close()
