"""The consumer-group calls of both clients (`flotilla.Client` and `flotilla.aio.Client` take
them from these two classes): `consumer(...)`, `queue(...)`, `list_groups`, `describe_group`,
`reset_group_offsets`, `delete_group`. Each is a plan of `flotilla._group_plans`, run by the
client's own driver (`_run`)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from flotilla._checks import check_group
from flotilla._consumer import PartitionsCallback
from flotilla._core import ClientCore, Plan, Rpc
from flotilla._group_plans import GroupCalls
from flotilla.consumer import AsyncConsumer, Consumer
from flotilla.errors import GroupNotFound
from flotilla.queue import AsyncQueue, Queue
from flotilla.types import GroupInfo, TopicPartition

__all__ = ["AsyncGroupAdmin", "GroupAdmin"]

T = TypeVar("T")


class GroupAdmin:
    """The sync client's group calls (a base of `flotilla.Client`)."""

    _core: ClientCore

    def _run(self, plan: Plan[T]) -> T:  # the client's driver
        raise NotImplementedError

    def _call(self, rpc: Rpc) -> Any:  # the client's driver
        raise NotImplementedError

    def consumer(
        self,
        group: str,
        topics: str | Sequence[str],
        start: str = "earliest",
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 10_000,
        instance_id: str | None = None,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> Consumer:
        """A member of consumer group `group` reading `topics` (see `flotilla.consumer.Consumer`
        for each setting); it joins on its first poll or `with`. InvalidArgument names a bad
        argument, before anything is sent."""
        return Consumer(
            self._core,
            self._call,
            group,
            topics,
            start=start,
            auto_commit=auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            session_timeout_ms=session_timeout_ms,
            instance_id=instance_id,
            on_assign=on_assign,
            on_revoke=on_revoke,
        )

    def queue(
        self,
        group: str,
        topic: str,
        invisible_ms: int = 30_000,
        max_deliveries: int = 5,
        session_timeout_ms: int = 10_000,
        dead_letter_topic: str | None = None,
        ordering: str = "none",
        *,
        backoff_ms: Sequence[int] | None = None,
        max_in_flight: int | None = None,
    ) -> Queue:
        """A receiver of queue group `group` on `topic`: its members share the topic's records
        one by one, each leased to one receiver until acked, released, rejected or its deadline
        (see `flotilla.queue.Queue` for each setting). It joins on its first receive or `with`.
        InvalidArgument names a bad argument, before anything is sent."""
        return Queue(
            self._core,
            self._call,
            group,
            topic,
            invisible_ms=invisible_ms,
            max_deliveries=max_deliveries,
            session_timeout_ms=session_timeout_ms,
            dead_letter_topic=dead_letter_topic,
            ordering=ordering,
            backoff_ms=backoff_ms,
            max_in_flight=max_in_flight,
        )

    def list_groups(self) -> list[str]:
        """The names of every consumer group (with members or committed offsets), sorted."""
        return self._run(GroupCalls(self._core).list_groups())

    def describe_group(self, name: str) -> GroupInfo:
        """The group's members, their assignments, and per partition the committed offset,
        high watermark, lag and owner, from its coordinator; a queue group's also its options
        (`.queue`) and per partition its acked floor, next offset, records in flight, waiting,
        acked and dead-lettered (`.partitions[i].queue`). GroupNotFound if it has no members
        and no committed offsets."""
        return self._run(GroupCalls(self._core).describe_group(name))

    def reset_group_offsets(
        self, group: str, topic: str, to: str | int | dict[int, int]
    ) -> dict[int, int]:
        """Sets the group's committed offsets of `topic`: "earliest" (each partition's log
        start), "latest" (its high watermark), an offset (every partition), or {partition:
        offset}; the offsets set, per partition. Refused while the group has members
        (GroupNotEmpty); an offset outside a partition's log is InvalidArgument."""
        return self._run(GroupCalls(self._core).reset_group_offsets(group, topic, to))

    def delete_group(self, group: str) -> None:
        """Forgets the group and its committed offsets. Refused while it has members
        (GroupNotEmpty); GroupNotFound if there is no such group."""
        self._run(GroupCalls(self._core).delete_group(group))

    def _group_offsets(self, group: str, topic: str) -> dict[TopicPartition, int]:
        """The group's committed offsets of `topic` ({} for a group that does not exist): the
        Spark source's startingOffsets "group:<name>"."""
        try:
            return self._run(GroupCalls(self._core).fetch_offsets(check_group(group), [topic]))
        except GroupNotFound:
            return {}


class AsyncGroupAdmin:
    """The asyncio client's group calls (a base of `flotilla.aio.Client`), as `GroupAdmin`'s."""

    _core: ClientCore

    async def _run(self, plan: Plan[T]) -> T:  # the client's driver
        raise NotImplementedError

    def _call(self, rpc: Rpc) -> Awaitable[Any]:  # the client's driver
        raise NotImplementedError

    def consumer(
        self,
        group: str,
        topics: str | Sequence[str],
        start: str = "earliest",
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 10_000,
        instance_id: str | None = None,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> AsyncConsumer:
        """A member of consumer group `group` reading `topics`, as `flotilla.Client.consumer`:
        an `AsyncConsumer` (`async with`, `await consumer.poll()`)."""
        return AsyncConsumer(
            self._core,
            self._call,
            group,
            topics,
            start=start,
            auto_commit=auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            session_timeout_ms=session_timeout_ms,
            instance_id=instance_id,
            on_assign=on_assign,
            on_revoke=on_revoke,
        )

    def queue(
        self,
        group: str,
        topic: str,
        invisible_ms: int = 30_000,
        max_deliveries: int = 5,
        session_timeout_ms: int = 10_000,
        dead_letter_topic: str | None = None,
        ordering: str = "none",
        *,
        backoff_ms: Sequence[int] | None = None,
        max_in_flight: int | None = None,
    ) -> AsyncQueue:
        """A receiver of queue group `group` on `topic`, as `flotilla.Client.queue`: an
        `AsyncQueue` (`async with`, `await q.receive()`)."""
        return AsyncQueue(
            self._core,
            self._call,
            group,
            topic,
            invisible_ms=invisible_ms,
            max_deliveries=max_deliveries,
            session_timeout_ms=session_timeout_ms,
            dead_letter_topic=dead_letter_topic,
            ordering=ordering,
            backoff_ms=backoff_ms,
            max_in_flight=max_in_flight,
        )

    async def list_groups(self) -> list[str]:
        """The names of every consumer group, as `flotilla.Client.list_groups`."""
        return await self._run(GroupCalls(self._core).list_groups())

    async def describe_group(self, name: str) -> GroupInfo:
        """The group as its coordinator sees it, as `flotilla.Client.describe_group`."""
        return await self._run(GroupCalls(self._core).describe_group(name))

    async def reset_group_offsets(
        self, group: str, topic: str, to: str | int | dict[int, int]
    ) -> dict[int, int]:
        """Sets the group's offsets of `topic`, as `flotilla.Client.reset_group_offsets`."""
        return await self._run(GroupCalls(self._core).reset_group_offsets(group, topic, to))

    async def delete_group(self, group: str) -> None:
        """Forgets the group, as `flotilla.Client.delete_group`."""
        await self._run(GroupCalls(self._core).delete_group(group))
