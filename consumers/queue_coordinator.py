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

from consumers import queue_receive, queue_validate, validate
from consumers.config import CoordinatorConfig
from consumers.entries import (
    Entry,
    MemberRecord,
    QueueDeadLettered,
)
from consumers.faults import CoordinatorFaults
from consumers.queue_plans import SettleBuilder
from consumers.queue_types import (
    ACK,
    EXTEND,
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
    Outcome,
    PartitionView,
    TopicMeta,
    TopicPartition,
)

__all__ = ["QueueCoordinator"]

_Key = tuple[str, str, int]  # (group, topic uid, partition)


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

    # -- the calls ------------------------------------------------------------------------------
    def queue_receive(
        self,
        request: ReceiveRequest,
        topics: Mapping[str, TopicMeta],
        extents: Mapping[TopicPartition, Extent],
        now_ms: int,
        keys: Mapping[TopicPartition, Mapping[int, bytes | None]] | None = None,
    ) -> Outcome[list[Lease]]:
        """Leases up to `request.max_records` records of `request.topic` to the member: first
        records waiting for redelivery whose time came (lowest offset first), then fresh ones
        from each partition's `next_offset` below its extent's high watermark, partitions taken
        round-robin from a rotating start so that none starves; each partition's window
        (next_offset - acked_floor) stays within max_in_flight. Offsets below an extent's log
        start were deleted by retention: the partition's floor moves past them. With ordering
        "key", a fresh record is handed out only if `keys` holds its key (the node reads
        `queue_key_window` first) and no earlier unsettled record has the same key. Raises
        FencedMember (not a member of this queue group), InvalidGroupRequest (a bad field, a
        stream group, a topic the member does not consume), UnknownTopic."""
        self._require_started()
        group, member, queue = self._queue_member(
            request.group, request.member_id, request.member_epoch
        )
        queue_validate.max_records(request.max_records)
        invisible_ms = queue_validate.invisible_ms(request.invisible_ms)
        meta = self._queue_topic(member, request.topic, topics)
        self._touch(group.name, member)
        cursor = (group.name, request.topic)
        start = self._queue_cursors.get(cursor, 0) % meta.partitions
        self._queue_cursors[cursor] = start + 1
        leases, decided = queue_receive.receive(
            queue,
            group.name,
            member.id,
            request.topic,
            meta,
            start,
            request.max_records,
            now_ms,
            now_ms + invisible_ms,
            extents,
            keys,
        )
        return Outcome(leases, [self._apply(entry) for entry in decided])

    def queue_key_window(
        self,
        group: str,
        topic: str,
        partition: int,
        extent: Extent,
        limit: int,
        topic_uid: str | None = None,
    ) -> range:
        """The offsets whose keys a key-ordered receive of this partition would look at next
        (at most `limit`, from next_offset): the node reads their keys before `queue_receive`.
        Empty for a group not ordered by key. `topic_uid` (additive): the topic's current
        incarnation; pass it, or after a topic is deleted and recreated the window is the old
        incarnation's until the new one's first receive."""
        validate.check_name("group", group)
        state = self._table.group(group)
        if state is None or state.queue is None:
            return range(0)
        return queue_receive.key_window(state.queue, topic, partition, extent, limit, topic_uid)

    def queue_settle(
        self, request: SettleRequest, topics: Mapping[str, TopicMeta], now_ms: int
    ) -> Outcome[SettleReply]:
        """Applies each settlement on its own (see `consumers.queue_types`): ack settles the
        record; release makes it waiting until now + delay_ms (at max_deliveries: dead-lettered
        instead); reject dead-letters it (reason "rejected"); extend moves its deadline to now +
        invisible_ms. A lease that is not the member's with that delivery count, or past its
        deadline, goes to `lost` unchanged. FencedMember if the member is not in the group."""
        return self._queue_settle(request, topics, now_ms)

    def queue_dead_letter_jobs(self) -> list[DeadLetterJob]:
        """Every dead letter decided and not yet confirmed, in (group, topic uid, partition,
        sequence) order. The node calls it only between rounds (every decision it returns has
        committed) and copies each partition's jobs in sequence order."""
        jobs = []
        for name, group in sorted(self._table.groups.items()):
            if group.queue is not None:
                jobs.extend(group.queue.dead_letter_jobs(name))
        return jobs

    def queue_dead_lettered(self, jobs: Sequence[DeadLetterJob]) -> Outcome[None]:
        """The copies of `jobs` are in their dead-letter partitions: settle the records (jobs
        no longer pending, e.g. confirmed twice, are ignored)."""
        return Outcome(None, self._queue_dead_lettered(jobs))

    def queue_dead_letter_gone(self, jobs: Sequence[DeadLetterJob]) -> Outcome[None]:
        """(Additive.) The source records of `jobs` cannot be read any more (retention deleted
        them, or their topic incarnation is gone: `job.topic_uid` is not the topic's uid), so
        their content cannot be copied: settle them as deleted (counted apart, like retention).
        Its sequence is then never sent: the dead-letter partition refuses the next job's
        sequence as out of order, and the node sends that copy under a producer of its own
        (`cluster.dead_letters.rebased_producer_id`), as when the partition forgot the producer."""
        return Outcome(None, self._queue_dead_lettered((), jobs))

    def queue_view(self, group: str, topics: Mapping[str, TopicMeta]) -> GroupView:
        """`describe` of a queue group: members, and per partition of its topics the queue
        state (`GroupView.queue`, `GroupView.queue_options`). GroupNotFound if unknown."""
        return self._queue_view(group, topics)

    # -- settle ----------------------------------------------------------------------------------
    def _queue_settle(
        self, request: SettleRequest, topics: Mapping[str, TopicMeta], now_ms: int
    ) -> Outcome[SettleReply]:
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
                done = Lease(s.topic, s.partition, s.offset, s.delivery_count, deadline)
                if (
                    state is not None
                    and where not in seen
                    and state.settled_again(member.id, s.offset, s.delivery_count, s.action)
                ):
                    seen.add(where)
                    applied.append(done)  # a retry of a call that was applied: unchanged
                else:
                    lost.append(done)
                continue
            seen.add(where)
            builder = builders.get((s.topic, s.partition))
            if builder is None:
                builder = builders[(s.topic, s.partition)] = SettleBuilder(
                    group.name, state, queue.options, settled_by=member.id
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
        return Outcome(SettleReply(tuple(applied), tuple(lost)), entries)

    # -- time and departures ---------------------------------------------------------------------
    def _queue_expire(self, now_ms: int, builders: dict[_Key, SettleBuilder]) -> None:
        """Leases past their deadline: waiting after the backoff of their count, or dead at
        max_deliveries."""
        every = self._faults.redeliver_before_deadline
        for name, group in sorted(self._table.groups.items()):
            if group.queue is None:
                continue
            options = group.queue.options
            backoff = options.backoff_ms
            for (uid, partition), state in sorted(group.queue.partitions.items()):
                due = state.due_leases(now_ms, every)
                if not due:
                    continue
                key = (name, uid, partition)
                builder = builders.get(key)
                if builder is None:
                    builder = builders[key] = SettleBuilder(name, state, options)
                for offset in due:
                    if offset in builder.ended:
                        continue  # its member departed in this tick: waiting already
                    lease = state.leased[offset]
                    step = backoff[min(lease.delivery_count, len(backoff)) - 1] if backoff else 0
                    available_at = now_ms if every else lease.deadline_ms + step
                    builder.back(offset, lease, available_at, lease.delivery_count)

    def _queue_departed(
        self,
        group: GroupState | None,
        member_id: str,
        builders: dict[_Key, SettleBuilder] | None = None,
    ) -> list[bytes]:
        """A member leaves or its session ends: its leases wait again at once (nothing timed
        out, so no backoff), or are dead-lettered at max_deliveries. With `builders` (a tick),
        only adds to them; else returns the entries."""
        if group is None or group.queue is None:
            return []
        found = {} if builders is None else builders
        for (uid, partition), state in sorted(group.queue.partitions.items()):
            offsets = state.leases_of(member_id)
            if not offsets:
                continue
            key = (group.name, uid, partition)
            builder = found.get(key)
            if builder is None:
                builder = found[key] = SettleBuilder(group.name, state, group.queue.options)
            for offset in offsets:
                lease = state.leased[offset]
                builder.back(offset, lease, 0, lease.delivery_count)
        return [] if builders is not None else self._settle_entries(found.values())

    def _queue_tick(self, now_ms: int, departed: list[tuple[GroupState, str]]) -> list[bytes]:
        """A tick's queue entries: the departed members' leases and the expired ones, one entry
        per partition."""
        builders: dict[_Key, SettleBuilder] = {}
        for group, member_id in departed:
            self._queue_departed(group, member_id, builders)
        self._queue_expire(now_ms, builders)
        return self._settle_entries(b for _, b in sorted(builders.items(), key=lambda i: i[0]))

    def _settle_entries(self, builders: Iterable[SettleBuilder]) -> list[bytes]:
        entries = []
        for builder in builders:
            entry = builder.entry()
            if entry is not None:
                entries.append(self._apply(entry))
        return entries

    # -- dead letters ----------------------------------------------------------------------------
    def _queue_dead_lettered(
        self, jobs: Sequence[DeadLetterJob], gone: Sequence[DeadLetterJob] = ()
    ) -> list[bytes]:
        self._require_started()
        found: dict[tuple[str, str, int], tuple[list[int], list[int]]] = {}
        for copied, batch in ((True, jobs), (False, gone)):
            for job in batch:
                group = self._table.group(job.group)
                state = None
                if group is not None and group.queue is not None:
                    state = group.queue.partitions.get((job.topic_uid, job.partition))
                pending = None if state is None else state.pending.get(job.offset)
                if pending is not None and pending.sequence == job.sequence:
                    key = (job.group, job.topic_uid, job.partition)
                    found.setdefault(key, ([], []))[0 if copied else 1].append(job.offset)
        entries = []
        for (name, uid, partition), (offsets, lost) in sorted(found.items()):
            queue = self._table.groups[name].queue
            assert queue is not None
            state = queue.partitions[(uid, partition)]
            settled = sorted(set(offsets))
            deleted = sorted(set(lost) - set(settled))
            entry = QueueDeadLettered(
                name, state.topic, uid, partition, tuple(settled), tuple(deleted)
            )
            entries.append(self._apply(entry))
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
            sequence = state.sequences.get(topic, 0)
            state.pending[offset] = Pending(sequence, 1, REASON_REJECTED, topic, None)
            state.sequences[topic] = sequence + 1

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
