"""The coordinator of the groups one `__groups` partition holds.

Lifecycle, driven by the node when it leads the partition:
    c = Coordinator(config)
    for each committed entry of the partition, in log order:  c.load(entry_bytes)
    c.start()           # loading done; every member's session restarts now (failover: no rebalance)
    then, on the event loop, one call at a time:
        c.heartbeat(req, topics) / c.commit(req, topics) / c.reset_offsets(...) / c.delete_group(...)
            -> Outcome: `reply`, and `entries` (bytes) ALREADY applied to c's state, which the node
               appends to the partition (acks=all) and answers `reply` only once they commit
               (none: answer at once). A GroupError raised = refused, nothing changed.
        c.tick() -> list[bytes]     # every config.tick_ms: expired sessions -> entries to append
    If an append fails (leadership lost, timeout), the node drops `c` and, if still the leader,
    builds a new one from the log.
Entries are self-describing (a format version first); `load` raises `UnknownEntry` for one it
cannot read (a newer node wrote it) and the node stops serving that partition's groups rather than
guess.

"Answer at once" assumes the node answers in order: a reply with no entries of its own may still
rest on entries an earlier call returned (a grant, a commit); it must not reach the client before
those committed (holding the request lock until an outcome's entries commit does that). Reads
(`offsets`, `describe`) see the same applied state, so the same rule holds for them.

The protocol (DESIGN-24.md): a member's replicated *assignment* is what it may own. A heartbeat
first frees the partitions being revoked from it (in its assignment, not in its rendezvous target)
that it no longer reports owning, then grants it the partitions of its target that no other
member's assignment holds (epoch + 1, each partition remembering the epoch it was granted at). The
reply is the assignment minus what is being revoked. So a partition is in at most one member's
assignment, and reaches a new owner only after the old one reported it gone or its session ended.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace

from consumers import offsets as commits
from consumers import queue_validate, validate
from consumers.assignment import Subscriber, target_assignment
from consumers.config import DEFAULT_CONFIG, CoordinatorConfig
from consumers.entries import (
    Entry,
    GroupDeleted,
    MemberRecord,
    MemberRemoved,
    MemberSet,
    OffsetsCommitted,
    QueueLeased,
    QueueOptionsSet,
    UnknownEntry,
    decode,
    encode,
)
from consumers.faults import NO_FAULTS, CoordinatorFaults
from consumers.queue_coordinator import QueueCoordinator
from consumers.queue_types import (
    QUEUE,
    QueueOptions,
)
from consumers.sessions import Sessions, session_ticks
from consumers.table import GroupState, GroupTable
from consumers.types import (
    JOIN,
    LEAVE,
    LEAVE_STATIC,
    CommitRequest,
    FencedMember,
    GroupNotFound,
    GroupView,
    HeartbeatReply,
    HeartbeatRequest,
    InvalidGroupRequest,
    MemberView,
    Outcome,
    PartitionView,
    TopicMeta,
    TopicPartition,
)

__all__ = ["Coordinator", "CoordinatorConfig", "Outcome", "UnknownEntry"]


class Coordinator(QueueCoordinator):
    def __init__(
        self,
        config: CoordinatorConfig = DEFAULT_CONFIG,
        *,
        faults: CoordinatorFaults = NO_FAULTS,
    ) -> None:
        self.config = config
        self._faults = faults
        self._table = GroupTable()
        self._sessions = Sessions()
        self._started = False
        # group -> (what the target depends on, the target): recomputed when that changes
        self._targets: dict[str, tuple[object, dict[str, frozenset[TopicPartition]]]] = {}
        self._queue_cursors: dict[tuple[str, str], int] = {}  # (group, topic) -> next start
        self._redecided: set[tuple[str, str, int, int]] = set()  # TEST-ONLY: dead_letter_twice

    # -- loading -------------------------------------------------------------------------------
    def load(self, entry: bytes) -> None:
        """Folds one committed entry (a record value of the partition) into the state."""
        if self._started:
            raise RuntimeError("load() after start(): a started coordinator writes its own entries")
        decoded = decode(entry)
        if self._faults.load_keeps_first_offset and isinstance(decoded, OffsetsCommitted):
            decoded = self._first_offsets_only(decoded)
        if self._faults.forget_lease_on_load and isinstance(decoded, QueueLeased):
            return  # TEST-ONLY: the leases it granted are forgotten
        self._table.apply(decoded)

    def start(self) -> None:
        """Loading is done: sessions of every loaded member start now."""
        self._started = True
        for group in self._table.groups.values():
            for member in group.members.values():
                self._touch(group.name, member)

    # -- requests --------------------------------------------------------------------------------
    def heartbeat(
        self, request: HeartbeatRequest, topics: Mapping[str, TopicMeta]
    ) -> Outcome[HeartbeatReply]:
        self._require_started()
        validate.check_name("group", request.group)
        validate.check_kind(request.kind)
        instance_id = request.instance_id or None
        if instance_id is not None:
            validate.check_name("instance_id", instance_id)
        group = self._table.group(request.group)
        if group is not None and group.kind != request.kind:
            raise InvalidGroupRequest(
                f"kind {request.kind!r}: group {request.group!r} is a {group.kind} group"
            )
        if request.kind != QUEUE and request.queue is not None:
            raise InvalidGroupRequest(f"queue: options are for kind {QUEUE!r} groups only")
        epoch = request.member_epoch
        if epoch in (LEAVE, LEAVE_STATIC):
            return self._leave(group, request)
        if epoch < 0:
            raise InvalidGroupRequest(
                f"member_epoch {epoch} is not valid: use {JOIN} (join), {LEAVE} (leave), "
                f"{LEAVE_STATIC} (static leave) or the member's epoch"
            )
        session_ms = validate.session_timeout(
            request.session_timeout_ms,
            self.config.default_session_timeout_ms,
            self.config.min_session_timeout_ms,
            self.config.max_session_timeout_ms,
        )
        subscription = None if request.topics is None else validate.check_topics(request.topics)
        if epoch == JOIN:
            options = None
            if request.kind == QUEUE:
                options = queue_validate.options(request.queue, request.group)
                if request.queue is None and group is not None and group.queue is not None:
                    options = group.queue.options  # no options sent: the group's stay
                queue_validate.dead_letter_topics(options, request.group, subscription or ())
            return self._join(request, instance_id, session_ms, subscription, topics, options)
        member = None if group is None else group.members.get(request.member_id)
        if group is None or member is None:
            raise commits.fenced(request.group, request.member_id)
        if epoch > member.epoch:
            raise FencedMember(
                f"member_epoch {epoch} of member {member.id!r} is newer than its epoch "
                f"{member.epoch}: rejoin"
            )
        self._touch(group.name, member)
        return self._reconcile(group, member, member, subscription, session_ms, request, topics, [])

    def commit(self, request: CommitRequest, topics: Mapping[str, TopicMeta]) -> Outcome[None]:
        self._require_started()
        validate.check_name("group", request.group)
        checked = commits.checked(request.offsets, topics)
        group = self._table.group(request.group)
        _no_offsets(group, "commit offsets")
        if request.member_id == "":
            if request.member_epoch != LEAVE:
                raise InvalidGroupRequest(
                    f"member_epoch {request.member_epoch} with an empty member_id: an admin "
                    f"commit has member_epoch {LEAVE}"
                )
            commits.require_empty(group, "commit offsets as an admin")
            return self._write_offsets(request.group, group, checked)
        if request.member_epoch < 1:
            raise InvalidGroupRequest(
                f"member_epoch {request.member_epoch}: a member commits with its epoch (>= 1)"
            )
        member = None if group is None else group.members.get(request.member_id)
        if member is None:
            if not self._faults.accept_zombie_commit:
                raise commits.fenced(request.group, request.member_id)
        elif not self._faults.commit_ignores_assignment:
            commits.check_owned(member, request.member_epoch, checked)
        return self._write_offsets(request.group, group, checked)

    def offsets(
        self, group: str, topics: Mapping[str, TopicMeta], only: frozenset[str] = frozenset()
    ) -> dict[TopicPartition, int]:
        """Committed offsets of the topics' current incarnations (`only`: those topics)."""
        validate.check_name("group", group)
        return commits.committed(self._table.group(group), topics, only)

    def describe(self, group: str, topics: Mapping[str, TopicMeta]) -> GroupView:
        validate.check_name("group", group)
        state = self._table.group(group)
        if state is None:
            raise GroupNotFound(f"group {group!r} does not exist (no members, no offsets)")
        if state.queue is not None:
            return self.queue_view(group, topics)
        members = tuple(
            MemberView(m.id, m.instance_id, m.epoch, m.partitions)
            for m in sorted(state.members.values(), key=lambda m: m.id)
        )
        committed = self.offsets(group, topics)
        names = {t for m in state.members.values() for t in m.topics} | {t for t, _ in committed}
        partitions = tuple(
            PartitionView(t, p, committed.get((t, p)), state.owners.get((t, p)))
            for t in sorted(names)
            if t in topics
            for p in range(topics[t].partitions)
        )
        return GroupView(state.name, state.kind, members, partitions)

    def groups(self) -> list[str]:
        return sorted(self._table.groups)

    def reset_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], topics: Mapping[str, TopicMeta]
    ) -> Outcome[None]:
        self._require_started()
        validate.check_name("group", group)
        validate.check_topic(topic, topics)
        checked = commits.checked([(topic, p, o) for p, o in sorted(offsets.items())], topics)
        state = self._table.group(group)
        _no_offsets(state, "reset offsets")
        commits.require_empty(state, "reset its offsets")
        return self._write_offsets(group, state, checked)

    def delete_group(self, group: str) -> Outcome[None]:
        self._require_started()
        validate.check_name("group", group)
        state = self._table.group(group)
        if state is None:
            raise GroupNotFound(f"group {group!r} does not exist (no members, no offsets)")
        commits.require_empty(state, "delete it")
        return Outcome(None, [self._apply(GroupDeleted(group))])

    # -- time ------------------------------------------------------------------------------------
    def tick(self, now_ms: int = 0) -> list[bytes]:
        """One coordinator tick at `now_ms` (epoch ms): sessions that ended (their members'
        leases wait again at once), then leases past their deadline."""
        self._require_started()
        expired = self._sessions.advance()
        departed = []
        for name, member_id in expired:
            group = self._table.group(name)
            if group is None or member_id not in group.members:
                continue
            if self._faults.never_expire:
                self._touch(name, group.members[member_id])
                continue
            departed.append((group, member_id))
        # their leases and the expired ones (one entry per partition), then the members go
        entries = self._queue_tick(now_ms, departed)
        for group, member_id in departed:
            entries.append(self._apply(MemberRemoved(group.name, member_id)))
        return entries

    # -- the protocol ----------------------------------------------------------------------------
    def _join(
        self,
        request: HeartbeatRequest,
        instance_id: str | None,
        session_ms: int,
        subscription: tuple[str, ...] | None,
        topics: Mapping[str, TopicMeta],
        options: QueueOptions | None = None,
    ) -> Outcome[HeartbeatReply]:
        if subscription is None:
            raise InvalidGroupRequest("topics: a join names the topics it subscribes to")
        group = self._table.group(request.group)
        entries: list[bytes] = []
        if options is not None and (
            group is None or group.queue is None or group.queue.options != options
        ):
            entries.append(self._apply(QueueOptionsSet(request.group, options)))
            group = self._table.group(request.group)
        existing = None if group is None else group.members.get(request.member_id)
        if group is not None and existing is not None:
            # the member lost its state and rejoins under its id: it owns only what it reports
            self._touch(group.name, existing)
            return self._reconcile(
                group, existing, existing, subscription, session_ms, request, topics, entries
            )
        replaced = None if group is None or instance_id is None else group.by_instance(instance_id)
        serial = self._table.next_serial
        member_id = self._member_id(request.group, serial)
        if replaced is not None:
            # a static member's new incarnation takes over the old one's assignment at once;
            # the old id is fenced
            entries.extend(self._queue_departed(group, replaced.id))
            entries.append(self._apply(MemberRemoved(request.group, replaced.id)))
            self._sessions.end((request.group, replaced.id))
            epoch, assignment = replaced.epoch + 1, replaced.assignment
        else:
            epoch, assignment = 1, ()
        initial = MemberRecord(
            member_id, serial, instance_id, epoch, subscription, session_ms, assignment
        )
        # the member enters the table (so its target is computed with it); the entry written is
        # its state after the reconcile below, which subsumes this one
        self._table.apply(MemberSet(request.group, request.kind, initial))
        group = self._table.group(request.group)
        assert group is not None
        self._touch(group.name, initial)
        return self._reconcile(group, None, initial, None, session_ms, request, topics, entries)

    def _leave(
        self, group: GroupState | None, request: HeartbeatRequest
    ) -> Outcome[HeartbeatReply]:
        member = None if group is None else group.members.get(request.member_id)
        reply = HeartbeatReply(request.member_id, request.member_epoch, frozenset(), 0)
        if group is None or member is None:
            return Outcome(reply)  # already gone: leaving twice is fine
        if request.member_epoch == LEAVE_STATIC and member.instance_id is not None:
            # a static member leaving for a restart keeps its assignment for its session
            self._touch(group.name, member)
            return Outcome(reply)
        self._sessions.end((group.name, member.id))
        entries = self._queue_departed(group, member.id)
        entries.append(self._apply(MemberRemoved(group.name, member.id)))
        return Outcome(reply, entries)

    def _reconcile(
        self,
        group: GroupState,
        before: MemberRecord | None,
        member: MemberRecord,
        subscription: tuple[str, ...] | None,
        session_ms: int,
        request: HeartbeatRequest,
        topics: Mapping[str, TopicMeta],
        entries: list[bytes],
    ) -> Outcome[HeartbeatReply]:
        """Frees what the member was revoked and no longer owns, grants it what is free of its
        target; writes the member if anything changed since `before` (None: it is new)."""
        if subscription is not None and subscription != member.topics:
            member = replace(member, topics=subscription)
            self._table.apply(MemberSet(group.name, group.kind, member))  # its target moves
        target = self._target(group, topics).get(member.id, frozenset())
        interval_ms = min(self.config.heartbeat_interval_ms, max(1, session_ms // 3))
        if before is member and session_ms == member.session_timeout_ms:
            current = {(t, p) for t, p, _ in member.assignment}
            if current == target:  # the common case, an idle member: nothing to do
                return Outcome(HeartbeatReply(member.id, member.epoch, target, interval_ms))
        assigned = {(t, p): e for t, p, e in member.assignment}
        for tp in set(assigned) - target - request.owned:
            del assigned[tp]  # revoked, and the member reports it gone: free now
        grants = [
            tp
            for tp in sorted(target)
            if tp not in assigned
            and (group.owners.get(tp) is None or self._faults.grant_before_revoke)
        ]
        epoch = member.epoch + 1 if grants else member.epoch
        assigned.update((tp, epoch) for tp in grants)
        member = replace(
            member,
            epoch=epoch,
            session_timeout_ms=session_ms,
            assignment=tuple(sorted((t, p, e) for (t, p), e in assigned.items())),
        )
        if member != before:
            entries.append(self._apply(MemberSet(group.name, group.kind, member)))
            self._touch(group.name, member)
        assignment = frozenset(tp for tp in assigned if tp in target)
        return Outcome(HeartbeatReply(member.id, member.epoch, assignment, interval_ms), entries)

    def _target(
        self, group: GroupState, topics: Mapping[str, TopicMeta]
    ) -> dict[str, frozenset[TopicPartition]]:
        if group.kind == QUEUE:
            return {}  # a queue member owns no partition: it leases records
        names = sorted({t for m in group.members.values() for t in m.topics if t in topics})
        key = (group.version, tuple((t, topics[t].partitions) for t in names))
        cached = self._targets.get(group.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        subscribers = [
            Subscriber(m.id, m.instance_id or m.id, m.topics) for m in group.members.values()
        ]
        target = target_assignment(subscribers, topics)
        self._targets[group.name] = (key, target)
        return target

    # -- helpers ---------------------------------------------------------------------------------
    def _write_offsets(
        self, group: str, state: GroupState | None, checked: list[commits.Offset]
    ) -> Outcome[None]:
        changed = commits.changed(state, checked)
        if not changed:
            return Outcome(None)  # nothing to replicate: an idle auto-commit costs no Raft write
        return Outcome(None, [self._apply(OffsetsCommitted(group, tuple(changed)))])

    def _apply(self, entry: Entry) -> bytes:
        self._table.apply(entry)
        return encode(entry)

    def _touch(self, group: str, member: MemberRecord) -> None:
        ticks = session_ticks(member.session_timeout_ms, self.config.tick_ms)
        self._sessions.touch((group, member.id), ticks)

    def _member_id(self, group: str, serial: int) -> str:
        if self._faults.unseeded_member_ids:
            return f"{group}-{random.getrandbits(32)}"  # TEST-ONLY: breaks determinism
        return f"{group}-{serial}"

    def _first_offsets_only(self, entry: OffsetsCommitted) -> OffsetsCommitted:
        """TEST-ONLY (`load_keeps_first_offset`): drops offsets already loaded."""
        state = self._table.group(entry.group)
        known = state.offsets if state is not None else {}
        kept = tuple(o for o in entry.offsets if o[2] not in known.get(o[1], ("", {}))[1])
        return replace(entry, offsets=kept)

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("the coordinator is loading: call start() after the last load()")


def _no_offsets(group: GroupState | None, doing: str) -> None:
    if group is not None and group.kind == QUEUE:
        raise InvalidGroupRequest(
            f"group {group.name!r} is a queue group: it has no offsets to {doing.split(maxsplit=1)[0]} "
            "(its records are acked one by one)"
        )
