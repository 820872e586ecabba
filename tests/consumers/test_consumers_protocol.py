"""The group protocol through the coordinator: join, assign, revoke, grant across 1..N members,
sessions, static members, failover.

The driver (`Kit`): members that behave like the SDK (they own exactly
what the last reply assigned), a log that keeps every entry returned, and a replay of that log
into a fresh coordinator (a failover)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

import pytest

from consumers import (
    CommitRequest,
    Coordinator,
    CoordinatorConfig,
    FencedMember,
    GroupNotFound,
    HeartbeatReply,
    HeartbeatRequest,
    Outcome,
    TopicMeta,
    TopicPartition,
)
from consumers.assignment import Subscriber, target_assignment
from consumers.types import JOIN, LEAVE, LEAVE_STATIC

R = TypeVar("R")
TOPICS = {"orders": TopicMeta("orders-uid-1", 12)}
CONFIG = CoordinatorConfig(tick_ms=100, heartbeat_interval_ms=500)


@dataclass
class Member:
    id: str
    epoch: int
    owned: set[TopicPartition] = field(default_factory=set)
    session_timeout_ms: int = 0


class Kit:
    def __init__(
        self,
        topics: Mapping[str, TopicMeta] | None = None,
        config: CoordinatorConfig = CONFIG,
        coordinator: Coordinator | None = None,
    ) -> None:
        self.topics = dict(TOPICS if topics is None else topics)
        self.config = config
        if coordinator is None:
            coordinator = Coordinator(config)
            coordinator.start()
        self.c = coordinator
        self.log: list[bytes] = []
        self.members: dict[str, Member] = {}

    def take(self, outcome: Outcome[R]) -> R:
        self.log.extend(outcome.entries)
        return outcome.reply

    def join(
        self,
        group: str = "g",
        topics: Iterable[str] = ("orders",),
        instance_id: str | None = None,
        session_timeout_ms: int = 0,
    ) -> Member:
        request = HeartbeatRequest(
            group, "", JOIN, session_timeout_ms, instance_id=instance_id, topics=tuple(topics)
        )
        reply = self.take(self.c.heartbeat(request, self.topics))
        member = Member(
            reply.member_id, reply.member_epoch, set(reply.assignment), session_timeout_ms
        )
        self.members[member.id] = member
        return member

    def beat(
        self,
        member: Member,
        group: str = "g",
        owned: Iterable[TopicPartition] | None = None,
        topics: Iterable[str] | None = None,
    ) -> tuple[HeartbeatReply, int]:
        """One heartbeat reporting `owned` (default: what it owns); the member then owns what
        the reply assigns. Returns the reply and how many entries it wrote."""
        request = HeartbeatRequest(
            group,
            member.id,
            member.epoch,
            member.session_timeout_ms,
            topics=None if topics is None else tuple(topics),
            owned=frozenset(member.owned if owned is None else owned),
        )
        outcome = self.c.heartbeat(request, self.topics)
        self.log.extend(outcome.entries)
        member.epoch = outcome.reply.member_epoch
        member.owned = set(outcome.reply.assignment)
        return outcome.reply, len(outcome.entries)

    def settle(self, group: str = "g", rounds: int = 20) -> None:
        """Heartbeats from every member until a round changes nothing (bounded)."""
        for _ in range(rounds):
            before = {m.id: set(m.owned) for m in self.members.values()}
            written = sum(self.beat(m, group)[1] for m in list(self.members.values()))
            if written == 0 and before == {m.id: m.owned for m in self.members.values()}:
                return
        raise AssertionError(f"no settled assignment after {rounds} rounds")

    def ticks(self, n: int) -> list[bytes]:
        entries = []
        for _ in range(n):
            entries.extend(self.c.tick())
        self.log.extend(entries)
        return entries

    def failover(self) -> Kit:
        """A fresh coordinator that loaded every entry written so far, started."""
        fresh = Coordinator(self.config)
        for entry in self.log:
            fresh.load(entry)
        fresh.start()
        kit = Kit(self.topics, self.config, fresh)
        kit.log = list(self.log)
        kit.members = {k: replace(m, owned=set(m.owned)) for k, m in self.members.items()}
        return kit


ALL = frozenset(("orders", p) for p in range(12))


def owners(kit: Kit, group: str = "g") -> dict[TopicPartition, str]:
    view = kit.c.describe(group, kit.topics)
    return {(p.topic, p.partition): p.owner for p in view.partitions if p.owner is not None}


def assert_disjoint_and_complete(kit: Kit, members: Iterable[Member]) -> None:
    seen: dict[TopicPartition, str] = {}
    for member in members:
        for tp in member.owned:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {member.id}"
            seen[tp] = member.id
    assert set(seen) == ALL
    assert owners(kit) == seen


# -- join, assign, revoke, grant -----------------------------------------------------------------


def test_a_lone_member_gets_every_partition_on_join() -> None:
    kit = Kit()
    member = kit.join()
    assert member.owned == ALL
    assert member.epoch == 2  # 1 on joining, + 1 for the grant
    assert len(kit.log) == 1  # one entry: the member with its assignment
    view = kit.c.describe("g", kit.topics)
    assert [m.id for m in view.members] == [member.id]
    assert member.id.startswith("g-")


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_n_members_share_the_partitions_without_overlap(n: int) -> None:
    kit = Kit()
    members = []
    for _ in range(n):
        members.append(kit.join())
        kit.settle()
        assert_disjoint_and_complete(kit, kit.members.values())
    # the settled assignment is the rendezvous target
    target = target_assignment([Subscriber(m.id, m.id, ("orders",)) for m in members], kit.topics)
    assert {m.id: m.owned for m in members} == target


def test_through_the_coordinator_a_join_or_leave_moves_only_about_one_nth() -> None:
    kit = Kit({"orders": TopicMeta("u", 400)})
    for _ in range(4):
        kit.join()
    kit.settle()
    before = owners(kit)
    newcomer = kit.join()
    kit.settle()
    after = owners(kit)
    moved = {tp for tp in before if before[tp] != after[tp]}
    print(f"join of a 5th member moved {len(moved)} of 400 partitions (ideal 80)")
    assert {after[tp] for tp in moved} == {newcomer.id}
    assert 0.6 * 80 <= len(moved) <= 1.4 * 80
    leaver = next(m for m in kit.members.values() if m.id != newcomer.id)
    kit.take(kit.c.heartbeat(HeartbeatRequest("g", leaver.id, LEAVE, 0), kit.topics))
    del kit.members[leaver.id]
    kit.settle()
    final = owners(kit)
    moved = {tp for tp in after if after[tp] != final.get(tp)}
    assert {after[tp] for tp in moved} == {leaver.id}  # only the leaver's partitions moved
    assert set(final) == set(after)


def test_a_grant_waits_until_the_old_owner_reports_the_partition_gone() -> None:
    kit = Kit()
    a = kit.join()
    b = kit.join()
    assert b.owned == set()  # everything B should get is still A's
    assert len(kit.log) == 2
    # A is told to drop B's share but keeps reporting it: nothing is freed, B gets nothing
    reply, written = kit.beat(a, owned=ALL)
    moving = ALL - reply.assignment
    assert moving and reply.assignment < ALL
    assert written == 0
    a.owned = set(ALL)  # a slow member: still processing the revoked partitions
    for _ in range(3):
        assert kit.beat(b)[0].assignment == frozenset()
        kit.beat(a, owned=ALL)
    assert owners(kit) == {tp: a.id for tp in ALL}
    # A drops them and says so: they leave its assignment (one entry)...
    reply, written = kit.beat(a, owned=ALL - moving)
    assert written == 1 and reply.assignment == ALL - moving
    # ... and B is granted them on its next heartbeat, with a new epoch
    epoch = b.epoch
    reply, written = kit.beat(b)
    assert written == 1 and reply.assignment == moving and reply.member_epoch == epoch + 1
    assert_disjoint_and_complete(kit, [a, b])


def test_a_grant_waits_until_the_old_owners_session_ends() -> None:
    kit = Kit()
    a = kit.join(session_timeout_ms=1_000)  # 10 ticks of 100 ms
    b = kit.join(session_timeout_ms=5_000)
    kit.beat(a, owned=ALL)  # A's last word: it owns everything, then it falls silent
    for _ in range(10):
        assert kit.ticks(1) == []
        kit.beat(b)
        assert b.owned == set()
    # the 11th tick: 10 whole intervals after the heartbeat, which came between two ticks
    expired = kit.ticks(1)
    assert len(expired) == 1
    assert [m.id for m in kit.c.describe("g", kit.topics).members] == [b.id]
    reply, _ = kit.beat(b)
    assert reply.assignment == ALL


def test_a_leave_frees_the_members_partitions_at_once() -> None:
    kit = Kit()
    a, b = kit.join(), kit.join()
    kit.settle()
    request = HeartbeatRequest("g", a.id, LEAVE, 0)
    outcome = kit.c.heartbeat(request, kit.topics)
    assert len(outcome.entries) == 1 and outcome.reply.assignment == frozenset()
    kit.log.extend(outcome.entries)
    del kit.members[a.id]
    assert kit.beat(b)[0].assignment == ALL
    # leaving again (a retry) changes nothing; the old id is fenced
    assert kit.c.heartbeat(request, kit.topics).entries == []
    with pytest.raises(FencedMember, match=a.id):
        kit.beat(a)


def test_a_heartbeat_that_changes_nothing_writes_nothing() -> None:
    kit = Kit()
    a, b = kit.join(), kit.join()
    kit.settle()
    written = len(kit.log)
    for _ in range(5):
        for member in (a, b):
            assert kit.beat(member, topics=("orders",))[1] == 0
        assert kit.ticks(3) == []
    assert len(kit.log) == written


def test_a_lost_reply_does_not_fence_the_member() -> None:
    """The reply granting partitions (epoch e+1) is lost; the member heartbeats again with
    epoch e, owning nothing new: it gets the same assignment, nothing is freed or rewritten."""
    kit = Kit()
    a = kit.join()
    b = kit.join()
    kit.beat(a)  # told to drop B's share
    kit.beat(a)  # dropped it
    epoch, owned = b.epoch, set(b.owned)
    reply, _ = kit.beat(b)  # the grant
    assert reply.member_epoch == epoch + 1
    b.epoch, b.owned = epoch, owned  # ... whose reply never arrived
    again, written = kit.beat(b)
    assert written == 0 and again == reply


def test_a_subscription_change_moves_the_members_target() -> None:
    kit = Kit({"orders": TopicMeta("u1", 12), "audit": TopicMeta("u2", 4)})
    a, b = kit.join(topics=("orders",)), kit.join(topics=("orders", "audit"))
    kit.settle()
    assert {t for t, _ in a.owned} == {"orders"}
    assert {("audit", p) for p in range(4)} <= b.owned
    kit.beat(a, topics=("orders", "audit"))
    kit.settle()
    assert {t for t, _ in a.owned} == {"orders", "audit"}
    assert len(a.owned | b.owned) == 16 and not a.owned & b.owned


def test_new_partitions_of_a_topic_are_assigned() -> None:
    kit = Kit()
    a, b = kit.join(), kit.join()
    kit.settle()
    kit.topics["orders"] = TopicMeta("orders-uid-1", 20)
    kit.settle()
    assert len(a.owned | b.owned) == 20 and not a.owned & b.owned


def test_member_ids_are_never_reused_even_after_the_group_is_deleted() -> None:
    kit = Kit()
    first = kit.join()
    kit.take(kit.c.heartbeat(HeartbeatRequest("g", first.id, LEAVE, 0), kit.topics))
    with pytest.raises(GroupNotFound):
        kit.c.describe("g", kit.topics)  # no members, no offsets: gone
    second = kit.join()
    assert second.id != first.id
    # and a failover does not rewind the counter
    third = kit.failover().join()
    assert third.id not in (first.id, second.id)


# -- sessions ------------------------------------------------------------------------------------


def test_sessions_end_after_their_timeout_in_ticks_and_heartbeats_extend_them() -> None:
    kit = Kit()
    a = kit.join(session_timeout_ms=1_050)  # 11 ticks of 100 ms (rounded up), + 1: see sessions
    for _ in range(3):
        assert kit.ticks(11) == []
        kit.beat(a)
    assert kit.ticks(11) == []
    assert len(kit.ticks(1)) == 1
    with pytest.raises(FencedMember):
        kit.beat(a)


def test_a_heartbeat_interval_is_at_most_a_third_of_the_session() -> None:
    kit = Kit()
    request = HeartbeatRequest("g", "", JOIN, 1_200, topics=("orders",))
    assert kit.c.heartbeat(request, kit.topics).reply.heartbeat_interval_ms == 400
    request = HeartbeatRequest("g", "", JOIN, 30_000, topics=("orders",))
    assert kit.c.heartbeat(request, kit.topics).reply.heartbeat_interval_ms == 500


# -- static members ------------------------------------------------------------------------------


def test_a_static_member_leaving_for_a_restart_keeps_its_partitions_for_its_session() -> None:
    kit = Kit()
    a = kit.join(instance_id="billing-1", session_timeout_ms=2_000)
    b = kit.join()
    kit.settle()
    mine = set(a.owned)
    outcome = kit.c.heartbeat(HeartbeatRequest("g", a.id, LEAVE_STATIC, 0), kit.topics)
    assert outcome.entries == []  # nothing moves
    kit.ticks(15)
    kit.beat(b)
    assert not b.owned & mine
    # the restarted instance takes the old one's assignment over at once, under a new id
    again = kit.join(instance_id="billing-1", session_timeout_ms=2_000)
    assert again.id != a.id and again.owned == mine and again.epoch > a.epoch
    with pytest.raises(FencedMember, match=a.id):
        kit.beat(a)
    with pytest.raises(FencedMember, match=a.id):
        kit.c.commit(CommitRequest("g", a.id, a.epoch, (("orders", min(mine)[1], 1),)), kit.topics)


def test_a_static_member_that_does_not_come_back_loses_its_partitions() -> None:
    kit = Kit()
    a = kit.join(instance_id="billing-1", session_timeout_ms=2_000)
    b = kit.join(session_timeout_ms=60_000)
    kit.settle()
    kit.take(kit.c.heartbeat(HeartbeatRequest("g", a.id, LEAVE_STATIC, 0), kit.topics))
    assert kit.ticks(20) == []
    assert len(kit.ticks(1)) == 1
    del kit.members[a.id]
    kit.settle()
    assert b.owned == ALL


# -- failover ------------------------------------------------------------------------------------


def test_a_failover_rebuilds_the_same_state_and_causes_no_rebalance() -> None:
    kit = Kit({"orders": TopicMeta("orders-uid-1", 12), "audit": TopicMeta("a-uid", 3)})
    members = [kit.join(), kit.join(instance_id="s-1"), kit.join(topics=("orders", "audit"))]
    kit.settle()
    gone = kit.join()
    kit.settle()
    kit.take(kit.c.heartbeat(HeartbeatRequest("g", gone.id, LEAVE, 0), kit.topics))
    del kit.members[gone.id]
    kit.settle()
    for member in members:
        tp = min(member.owned)
        kit.take(kit.c.commit(CommitRequest("g", member.id, member.epoch, ((*tp, 7),)), kit.topics))
    kit.join(group="other")
    before = kit.c.describe("g", kit.topics), kit.c.offsets("g", kit.topics), kit.c.groups()

    new = kit.failover()
    assert (new.c.describe("g", new.topics), new.c.offsets("g", new.topics), new.c.groups()) == (
        before
    )
    # every member's heartbeat gets the same assignment and epoch, and writes nothing
    for member in members:
        epoch, owned = member.epoch, set(member.owned)
        reply, written = new.beat(member)
        assert (written, reply.member_epoch, set(reply.assignment)) == (0, epoch, owned)
    assert new.log == kit.log  # no heartbeat wrote anything
    # sessions restarted at the failover: a member silent since before it keeps its session
    session_ticks = CONFIG.default_session_timeout_ms // CONFIG.tick_ms + 1
    assert new.ticks(session_ticks - 1) == []
    assert len(new.ticks(1)) == 4  # ... and then ends (the three above and the other group's)


def test_load_after_start_is_refused() -> None:
    c = Coordinator()
    c.start()
    with pytest.raises(RuntimeError, match="start"):
        c.load(b"")
    with pytest.raises(RuntimeError, match="start"):
        Coordinator().tick()
