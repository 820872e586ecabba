"""The coordinator's queue calls (groups of kind "queue"), mixed into `consumers.Coordinator`.

Every decision is an entry (`consumers.entries`, at most one per call and partition) applied to
the table before it is returned, like the group calls; the rules of the state are in
`consumers.queues`. A lease is valid iff the record is leased to this member with this delivery
count and `now_ms < deadline_ms`; anything else is `lost` and changes nothing.

Time: `now_ms` (epoch ms) comes from the node; every time written to an entry is absolute, so a
replacement coordinator honours its predecessor's deadlines and waiting times.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from consumers import queue_validate, validate
from consumers.config import CoordinatorConfig
from consumers.entries import (
    Entry,
    MemberRecord,
    QueueDeadLettered,
    QueueLeased,
)
from consumers.faults import CoordinatorFaults
from consumers.queue_plans import ReceivePlan, SettleBuilder
from consumers.queue_types import (
    ACK,
    EXTEND,
    KEY,
    QUEUE,
    REASON_REJECTED,
    RELEASE,
    DeadLetterJob,
    Extent,
    Lease,
    QueuePartitionView,
    ReceiveRequest,
    SettleReply,
    SettleRequest,
)
from consumers.queues import PartitionQueue, Pending, QueueGroup
from consumers.table import GroupState, GroupTable
from consumers.types import (
    FencedMember,
    GroupNotFound,
    GroupView,
    InvalidGroupRequest,
    MemberView,
    PartitionView,
    TopicMeta,
    TopicPartition,
)

__all__ = ["QueueCoordinator"]


class QueueCoordinator:
    # provided by `consumers.Coordinator`
    config: CoordinatorConfig
    _table: GroupTable
    _faults: CoordinatorFaults
    _queue_cursors: dict[tuple[str, str], int]
    _redecided: set[tuple[str, str, int, int]]

    def _require_started(self) -> None:
        raise NotImplementedError

    def _touch(self, group: str, member: MemberRecord) -> None:
        raise NotImplementedError

    def _apply(self, entry: Entry) -> bytes:
        raise NotImplementedError

    # -- receive ---------------------------------------------------------------------------------
    def _queue_receive(
        self,
        request: ReceiveRequest,
        topics: Mapping[str, TopicMeta],
        extents: Mapping[TopicPartition, Extent],
        now_ms: int,
        keys: Mapping[TopicPartition, Mapping[int, bytes | None]] | None,
    ) -> tuple[list[Lease], list[bytes]]:
        self._require_started()
        group, member, queue = self._queue_member(
            request.group, request.member_id, request.member_epoch
        )
        queue_validate.max_records(request.max_records)
        invisible_ms = queue_validate.invisible_ms(request.invisible_ms)
        meta = self._queue_topic(member, request.topic, topics)
        self._touch(group.name, member)
        topic, by_key = request.topic, queue.options.ordering == KEY
        cursor_key = (group.name, topic)
        start = self._queue_cursors.get(cursor_key, 0) % meta.partitions
        self._queue_cursors[cursor_key] = start + 1
        plans: list[ReceivePlan] = []
        for i in range(meta.partitions):
            partition = (start + i) % meta.partitions
            state = queue.partition(topic, meta.uid, partition)
            extent = extents.get((topic, partition))
            log_start = state.trimmed_to
            trimmed = extent is not None and extent.log_start > state.trimmed_to
            if extent is not None and trimmed:
                log_start = extent.log_start
                state.trim(log_start)  # also in the entry: a replay trims the same
            limit = state.next_offset
            if extent is not None:
                limit = max(
                    limit, min(extent.high_watermark, state.floor + queue.options.max_in_flight)
                )
            plan_keys = None
            if by_key:
                plan_keys = (keys or {}).get((topic, partition), {})
            plans.append(
                ReceivePlan(state, log_start, trimmed, state.next_offset, limit, plan_keys)
            )
        remaining = request.max_records
        # first what waits and is due, then fresh records: partitions round-robin, in shares
        for fresh in (False, True):
            active = list(plans)
            while remaining and active:
                share = max(1, remaining // len(active))
                still = []
                for plan in active:
                    want = min(share, remaining)
                    if want == 0:
                        break
                    if fresh:
                        got = plan.fresh(want)
                    else:
                        offsets = plan.state.take_ready(now_ms, want, plan.taken)
                        for offset in offsets:
                            waiting = plan.state.waiting[offset]
                            plan.leases.append(
                                (offset, waiting.delivery_count + 1, waiting.key_hash)
                            )
                        got = len(offsets)
                    remaining -= got
                    if got == want:
                        still.append(plan)
                active = still
        deadline_ms = now_ms + invisible_ms
        leases: list[Lease] = []
        entries: list[bytes] = []
        for plan in sorted(plans, key=lambda p: p.state.partition):
            if not (plan.leases or plan.skipped or plan.trimmed):
                continue
            state = plan.state
            plan.leases.sort()
            entry = QueueLeased(
                group.name,
                topic,
                meta.uid,
                state.partition,
                plan.log_start,
                member.id,
                deadline_ms,
                max(plan.cursor, state.next_offset),
                tuple(plan.leases),
                tuple(plan.skipped),
            )
            entries.append(self._apply(entry))
            leases.extend(
                Lease(topic, state.partition, offset, count, deadline_ms)
                for offset, count, _ in plan.leases
            )
        return leases, entries

    def _queue_key_window(
        self, group: str, topic: str, partition: int, extent: Extent, limit: int
    ) -> range:
        validate.check_name("group", group)
        state = self._table.group(group)
        if state is None or state.queue is None or state.queue.options.ordering != KEY:
            return range(0)
        part = state.queue.find(topic, partition)
        if part is None:
            start, floor = extent.log_start, extent.log_start
        else:
            start = max(part.next_offset, extent.log_start)
            floor = start if part.floor == part.next_offset else part.floor
        end = min(extent.high_watermark, floor + state.queue.options.max_in_flight, start + limit)
        return range(start, max(start, end))

    # -- settle ----------------------------------------------------------------------------------
    def _queue_settle(
        self, request: SettleRequest, topics: Mapping[str, TopicMeta], now_ms: int
    ) -> tuple[SettleReply, list[bytes]]:
        self._require_started()
        group, member, queue = self._queue_member(
            request.group, request.member_id, request.member_epoch
        )
        queue_validate.settlement_count(len(request.settlements))
        uids: dict[str, str] = {}
        for s in request.settlements:
            meta = self._queue_topic(member, s.topic, topics)
            validate.check_partition(s.topic, s.partition, meta)
            queue_validate.settlement(s)
            uids[s.topic] = meta.uid
        self._touch(group.name, member)
        builders: dict[tuple[str, int], SettleBuilder] = {}
        applied: list[Lease] = []
        lost: list[Lease] = []
        seen: set[tuple[str, int, int]] = set()
        for s in request.settlements:
            state = queue.partitions.get((uids[s.topic], s.partition))
            lease = None if state is None else state.leased.get(s.offset)
            where = (s.topic, s.partition, s.offset)
            if (
                state is None
                or lease is None
                or lease.member_id != member.id
                or lease.delivery_count != s.delivery_count
                or now_ms >= lease.deadline_ms
                or where in seen
            ):
                deadline = 0 if lease is None else lease.deadline_ms
                lost.append(Lease(s.topic, s.partition, s.offset, s.delivery_count, deadline))
                continue
            seen.add(where)
            builder = builders.get((s.topic, s.partition))
            if builder is None:
                builder = builders[(s.topic, s.partition)] = SettleBuilder(
                    group.name, state, queue.options
                )
            deadline = lease.deadline_ms
            if s.action == ACK:
                builder.acked.append(s.offset)
            elif s.action == RELEASE:
                count = 0 if self._faults.reset_count_on_release else lease.delivery_count
                builder.back(s.offset, lease, now_ms + s.delay_ms, count)
            elif s.action == EXTEND:
                deadline = now_ms + s.invisible_ms
                builder.extended.append((s.offset, deadline))
            else:
                builder.dead_letter(s.offset, lease, REASON_REJECTED)
            applied.append(Lease(s.topic, s.partition, s.offset, s.delivery_count, deadline))
        entries = self._settle_entries(builders.values())
        return SettleReply(tuple(applied), tuple(lost)), entries

    # -- time and departures ---------------------------------------------------------------------
    def _queue_expire(self, now_ms: int) -> list[bytes]:
        """Leases past their deadline: waiting after the backoff of their count, or dead at
        max_deliveries."""
        every = self._faults.redeliver_before_deadline
        builders: list[SettleBuilder] = []
        for name, group in sorted(self._table.groups.items()):
            if group.queue is None:
                continue
            options = group.queue.options
            backoff = options.backoff_ms
            for _, state in sorted(group.queue.partitions.items()):
                due = state.due_leases(now_ms, every)
                if not due:
                    continue
                builder = SettleBuilder(name, state, options)
                for offset in due:
                    lease = state.leased[offset]
                    step = backoff[min(lease.delivery_count, len(backoff)) - 1] if backoff else 0
                    available_at = now_ms if every else lease.deadline_ms + step
                    builder.back(offset, lease, available_at, lease.delivery_count)
                builders.append(builder)
        return self._settle_entries(builders)

    def _queue_departed(self, group: GroupState | None, member_id: str) -> list[bytes]:
        """A member leaves or its session ends: its leases wait again at once (nothing timed
        out, so no backoff), or are dead-lettered at max_deliveries."""
        if group is None or group.queue is None:
            return []
        builders: list[SettleBuilder] = []
        for _, state in sorted(group.queue.partitions.items()):
            offsets = state.leases_of(member_id)
            if offsets:
                builder = SettleBuilder(group.name, state, group.queue.options)
                for offset in offsets:
                    lease = state.leased[offset]
                    builder.back(offset, lease, 0, lease.delivery_count)
                builders.append(builder)
        return self._settle_entries(builders)

    def _settle_entries(self, builders: Iterable[SettleBuilder]) -> list[bytes]:
        entries = []
        for builder in builders:
            entry = builder.entry()
            if entry is not None:
                entries.append(self._apply(entry))
        return entries

    # -- dead letters ----------------------------------------------------------------------------
    def _queue_dead_letter_jobs(self) -> list[DeadLetterJob]:
        jobs = []
        for name, group in sorted(self._table.groups.items()):
            if group.queue is not None:
                jobs.extend(group.queue.dead_letter_jobs(name))
        return jobs

    def _queue_dead_lettered(self, jobs: Sequence[DeadLetterJob]) -> list[bytes]:
        self._require_started()
        found: dict[tuple[str, str, int], list[int]] = {}
        for job in jobs:
            group = self._table.group(job.group)
            state = None
            if group is not None and group.queue is not None:
                state = group.queue.partitions.get((job.topic_uid, job.partition))
            pending = None if state is None else state.pending.get(job.offset)
            if pending is not None and pending.sequence == job.sequence:
                found.setdefault((job.group, job.topic_uid, job.partition), []).append(job.offset)
        entries = []
        for (name, uid, partition), offsets in sorted(found.items()):
            queue = self._table.groups[name].queue
            assert queue is not None
            state = queue.partitions[(uid, partition)]
            settled = sorted(set(offsets))
            entries.append(
                self._apply(QueueDeadLettered(name, state.topic, uid, partition, tuple(settled)))
            )
            if self._faults.dead_letter_twice:
                self._decide_again(name, state, settled)
        return entries

    def _decide_again(self, group: str, state: PartitionQueue, offsets: list[int]) -> None:
        """TEST-ONLY (`dead_letter_twice`): a confirmed dead letter is decided once more, under
        a new sequence (so its copy is not a duplicate). Once per record."""
        for offset in offsets:
            key = (group, state.topic_uid, state.partition, offset)
            if key in self._redecided:
                continue
            self._redecided.add(key)
            topic = f"{state.topic}.{group}.dlq"
            state.pending[offset] = Pending(state.next_sequence, 1, REASON_REJECTED, topic, None)
            state.next_sequence += 1

    # -- views -----------------------------------------------------------------------------------
    def _queue_view(self, group: str, topics: Mapping[str, TopicMeta]) -> GroupView:
        validate.check_name("group", group)
        state = self._table.group(group)
        if state is None:
            raise GroupNotFound(f"group {group!r} does not exist (no members, no queue state)")
        if state.queue is None:
            raise InvalidGroupRequest(f"group {group!r} is a {state.kind} group, not a queue")
        queue = state.queue
        members = tuple(
            MemberView(m.id, m.instance_id, m.epoch, frozenset())
            for m in sorted(state.members.values(), key=lambda m: m.id)
        )
        names = {t for m in state.members.values() for t in m.topics}
        names |= {s.topic for s in queue.partitions.values()}
        partitions: list[PartitionView] = []
        views: list[QueuePartitionView] = []
        for topic in sorted(names):
            meta = topics.get(topic)
            if meta is None:
                continue
            for partition in range(meta.partitions):
                partitions.append(PartitionView(topic, partition, None, None))
                views.append(queue.view(topic, meta.uid, partition))
        return GroupView(
            state.name, state.kind, members, tuple(partitions), queue.options, tuple(views)
        )

    # -- checks ----------------------------------------------------------------------------------
    def _queue_member(
        self, group_name: str, member_id: str, epoch: int
    ) -> tuple[GroupState, MemberRecord, QueueGroup]:
        validate.check_name("group", group_name)
        group = self._table.group(group_name)
        if group is not None and group.kind != QUEUE:
            raise InvalidGroupRequest(f"group {group_name!r} is a {group.kind} group, not a queue")
        if epoch < 1:
            raise InvalidGroupRequest(
                f"member_epoch {epoch}: a queue member receives and settles with its epoch (>= 1)"
            )
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            raise FencedMember(
                f"member {member_id!r} is not in queue group {group_name!r} (its session "
                "ended, it left or was replaced): rejoin"
            )
        if epoch > member.epoch:
            raise FencedMember(
                f"member_epoch {epoch} of member {member.id!r} is newer than its epoch "
                f"{member.epoch}: rejoin"
            )
        assert group.queue is not None  # a queue group's first entry sets its options
        return group, member, group.queue

    @staticmethod
    def _queue_topic(
        member: MemberRecord, topic: str, topics: Mapping[str, TopicMeta]
    ) -> TopicMeta:
        meta = validate.check_topic(topic, topics)
        if topic not in member.topics:
            raise InvalidGroupRequest(
                f"topic {topic!r} is not consumed by member {member.id!r}: it joined for "
                f"{', '.join(member.topics) or 'no topic'}"
            )
        return meta
