"""The queue core (DESIGN-25.md): receive, settle, lease expiry with backoff, departures, dead
letters, key ordering, retention, and replay — a coordinator rebuilt from the committed entries
holds the same leases, waiting times, counts and pending dead letters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TypeVar

import pytest

from consumers import (
    CommitRequest,
    Coordinator,
    CoordinatorConfig,
    FencedMember,
    Outcome,
    TopicMeta,
)
from consumers.entries import QueueSettled, decode
from consumers.queue_types import (
    ACK,
    EXTEND,
    QUEUE,
    REASON_MAX_DELIVERIES,
    REASON_REJECTED,
    REJECT,
    RELEASE,
    Extent,
    Lease,
    QueueOptions,
    ReceiveRequest,
    Settlement,
    SettleReply,
    SettleRequest,
)
from consumers.queues import producer_id
from consumers.types import JOIN, LEAVE, HeartbeatRequest, InvalidGroupRequest

R = TypeVar("R")
T0 = 1_700_000_000_000  # epoch ms
TOPICS = {"jobs": TopicMeta("jobs-uid", 3)}
CONFIG = CoordinatorConfig(tick_ms=100)


class Kit:
    """A coordinator, the log of every entry it returned, and members that receive and settle."""

    def __init__(
        self, options: QueueOptions | None = None, hw: int = 100, partitions: int = 3
    ) -> None:
        self.c = Coordinator(CONFIG)
        self.c.start()
        self.log: list[bytes] = []
        self.now = T0
        self.options = options or QueueOptions()
        # the partitions with records (the others have no extent: nothing fresh from them)
        self.extents = {("jobs", p): Extent(0, hw) for p in range(partitions)}

    def take(self, outcome: Outcome[R]) -> R:
        self.log.extend(outcome.entries)
        return outcome.reply

    def join(self, session_timeout_ms: int = 0, options: QueueOptions | None = None) -> str:
        request = HeartbeatRequest(
            "q",
            "",
            JOIN,
            session_timeout_ms,
            topics=("jobs",),
            kind=QUEUE,
            queue=options or self.options,
        )
        reply = self.take(self.c.heartbeat(request, TOPICS))
        assert reply.assignment == frozenset()  # a queue member owns no partition
        return reply.member_id

    def receive(
        self,
        member: str,
        n: int = 10,
        invisible_ms: int = 10_000,
        keys: Mapping[tuple[str, int], Mapping[int, bytes | None]] | None = None,
    ) -> list[Lease]:
        request = ReceiveRequest("q", member, 1, "jobs", n, invisible_ms)
        return self.take(self.c.queue_receive(request, TOPICS, self.extents, self.now, keys))

    def settle(
        self, member: str, leases: list[Lease], action: str, delay_ms: int = 0, inv: int = 0
    ) -> SettleReply:
        settlements = tuple(
            Settlement(x.topic, x.partition, x.offset, x.delivery_count, action, delay_ms, inv)
            for x in leases
        )
        request = SettleRequest("q", member, 1, settlements)
        return self.take(self.c.queue_settle(request, TOPICS, self.now))

    def tick(self, advance_ms: int = 100) -> list[bytes]:
        self.now += advance_ms
        entries = self.c.tick(self.now)
        self.log.extend(entries)
        return entries

    def replayed(self) -> Coordinator:
        c = Coordinator(CONFIG)
        for entry in self.log:
            c.load(entry)
        c.start()
        return c


def state(c: Coordinator) -> object:
    group = c._table.group("q")
    assert group is not None and group.queue is not None
    return group.queue.snapshot()


def offsets(leases: list[Lease]) -> list[tuple[int, int]]:
    return [(x.partition, x.offset) for x in leases]


# -- receive ---------------------------------------------------------------------------------------


def test_receive_hands_out_fresh_records_round_robin_with_deadlines() -> None:
    kit = Kit()
    a = kit.join()
    leases = kit.receive(a, n=6, invisible_ms=5_000)
    assert offsets(leases) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert {(x.delivery_count, x.deadline_ms) for x in leases} == {(1, T0 + 5_000)}
    # the next receive starts at another partition; a short one still spreads
    more = kit.receive(a, n=2)
    assert offsets(more) == [(1, 2), (2, 2)]
    # one entry per partition touched, none for the others
    assert len(kit.log) == 2 + 3 + 2  # options and member, then 3, then 2
    assert sorted(type(decode(e)).__name__ for e in kit.log[-2:]) == ["QueueLeased"] * 2


def test_a_record_is_leased_to_one_member_until_it_is_settled_or_expires() -> None:
    kit = Kit(hw=2)
    a, b = kit.join(), kit.join()
    first = kit.receive(a, n=100)
    assert len(first) == 6
    assert kit.receive(b, n=100) == []
    kit.tick(9_000)
    assert kit.receive(b, n=100) == []  # before the deadline: no one else
    assert kit.settle(a, first[:2], ACK).applied == tuple(first[:2])


def test_ack_settles_once_and_only_from_the_holder_before_the_deadline() -> None:
    kit = Kit(hw=4)
    a, b = kit.join(), kit.join()
    leases = kit.receive(a, n=3)
    wrong = kit.settle(b, leases[:1], ACK)  # not b's lease
    assert wrong.applied == () and offsets(list(wrong.lost)) == offsets(leases[:1])
    ok = kit.settle(a, leases, ACK)
    assert ok.applied == tuple(leases) and ok.lost == ()
    before = len(kit.log)
    again = kit.settle(a, leases, ACK)  # the same call again (a retry): applied, nothing changed
    assert offsets(list(again.applied)) == offsets(leases) and again.lost == ()
    assert len(kit.log) == before
    assert sum(view.acked for view in kit.c.queue_view("q", TOPICS).queue) == 3
    other = kit.settle(a, leases, RELEASE)  # another settlement of an ended lease: lost
    assert other.applied == () and len(other.lost) == 3
    late = kit.receive(a, n=1)
    kit.now = late[0].deadline_ms  # a lease is valid while now < deadline
    assert kit.settle(a, late, ACK).lost == tuple(late)


def test_a_settle_retried_after_its_coordinator_died_is_answered_as_applied() -> None:
    """The SDK retries a settle whose answer was lost with its coordinator: the successor,
    loaded from the log, holds the first attempt's entry, and must not call the leases lost
    (the caller would think nothing changed). Each action alike; the count moves once."""
    kit = Kit(QueueOptions(max_deliveries=2), hw=10, partitions=1)
    a = kit.join()
    leases = kit.receive(a, n=4)
    kit.settle(a, leases[:1], ACK)
    kit.settle(a, leases[1:2], RELEASE)
    kit.settle(a, leases[2:3], REJECT)
    successor = kit.replayed()
    for lease, action in zip(leases[:3], (ACK, RELEASE, REJECT), strict=True):
        request = SettleRequest(
            "q", a, 1, (Settlement("jobs", 0, lease.offset, lease.delivery_count, action),)
        )
        retried = successor.queue_settle(request, TOPICS, kit.now + 1)
        assert retried.reply.applied and not retried.reply.lost and not retried.entries, action
    view = successor.queue_view("q", TOPICS).queue[0]
    assert (view.acked, view.waiting, view.dead_letters_pending) == (1, 1, 1)


def test_acks_of_a_hundred_records_are_one_entry_and_move_the_floor() -> None:
    kit = Kit(hw=1000)
    a = kit.join()
    leases = [x for x in kit.receive(a, n=300) if x.partition == 0]
    assert len(leases) == 100
    before = len(kit.log)
    kit.settle(a, leases[:50] + leases[60:], ACK)
    assert len(kit.log) == before + 1
    view = kit.c.queue_view("q", TOPICS).queue[0]
    assert (view.acked_floor, view.next_offset, view.acked, view.in_flight) == (50, 100, 90, 10)
    kit.settle(a, leases[50:60], ACK)
    assert kit.c.queue_view("q", TOPICS).queue[0].acked_floor == 100


def test_release_redelivers_after_its_delay_with_a_higher_count_and_no_backoff() -> None:
    kit = Kit(hw=1, partitions=1)
    a, b = kit.join(), kit.join()
    (lease,) = kit.receive(a, n=1)
    kit.settle(a, [lease], RELEASE, delay_ms=2_000)
    kit.tick(1_900)
    assert kit.receive(b, n=10) == []
    kit.tick(100)
    (again,) = kit.receive(b, n=10)
    assert (again.offset, again.delivery_count) == (lease.offset, 2)
    # waiting records go before fresh ones, lowest offset first
    kit.extents[("jobs", lease.partition)] = Extent(0, 5)
    kit.settle(b, [again], RELEASE)
    got = [x for x in kit.receive(a, n=3) if x.partition == lease.partition]
    assert [(x.offset, x.delivery_count) for x in got] == [(0, 3), (1, 1), (2, 1)]


def test_extend_moves_the_deadline() -> None:
    kit = Kit(hw=1)
    a = kit.join()
    (lease,) = kit.receive(a, n=1, invisible_ms=5_000)
    kit.tick(4_000)
    reply = kit.settle(a, [lease], EXTEND, inv=10_000)
    assert reply.applied[0].deadline_ms == kit.now + 10_000
    kit.tick(5_000)  # past the first deadline: still leased
    assert kit.c.queue_view("q", TOPICS).queue[lease.partition].in_flight == 1
    assert kit.settle(a, [lease], ACK).applied


def test_an_expired_lease_waits_out_the_backoff_of_its_count() -> None:
    kit = Kit(QueueOptions(backoff_ms=(1_000, 5_000)), hw=1, partitions=1)
    a = kit.join()
    counts = []
    for backoff in (1_000, 5_000, 5_000):  # the last step repeats
        (lease,) = kit.receive(a, n=1, invisible_ms=1_000)
        counts.append(lease.delivery_count)
        kit.tick(1_000)  # deadline reached: expired, waiting until deadline + backoff
        kit.tick(backoff - 100)
        assert kit.receive(a, n=1) == []
        kit.tick(100)
    assert counts == [1, 2, 3]
    assert kit.receive(a, n=1)[0].delivery_count == 4


def test_max_deliveries_dead_letters_once_with_a_deterministic_producer() -> None:
    kit = Kit(QueueOptions(max_deliveries=2, backoff_ms=(0,)), hw=1, partitions=1)
    a = kit.join()
    (lease,) = kit.receive(a, n=1, invisible_ms=1_000)
    kit.tick(1_000)
    (lease,) = kit.receive(a, n=1, invisible_ms=1_000)
    assert lease.delivery_count == 2
    kit.tick(1_000)
    assert kit.receive(a, n=1) == []
    (job,) = kit.c.queue_dead_letter_jobs()
    assert (job.offset, job.delivery_count, job.reason, job.sequence) == (
        lease.offset,
        2,
        REASON_MAX_DELIVERIES,
        0,
    )
    assert job.dead_letter_topic == "jobs.q.dlq"
    assert job.producer_id == producer_id("q", "jobs-uid", lease.partition)
    assert 0 < job.producer_id < 2**63
    kit.take(kit.c.queue_dead_lettered([job]))
    assert kit.c.queue_dead_letter_jobs() == []
    assert kit.take(kit.c.queue_dead_lettered([job])) is None  # twice: ignored
    view = kit.c.queue_view("q", TOPICS).queue[lease.partition]
    assert (view.dead_lettered, view.dead_letters_pending, view.acked_floor) == (1, 0, 1)


def test_reject_dead_letters_whatever_the_count_and_release_at_max_does_too() -> None:
    kit = Kit(QueueOptions(max_deliveries=1, dead_letter_topic="poison"), hw=1)
    a = kit.join()
    leases = kit.receive(a, n=2)
    kit.settle(a, leases[:1], REJECT)
    kit.settle(a, leases[1:], RELEASE)
    jobs = kit.c.queue_dead_letter_jobs()
    assert [(j.partition, j.reason, j.dead_letter_topic, j.sequence) for j in jobs] == sorted(
        [
            (leases[0].partition, REASON_REJECTED, "poison", 0),
            (leases[1].partition, REASON_MAX_DELIVERIES, "poison", 0),
        ]
    )


def test_dead_letter_sequences_count_per_partition_from_zero() -> None:
    kit = Kit(hw=5)
    a = kit.join()
    leases = [x for x in kit.receive(a, n=15) if x.partition == 1]
    kit.settle(a, leases[:2], REJECT)
    kit.settle(a, leases[2:4], REJECT)
    jobs = kit.c.queue_dead_letter_jobs()
    assert [(j.offset, j.sequence) for j in jobs] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    kit.take(kit.c.queue_dead_lettered(jobs[:2]))
    assert [j.sequence for j in kit.c.queue_dead_letter_jobs()] == [2, 3]


def test_dead_letter_sequences_are_contiguous_per_dead_letter_topic() -> None:
    kit = Kit(QueueOptions(dead_letter_topic="dlq-a"), hw=4, partitions=1)
    a = kit.join()
    leases = kit.receive(a, n=4)
    kit.settle(a, leases[:2], REJECT)
    kit.join(options=QueueOptions(dead_letter_topic="dlq-b"))  # the options move the DLQ
    kit.settle(a, leases[2:], REJECT)
    jobs = [(j.dead_letter_topic, j.sequence) for j in kit.c.queue_dead_letter_jobs()]
    # each producer stream starts at 0 in its topic: a dead-letter partition refuses a gap
    assert jobs == [("dlq-a", 0), ("dlq-a", 1), ("dlq-b", 0), ("dlq-b", 1)]
    assert state(kit.replayed()) == state(kit.c)


def test_a_departed_member_s_leases_wait_again_at_once() -> None:
    kit = Kit(hw=2)
    a, b, c = kit.join(1_000), kit.join(), kit.join()
    held = kit.receive(a, n=6)
    assert len(held) == 6
    # a leaves: its leases are available now to others, count kept (no backoff)
    kit.take(kit.c.heartbeat(HeartbeatRequest("q", a, LEAVE, 0, kind=QUEUE), TOPICS))
    again = kit.receive(b, n=3, invisible_ms=60_000)
    assert len(again) == 3 and {x.delivery_count for x in again} == {2}
    # b's session ends (silent for its timeout): the same
    for _ in range(120):
        kit.tick(100)
        kit.take(kit.c.heartbeat(HeartbeatRequest("q", c, 1, 0, kind=QUEUE), TOPICS))
    assert len(kit.receive(c, n=10)) == 6


def test_a_tick_writes_one_entry_per_partition_for_departures_and_expiries() -> None:
    kit = Kit(hw=4, partitions=1)
    a, b = kit.join(1_000), kit.join(60_000)
    kit.receive(a, n=2, invisible_ms=60_000)
    kit.receive(b, n=2, invisible_ms=1_100)
    for _ in range(20):
        entries = kit.tick(100)  # a's session and b's leases end in the same tick
        if entries:
            break
    kinds = [type(decode(e)).__name__ for e in entries]
    assert kinds == ["QueueSettled", "MemberRemoved"]
    settled = decode(entries[0])
    assert isinstance(settled, QueueSettled)
    assert [w[0] for w in settled.waiting] == [0, 1, 2, 3]
    assert [w[1] for w in settled.waiting] == [0, 0, T0 + 2_100, T0 + 2_100]  # a left: no backoff


def test_the_window_bounds_what_is_in_flight() -> None:
    kit = Kit(QueueOptions(max_in_flight=5), hw=1000)
    a = kit.join()
    leases = [x for x in kit.receive(a, n=100) if x.partition == 0]
    assert [x.offset for x in leases] == [0, 1, 2, 3, 4]
    kit.settle(a, leases[1:], ACK)  # 0 still leased: the window cannot move
    assert [x for x in kit.receive(a, n=100) if x.partition == 0] == []
    kit.settle(a, leases[:1], ACK)
    assert [x.offset for x in kit.receive(a, n=100) if x.partition == 0] == [5, 6, 7, 8, 9]


def test_a_ten_million_record_backlog_keeps_the_state_bounded() -> None:
    kit = Kit(QueueOptions(backoff_ms=(0,)), hw=10_000_000)
    a = kit.join()
    handed = 0
    for _ in range(30):
        leases = kit.receive(a, n=1000)
        handed += len(leases)
        kit.settle(a, leases[::2], ACK)  # half acked, half left to expire
        kit.take(kit.c.queue_dead_lettered(kit.c.queue_dead_letter_jobs()))
        kit.tick(20_000)
    assert handed == 30_000
    group = kit.c._table.group("q")
    assert group is not None and group.queue is not None
    for part in group.queue.partitions.values():
        assert part.next_offset - part.floor <= 2_000
        assert len(part.leased) + len(part.waiting) + len(part.pending) <= 2_000
        assert len(part._unsettled) <= 4_000 and len(part._deadlines) <= 4_000


def test_heaps_follow_the_window_not_the_traffic() -> None:
    kit = Kit(QueueOptions(max_in_flight=100_000), hw=1_000_000, partitions=1)
    a = kit.join()
    for round in range(200):  # 20,000 twelve-hour leases acked long before their deadlines
        leases = kit.receive(a, n=100, invisible_ms=43_200_000)
        kit.settle(a, leases, ACK)
        if round < 10:
            held = kit.receive(a, n=50, invisible_ms=43_200_000)
            kit.settle(a, held, RELEASE, delay_ms=86_400_000)
    group = kit.c._table.group("q")
    assert group is not None and group.queue is not None
    part = group.queue.partitions[("jobs-uid", 0)]
    assert part.acked == 20_000 and len(part.waiting) == 500
    assert len(part._deadlines) <= 2 * len(part.leased) + 64
    assert len(part._timed) + len(part._ready) <= 2 * len(part.waiting) + 64


def test_a_default_dead_letter_topic_name_must_be_valid() -> None:
    c = Coordinator(CONFIG)
    c.start()
    topics = {"t" * 200: TopicMeta("uid", 1)}
    join = HeartbeatRequest("q", "", JOIN, 0, topics=("t" * 200,), kind=QUEUE)
    with pytest.raises(InvalidGroupRequest, match=r"dead_letter_topic: the default .* too long"):
        c.heartbeat(join, topics)
    named = replace(join, queue=QueueOptions(dead_letter_topic="short.dlq"))
    assert c.heartbeat(named, topics).reply.member_id


def test_retention_settles_what_it_deleted_apart_from_acks() -> None:
    kit = Kit(hw=10)
    a = kit.join()
    leases = [x for x in kit.receive(a, n=30) if x.partition == 0]  # 0..9 leased
    kit.settle(a, leases[5:], RELEASE)  # 5..9 waiting
    kit.settle(a, leases[:2], ACK)
    kit.extents[("jobs", 0)] = Extent(8, 20)  # retention deleted 0..7
    got = [x for x in kit.receive(a, n=30) if x.partition == 0]
    # 2..4 stay leased, 5..7 were deleted while waiting; 8, 9 wait; fresh from 10
    assert [x.offset for x in got][:3] == [8, 9, 10]
    view = kit.c.queue_view("q", TOPICS).queue[0]
    assert (view.acked, view.deleted, view.acked_floor) == (2, 3, 2)
    # a lease below the log start that ends is deleted, not redelivered nor dead-lettered
    kit.settle(a, leases[2:5], REJECT)
    view = kit.c.queue_view("q", TOPICS).queue[0]
    assert (view.deleted, view.dead_letters_pending, view.acked_floor) == (6, 0, 8)
    # a backlog deleted before it was handed out: the floor jumps, nothing per record
    kit.extents[("jobs", 1)] = Extent(5_000_000, 5_000_010)
    kit.receive(a, n=30)
    assert kit.c.queue_view("q", TOPICS).queue[1].deleted >= 5_000_000 - 10


# -- key ordering --------------------------------------------------------------------------------


def test_key_ordering_holds_a_key_back_while_an_earlier_record_is_unsettled() -> None:
    kit = Kit(QueueOptions(ordering="key"), hw=6)
    kit.extents = {("jobs", 0): Extent(0, 6)}
    a, b = kit.join(), kit.join()
    extent = kit.extents[("jobs", 0)]
    window = kit.c.queue_key_window("q", "jobs", 0, extent, 100)
    assert window == range(0, 6)
    keys = {("jobs", 0): {0: b"x", 1: b"y", 2: b"x", 3: None, 4: b"y", 5: b"z"}}
    first = kit.receive(a, n=10, keys=keys)
    assert [x.offset for x in first] == [0, 1, 3, 5]  # 2 and 4 wait for 0 and 1
    assert kit.receive(b, n=10, keys=keys) == []
    kit.settle(a, [first[0]], ACK)  # x's 0 done: x's 2 may go
    (two,) = kit.receive(b, n=10, keys=keys)
    assert (two.offset, two.delivery_count) == (2, 1)
    kit.settle(a, [first[1]], RELEASE)  # y's 1 waits again: 4 still blocked
    assert [x.offset for x in kit.receive(b, n=10, keys=keys)] == [1]
    assert kit.c.queue_key_window("q", "jobs", 0, extent, 100) == range(6, 6)


def test_key_ordering_stops_where_the_keys_were_not_read() -> None:
    kit = Kit(QueueOptions(ordering="key"), hw=10)
    kit.extents = {("jobs", 0): Extent(0, 10)}
    a = kit.join()
    got = kit.receive(a, n=10, keys={("jobs", 0): {0: b"a", 1: b"b"}})
    assert [x.offset for x in got] == [0, 1]
    window = kit.c.queue_key_window("q", "jobs", 0, kit.extents[("jobs", 0)], 3)
    assert window == range(2, 5)


def test_the_key_window_is_empty_without_key_ordering() -> None:
    kit = Kit()
    kit.join()
    assert len(kit.c.queue_key_window("q", "jobs", 0, Extent(0, 100), 10)) == 0


# -- replay --------------------------------------------------------------------------------------


def test_a_replayed_coordinator_holds_the_same_leases_waiting_counts_and_dead_letters() -> None:
    kit = Kit(QueueOptions(max_deliveries=3, ordering="key", backoff_ms=(700, 900)), hw=40)
    keys = {("jobs", p): {o: b"k%d" % (o % 7) for o in range(40)} for p in range(3)}
    a, b = kit.join(), kit.join(2_000)
    for step in range(40):
        who = a if step % 2 else b
        leases = kit.receive(who, n=7, invisible_ms=1_000 + 500 * (step % 3), keys=keys)
        action = (ACK, RELEASE, REJECT, EXTEND)[step % 4]
        if len(leases) > 1:
            half = leases[: len(leases) // 2]
            kit.settle(who, half, action, inv=2_000 if action == EXTEND else 0)
        if step % 5 == 0:
            kit.take(kit.c.queue_dead_lettered(kit.c.queue_dead_letter_jobs()[:2]))
        kit.tick(300)
    other = kit.replayed()
    assert state(other) == state(kit.c)
    assert other.queue_dead_letter_jobs() == kit.c.queue_dead_letter_jobs()
    assert other.queue_view("q", TOPICS) == kit.c.queue_view("q", TOPICS)
    # and it goes on deciding alike
    kit.tick(5_000)
    other.tick(5_000 + kit.now - 5_000)
    assert state(other) == state(kit.c)


def test_a_receive_that_hands_out_nothing_leaves_no_state_a_replay_lacks() -> None:
    kit = Kit(hw=5, partitions=1)  # partitions 1 and 2 have no records
    a = kit.join()
    assert len(kit.receive(a, n=10)) == 5
    assert kit.receive(a, n=10) == []
    assert state(kit.replayed()) == state(kit.c)


def test_a_dead_letter_whose_source_is_gone_is_settled_as_deleted() -> None:
    kit = Kit(hw=2, partitions=1)
    a = kit.join()
    kit.settle(a, kit.receive(a, n=2), REJECT)
    jobs = kit.c.queue_dead_letter_jobs()
    kit.take(kit.c.queue_dead_letter_gone(jobs[:1]))  # retention deleted its source
    kit.take(kit.c.queue_dead_lettered(jobs))  # the first is no longer pending: ignored
    view = kit.c.queue_view("q", TOPICS).queue[0]
    assert (view.deleted, view.dead_lettered, view.dead_letters_pending) == (1, 1, 0)
    assert view.acked_floor == 2
    assert state(kit.replayed()) == state(kit.c)


def test_the_key_window_follows_the_topic_incarnation_named() -> None:
    kit = Kit(QueueOptions(ordering="key"), hw=3, partitions=1)
    a = kit.join()
    kit.receive(a, n=3, keys={("jobs", 0): {0: b"a", 1: b"b", 2: b"c"}})
    extent = Extent(0, 10)
    assert kit.c.queue_key_window("q", "jobs", 0, extent, 100) == range(3, 10)
    assert kit.c.queue_key_window("q", "jobs", 0, extent, 100, "jobs-uid") == range(3, 10)
    # the topic was deleted and created again: its new incarnation starts from its log start
    assert kit.c.queue_key_window("q", "jobs", 0, extent, 100, "jobs-uid-2") == range(0, 10)


def test_deleting_a_queue_group_needs_it_empty_and_drops_its_state() -> None:
    kit = Kit(hw=3)
    a = kit.join()
    kit.receive(a, n=3)
    with pytest.raises(Exception, match="has 1 member"):
        kit.c.delete_group("q")
    kit.take(kit.c.heartbeat(HeartbeatRequest("q", a, LEAVE, 0, kind=QUEUE), TOPICS))
    assert "q" in kit.c.groups()  # its queue state outlives its members
    kit.take(kit.c.delete_group("q"))
    assert kit.c.groups() == [] and kit.replayed().groups() == []


def test_describe_of_a_queue_group_is_its_queue_view() -> None:
    kit = Kit(QueueOptions(max_deliveries=7), hw=3)
    a = kit.join()
    kit.receive(a, n=4)
    view = kit.c.describe("q", TOPICS)
    assert view.kind == QUEUE and view.queue_options == QueueOptions(max_deliveries=7)
    assert sum(p.in_flight for p in view.queue) == 4
    assert [m.assignment for m in view.members] == [frozenset()]


def test_options_are_replicated_when_a_join_changes_them() -> None:
    kit = Kit()
    kit.join()
    before = len(kit.log)
    kit.join()
    assert len(kit.log) == before + 1  # the member only
    kit.join(options=QueueOptions(max_deliveries=9))
    assert kit.c.queue_view("q", TOPICS).queue_options == QueueOptions(max_deliveries=9)
    assert kit.replayed().queue_view("q", TOPICS).queue_options == QueueOptions(max_deliveries=9)


# -- validation ------------------------------------------------------------------------------------


def _receive(n: int = 1, inv: int = 0, topic: str = "jobs", member: str = "") -> object:
    return lambda kit, m: kit.c.queue_receive(
        ReceiveRequest("q", member or m, 1, topic, n, inv), TOPICS, kit.extents, kit.now
    )


def _settle(*settlements: Settlement) -> object:
    return lambda kit, m: kit.c.queue_settle(SettleRequest("q", m, 1, settlements), TOPICS, kit.now)


def _join(**options: object) -> object:
    return lambda kit, m: kit.c.heartbeat(
        HeartbeatRequest(
            "q",
            "",
            JOIN,
            0,
            topics=("jobs",),
            kind=QUEUE,
            queue=QueueOptions(**options),  # type: ignore[arg-type]
        ),
        TOPICS,
    )


BAD = [
    (_receive(n=0), InvalidGroupRequest, r"max_records 0 is out of range: use 1\.\.10000"),
    (_receive(n=10_001), InvalidGroupRequest, "max_records 10001"),
    (_receive(inv=999), InvalidGroupRequest, r"invisible_ms 999 .* 1000\.\.43200000"),
    (_receive(inv=43_200_001), InvalidGroupRequest, "invisible_ms 43200001"),
    (_receive(topic="other"), Exception, "topic 'other' does not exist"),
    (_receive(member="q-99"), FencedMember, "member 'q-99' is not in queue group"),
    (_settle(), InvalidGroupRequest, r"settlements: 0 given: use 1\.\.10000"),
    (_settle(Settlement("jobs", 0, 0, 1, "nack")), InvalidGroupRequest, "action 'nack'"),
    (_settle(Settlement("jobs", 7, 0, 1, ACK)), InvalidGroupRequest, "partition 7"),
    (_settle(Settlement("jobs", 0, -1, 1, ACK)), InvalidGroupRequest, "offset -1"),
    (_settle(Settlement("jobs", 0, 0, 0, ACK)), InvalidGroupRequest, "delivery_count 0"),
    (
        _settle(Settlement("jobs", 0, 0, 1, RELEASE, delay_ms=86_400_001)),
        InvalidGroupRequest,
        r"delay_ms 86400001 is out of range: use 0\.\.86400000",
    ),
    (
        _settle(Settlement("jobs", 0, 0, 1, EXTEND, invisible_ms=0)),
        InvalidGroupRequest,
        r"invisible_ms 0 is out of range: use 1000\.\.43200000",
    ),
    (_join(max_deliveries=1001), InvalidGroupRequest, r"max_deliveries 1001 .* 1\.\.1000"),
    (_join(max_in_flight=100_001), InvalidGroupRequest, r"max_in_flight 100001 .* 1\.\.100000"),
    (_join(ordering="fifo"), InvalidGroupRequest, "ordering 'fifo' is not valid"),
    (_join(backoff_ms=(1,) * 17), InvalidGroupRequest, "backoff_ms has 17 steps: use at most 16"),
    (_join(backoff_ms=(86_400_001,)), InvalidGroupRequest, "backoff_ms step 86400001"),
    (_join(dead_letter_topic="a b"), InvalidGroupRequest, "dead_letter_topic 'a b'"),
    (_join(dead_letter_topic=".."), InvalidGroupRequest, "dead_letter_topic '..' is not valid"),
    (_join(dead_letter_topic="jobs"), InvalidGroupRequest, "'jobs' is a topic the member consumes"),
]


@pytest.mark.parametrize(("call", "error", "message"), BAD)
def test_bad_fields_are_refused_by_name_and_change_nothing(
    call: object, error: type[Exception], message: str
) -> None:
    kit = Kit(hw=5)
    a = kit.join()
    kit.receive(a, n=4)
    before = state(kit.c), kit.c.queue_view("q", TOPICS)
    with pytest.raises(error, match=message):
        call(kit, a)  # type: ignore[operator]
    assert (state(kit.c), kit.c.queue_view("q", TOPICS)) == before


def test_a_topic_the_member_does_not_consume_is_refused() -> None:
    kit = Kit()
    a = kit.join()
    topics = {**TOPICS, "other": TopicMeta("other-uid", 1)}
    request = ReceiveRequest("q", a, 1, "other", 1, 0)
    with pytest.raises(InvalidGroupRequest, match="topic 'other' is not consumed by member"):
        kit.c.queue_receive(request, topics, kit.extents, kit.now)


def test_a_queue_group_has_no_offsets_to_commit_or_reset() -> None:
    kit = Kit()
    a = kit.join()
    with pytest.raises(InvalidGroupRequest, match="'q' is a queue group: it has no offsets"):
        kit.c.commit(CommitRequest("q", a, 1, (("jobs", 0, 5),)), TOPICS)
    kit.take(kit.c.heartbeat(HeartbeatRequest("q", a, LEAVE, 0, kind=QUEUE), TOPICS))
    with pytest.raises(InvalidGroupRequest, match="queue group"):
        kit.c.commit(CommitRequest("q", "", LEAVE, (("jobs", 0, 5),)), TOPICS)
    with pytest.raises(InvalidGroupRequest, match="queue group"):
        kit.c.reset_offsets("q", "jobs", {0: 5}, TOPICS)
    assert kit.c.offsets("q", TOPICS) == {}


def test_queue_calls_on_a_stream_group_and_queue_options_on_a_stream_join_are_refused() -> None:
    c = Coordinator(CONFIG)
    c.start()
    join = HeartbeatRequest("s", "", JOIN, 0, topics=("jobs",))
    member = c.heartbeat(join, TOPICS).reply.member_id
    with pytest.raises(InvalidGroupRequest, match="group 's' is a stream group, not a queue"):
        c.queue_receive(ReceiveRequest("s", member, 1, "jobs", 1, 0), TOPICS, {}, T0)
    bad = HeartbeatRequest("s2", "", JOIN, 0, topics=("jobs",), queue=QueueOptions())
    with pytest.raises(InvalidGroupRequest, match="queue: options are for kind 'queue'"):
        c.heartbeat(bad, TOPICS)
