"""A queue member's state and plans without a server: each plan is run by a scripted driver that
answers its calls as a coordinator and the partitions' replicas would (what the wire contract in
proto/flotilla.proto says they answer), and records every call in order. Checked: a join carries
kind QUEUE, the topic and the options, later heartbeats not the options; receive waits on the
server (wait_ms), reads each contiguous run of leased offsets once, from a follower first, and
returns Deliveries in (partition, offset) order; a settlement applies per delivery and LeaseLost
names exactly those refused, after the others; leases of an ended session are forgotten (settled
locally as lost, nothing sent) and the member rejoins; extend returns the new deadline; close
releases what it holds, then leaves with epoch -1, once; settlements go out 10000 per call; a
bad argument is named and sends nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from flotilla import Client, Delivery, InvalidArgument, LeaseLost, aio
from flotilla._core import ClientCore, Failed, Rpc, Sleep
from flotilla._queue import QueueState, check_queue, runs
from flotilla._queue_plans import Join, QueueCore
from flotilla.errors import FencedMember, FlotillaError, OffsetOutOfRange, Unavailable
from flotilla.types import Record
from proto import flotilla_pb2 as pb
from proto.records import encode_batch

TOPIC = "jobs"
GROUP = "workers"
LEADER, FOLLOWER = "n1", "n2"
ADDRESS = {LEADER: "127.0.0.1:1", FOLLOWER: "127.0.0.1:2"}


def metadata(log_start: int = 0) -> pb.MetadataResponse:
    def partitions(count: int) -> list[pb.PartitionInfo]:
        return [
            pb.PartitionInfo(index=i, leader=LEADER, replicas=[LEADER, FOLLOWER],
                             high_watermark=20, log_start=log_start)
            for i in range(count)
        ]  # fmt: skip

    return pb.MetadataResponse(
        members=[pb.Member(id=n, address=a, state=pb.ALIVE) for n, a in ADDRESS.items()],
        topics=[
            pb.TopicInfo(name="__groups", partitions=partitions(1), uid="g"),
            pb.TopicInfo(name=TOPIC, partitions=partitions(2), uid="u"),
        ],
    )


class Coordinator:
    """Answers a queue member's calls: leases `to_hand_out` on the next receive, settles a lease
    it holds (member, offset, count) unless `refuse` names it, and records every call."""

    def __init__(self) -> None:
        self.calls: list[Rpc] = []
        self.to_hand_out: list[tuple[int, int]] = []  # (partition, offset)
        self.held: dict[tuple[int, int], tuple[str, int]] = {}  # -> (member, count)
        self.refuse: set[tuple[int, int]] = set()
        self.fenced = False
        self.carries = False  # takes settlements carried on a receive (else: an older node)
        self.joins = 0
        self.log_start = 0
        self.answers: dict[str, Callable[[Any], Any]] = {
            "Metadata": lambda request: metadata(self.log_start),
            "GroupHeartbeat": self.heartbeat,
            "QueueReceive": self.receive,
            "QueueSettle": self.settle,
            "Fetch": self.fetch,
        }

    def __call__(self, rpc: Rpc) -> Any:
        self.calls.append(rpc)
        answer = self.answers[rpc.method](rpc.request)
        return Failed(answer, "") if isinstance(answer, FlotillaError) else answer

    def heartbeat(self, request: pb.GroupHeartbeatRequest) -> Any:
        if request.member_epoch == -1:
            return pb.GroupHeartbeatResponse(member_id=request.member_id, member_epoch=-1)
        if not request.member_id:
            self.joins += 1
            self.fenced = False
        return pb.GroupHeartbeatResponse(
            member_id=request.member_id or f"m{self.joins}", member_epoch=1,
            heartbeat_interval_ms=500,
        )  # fmt: skip

    def receive(self, request: pb.QueueReceiveRequest) -> Any:
        if self.fenced:
            return FencedMember("fenced")
        settled = None
        if self.carries and request.settlements:
            carried = pb.QueueSettleRequest(
                member_id=request.member_id, settlements=request.settlements
            )
            settled = self.settle(carried)
            if settled.lost:
                return pb.QueueReceiveResponse(settled=True, applied=settled.applied,
                                               lost=settled.lost)  # fmt: skip
        leases: list[pb.QueueLease] = []
        for partition, offset in self.to_hand_out[: request.max_records]:
            count = self.held.get((partition, offset), ("", 0))[1] + 1
            self.held[(partition, offset)] = (request.member_id, count)
            leases.append(pb.QueueLease(topic=TOPIC, partition=partition, offset=offset,
                                        delivery_count=count, deadline_ms=1_000 + offset))  # fmt: skip
        self.to_hand_out = self.to_hand_out[request.max_records :]
        leases.sort(key=lambda lease: (lease.partition, lease.offset))
        if settled is not None:
            return pb.QueueReceiveResponse(leases=leases, settled=True, applied=settled.applied)
        return pb.QueueReceiveResponse(leases=leases)

    def settle(self, request: pb.QueueSettleRequest) -> Any:
        if self.fenced:
            return FencedMember("fenced")
        response = pb.QueueSettleResponse()
        for s in request.settlements:
            key = (s.partition, s.offset)
            lease = pb.QueueLease(topic=s.topic, partition=s.partition, offset=s.offset,
                                  delivery_count=s.delivery_count)  # fmt: skip
            if key in self.refuse or self.held.get(key) != (request.member_id, s.delivery_count):
                response.lost.append(lease)
                continue
            if s.action == pb.SETTLE_EXTEND:
                lease.deadline_ms = 50_000
            else:
                del self.held[key]
            response.applied.append(lease)
        return response

    def fetch(self, request: pb.FetchRequest) -> pb.FetchResponse:
        """Records from the offset asked to the end of its run-sized request; value "p:o"."""
        if request.offset < self.log_start:
            return OffsetOutOfRange("below the log start")  # type: ignore[return-value]
        rows = [
            (None, f"{request.partition}:{o}".encode(), None, 1)
            for o in range(request.offset, request.offset + request.max_records)
        ]
        batch = pb.StoredBatch(base_offset=request.offset, record_count=len(rows),
                               data=encode_batch(rows))  # fmt: skip
        return pb.FetchResponse(batches=[batch], high_watermark=20, log_start=self.log_start)

    def sent(self, method: str) -> list[Any]:
        return [rpc.request for rpc in self.calls if rpc.method == method]


def queue(coordinator: Coordinator, **options: Any) -> QueueCore:
    settings = check_queue(
        GROUP, TOPIC, **{
            "invisible_ms": 30_000, "max_deliveries": 5, "session_timeout_ms": 10_000,
            "dead_letter_topic": None, "ordering": "none", "backoff_ms": None,
            "max_in_flight": None, **options,
        }
    )  # fmt: skip
    return QueueCore(
        ClientCore(["127.0.0.1:1"], 5.0, "all"), QueueState(settings, 0.0), lambda: None
    )


def run(q: QueueCore, coordinator: Coordinator, plan: Any) -> Any:
    """Drives a plan: calls answered by `coordinator`, a Join runs the heartbeat plan."""
    outcome: Any = None
    try:
        step = next(plan)
        while True:
            if isinstance(step, Rpc):
                outcome = coordinator(step)
            elif isinstance(step, Join):
                if q.state.needs_join():
                    run(q, coordinator, q.heartbeat())
                outcome = None
            else:
                assert isinstance(step, Sleep)
                outcome = None
            step = plan.send(outcome)
    except StopIteration as done:
        return done.value


def test_a_join_carries_kind_topic_and_options_later_heartbeats_only_the_kind() -> None:
    c = Coordinator()
    q = queue(c, max_deliveries=3, ordering="key", dead_letter_topic="dead", backoff_ms=[10, 20])
    run(q, c, q.heartbeat())
    run(q, c, q.heartbeat())
    join, later = c.sent("GroupHeartbeat")
    assert join.member_id == "" and join.member_epoch == 0 and list(join.topics) == [TOPIC]
    assert join.kind == pb.GROUP_KIND_QUEUE and join.HasField("queue")
    assert (join.queue.max_deliveries, join.queue.ordering, join.queue.dead_letter_topic) == (
        3, "key", "dead",
    )  # fmt: skip
    assert list(join.queue.backoff_ms) == [10, 20] and join.queue.max_in_flight == 0
    assert later.member_id == "m1" and later.kind == pb.GROUP_KIND_QUEUE
    assert later.topics_unchanged and not later.HasField("queue") and not later.owned


def test_receive_reads_each_run_once_from_a_follower_first_in_partition_offset_order() -> None:
    c = Coordinator()
    q = queue(c)
    c.to_hand_out = [(1, 7), (0, 9), (1, 5), (0, 3), (1, 6)]
    ds = run(q, c, q.receive(100, 1.0))
    assert [(d.partition, d.offset) for d in ds] == [(0, 3), (0, 9), (1, 5), (1, 6), (1, 7)]
    assert all(d.record.value == f"{d.partition}:{d.offset}".encode() for d in ds)
    assert all(d.topic == TOPIC and d.delivery_count == 1 for d in ds)
    assert [d.deadline_ms for d in ds] == [1_003, 1_009, 1_005, 1_006, 1_007]
    (received,) = c.sent("QueueReceive")
    assert received.member_id == "m1" and received.invisible_ms == 30_000
    assert 0 < received.wait_ms <= 1_000 and received.max_records == 100
    fetches = [rpc for rpc in c.calls if rpc.method == "Fetch"]
    assert [(f.request.partition, f.request.offset, f.request.max_records) for f in fetches] == [
        (0, 3, 1), (0, 9, 1), (1, 5, 3),
    ]  # fmt: skip
    assert all(f.address == ADDRESS[FOLLOWER] for f in fetches), "the leader is asked last"
    assert [f.request.min_high_watermark for f in fetches] == [4, 10, 8]


def test_receive_with_nothing_waits_on_the_server_and_returns_empty() -> None:
    c = Coordinator()
    q = queue(c)
    assert run(q, c, q.receive(10, 0.0)) == []
    assert [r.wait_ms for r in c.sent("QueueReceive")] == [0]
    assert not c.sent("Fetch")


def test_settlements_apply_each_on_its_own_and_lease_lost_names_the_refused() -> None:
    c = Coordinator()
    q = queue(c)
    c.to_hand_out = [(0, 1), (0, 2), (0, 3)]
    ds = run(q, c, q.receive(10, 1.0))
    c.refuse = {(0, 2)}
    with pytest.raises(LeaseLost) as lost:
        run(q, c, q.settle(ds, "ack"))
    assert [d.offset for d in lost.value.deliveries] == [2]
    assert "0 others" not in str(lost.value) and "2 others were applied" in str(lost.value)
    assert (0, 1) not in c.held and (0, 3) not in c.held
    sent_before = len(c.calls)
    with pytest.raises(LeaseLost) as again:  # settled already: refused here, nothing sent
        run(q, c, q.settle(ds[0], "release"))
    assert again.value.deliveries == [ds[0]] and len(c.calls) == sent_before


@pytest.mark.parametrize("carries", [True, False], ids=["carried", "older-node"])
def test_acks_carried_on_a_receive_apply_once_and_an_older_node_gets_them_by_settle(
    carries: bool,
) -> None:
    c = Coordinator()
    c.carries = carries
    q = queue(c)
    c.to_hand_out = [(0, 1), (0, 2)]
    first = run(q, c, q.receive(10, 1.0))
    c.to_hand_out = [(0, 3)]
    second = run(q, c, q.receive(10, 1.0, first))
    assert [d.offset for d in second] == [3]
    assert (0, 1) not in c.held and (0, 2) not in c.held  # acked, either way
    (carrying,) = [r for r in c.sent("QueueReceive") if r.settlements]
    assert [(s.offset, s.action) for s in carrying.settlements] == [(1, 0), (2, 0)]
    # an older node ignored them: the same acks follow as QueueSettle
    assert [len(r.settlements) for r in c.sent("QueueSettle")] == ([] if carries else [2])
    if carries:  # a lost one: LeaseLost names it, nothing leased
        c.refuse, c.to_hand_out = {(0, 3)}, [(0, 4)]
        with pytest.raises(LeaseLost) as lost:
            run(q, c, q.receive(10, 1.0, second))
        assert [d.offset for d in lost.value.deliveries] == [3]
        assert c.to_hand_out == [(0, 4)]


def test_release_and_reject_carry_their_action_and_delay() -> None:
    c = Coordinator()
    q = queue(c)
    c.to_hand_out = [(0, 1), (1, 1)]
    first, second = run(q, c, q.receive(10, 1.0))
    run(q, c, q.settle(first, "release", delay_ms=2_500))
    run(q, c, q.settle([second], "reject"))
    release, reject = c.sent("QueueSettle")
    assert [(s.action, s.delay_ms, s.offset) for s in release.settlements] == [
        (pb.SETTLE_RELEASE, 2_500, 1)
    ]
    assert [(s.action, s.partition) for s in reject.settlements] == [(pb.SETTLE_REJECT, 1)]


def test_extend_returns_the_new_deadline_and_the_old_delivery_still_settles() -> None:
    c = Coordinator()
    q = queue(c)
    c.to_hand_out = [(0, 4)]
    (d,) = run(q, c, q.receive(10, 1.0))
    (extended,) = run(q, c, q.settle([d], "extend", invisible_ms=60_000))
    assert extended.deadline_ms == 50_000 and d.deadline_ms == 1_004
    assert c.sent("QueueSettle")[0].settlements[0].invisible_ms == 60_000
    assert q.state.book.deadline_ms((TOPIC, 0, 4)) == 50_000
    run(q, c, q.settle(d, "ack"))
    assert not c.held


def test_a_fenced_member_forgets_its_leases_and_rejoins() -> None:
    c = Coordinator()
    q = queue(c)
    c.to_hand_out = [(0, 1), (0, 2)]
    ds = run(q, c, q.receive(10, 1.0))
    c.fenced = True
    with pytest.raises(LeaseLost) as lost:
        run(q, c, q.settle(ds[:1], "ack"))
    assert lost.value.deliveries == ds[:1]
    assert len(q.state.book) == 0 and q.state.needs_join()
    sent_before = len(c.calls)
    with pytest.raises(LeaseLost):  # forgotten: answered here, nothing sent
        run(q, c, q.settle(ds[1:], "ack"))
    assert len(c.calls) == sent_before
    c.to_hand_out = [(0, 5)]
    (d,) = run(q, c, q.receive(10, 1.0))  # rejoins first
    assert c.joins == 2 and c.sent("QueueReceive")[-1].member_id == "m2" and d.offset == 5


def test_a_receive_fenced_again_and_again_ends_at_its_timeout() -> None:
    c = Coordinator()
    q = queue(c)
    c.answers["QueueReceive"] = lambda request: FencedMember("fenced")
    assert run(q, c, q.receive(10, 0.2)) == []
    assert c.joins >= 2  # it rejoined after each refusal


def test_a_session_over_by_the_members_clock_forgets_the_leases() -> None:
    c = Coordinator()
    q = queue(c, session_timeout_ms=1_000)
    c.to_hand_out = [(0, 1)]
    run(q, c, q.receive(10, 1.0))
    sent_at = q.state.member._acked_sent_at
    assert sent_at is not None and len(q.state.book) == 1
    assert not q.state.check_session(sent_at + 0.9) and len(q.state.book) == 1
    assert q.state.check_session(sent_at + 1.0) and len(q.state.book) == 0
    request = q.state.heartbeat_request()  # the next heartbeat rejoins, with the options
    assert request is not None and request.member_id == "" and request.HasField("queue")


def test_close_releases_what_it_holds_then_leaves_once() -> None:
    c = Coordinator()
    q = queue(c)
    c.to_hand_out = [(0, 1), (1, 2)]
    ds = run(q, c, q.receive(10, 1.0))
    run(q, c, q.settle(ds[0], "ack"))
    run(q, c, q.close())
    run(q, c, q.close())
    methods = [rpc.method for rpc in c.calls]
    assert methods[-2:] == ["QueueSettle", "GroupHeartbeat"]
    release = c.sent("QueueSettle")[-1]
    assert [(s.partition, s.offset, s.action) for s in release.settlements] == [
        (1, 2, pb.SETTLE_RELEASE)
    ]
    leave = c.sent("GroupHeartbeat")[-1]
    assert leave.member_epoch == -1 and leave.kind == pb.GROUP_KIND_QUEUE
    assert not c.held
    with pytest.raises(InvalidArgument, match="closed"):
        run(q, c, q.receive(10, 1.0))


def test_settlements_go_out_ten_thousand_per_call() -> None:
    c = Coordinator()
    q = queue(c)
    c.to_hand_out = [(0, o) for o in range(10_001)]
    c.answers["Fetch"] = lambda request: Coordinator.fetch(c, request)
    ds = run(q, c, q.receive(10_000, 1.0)) + run(q, c, q.receive(10_000, 1.0))
    assert len(ds) == 10_001
    run(q, c, q.settle(ds, "ack"))
    assert [len(r.settlements) for r in c.sent("QueueSettle")] == [10_000, 1]


def test_a_leased_offset_below_the_log_start_is_skipped_and_acked() -> None:
    c = Coordinator()
    q = queue(c)
    c.to_hand_out = [(0, 1), (0, 2), (0, 3)]
    c.log_start = 3
    ds = run(q, c, q.receive(10, 1.0))
    assert [d.offset for d in ds] == [3]
    (ack,) = c.sent("QueueSettle")
    assert [(s.offset, s.action) for s in ack.settlements] == [
        (1, pb.SETTLE_ACK), (2, pb.SETTLE_ACK),
    ]  # fmt: skip
    assert len(q.state.book) == 1


def test_leased_records_no_replica_serves_are_given_back_at_once() -> None:
    c = Coordinator()
    q = queue(c)
    q.core.timeout_s = 0.2
    c.to_hand_out = [(0, 1), (1, 4)]
    served = Coordinator.fetch
    c.answers["Fetch"] = lambda r: served(c, r) if r.partition == 1 else Unavailable("down")
    ds = run(q, c, q.receive(10, 1.0))
    assert [(d.partition, d.offset) for d in ds] == [(1, 4)]
    (release,) = c.sent("QueueSettle")
    assert [(s.partition, s.offset, s.action, s.delay_ms) for s in release.settlements] == [
        (0, 1, pb.SETTLE_RELEASE, 0)
    ]
    assert len(q.state.book) == 1


def test_runs_are_contiguous_offsets() -> None:
    assert runs([9, 3, 4, 5, 11, 10, 4]) == [(3, 6), (9, 12)]
    assert runs([]) == []


BAD = [
    ({"group": "no spaces"}, "group"),
    ({"topic": ""}, "topic"),
    ({"invisible_ms": 999}, "invisible_ms"),
    ({"invisible_ms": 43_200_001}, "invisible_ms"),
    ({"max_deliveries": 0}, "max_deliveries"),
    ({"max_deliveries": 1_001}, "max_deliveries"),
    ({"session_timeout_ms": 999}, "session_timeout_ms"),
    ({"dead_letter_topic": ".."}, "dead_letter_topic"),
    ({"dead_letter_topic": TOPIC}, "dead_letter_topic"),
    ({"dead_letter_topic": "__groups"}, "dead_letter_topic"),
    ({"backoff_ms": [1] * 17}, "backoff_ms"),
    ({"ordering": "fifo"}, "ordering"),
    ({"backoff_ms": []}, "backoff_ms"),
    ({"backoff_ms": [-1]}, "backoff_ms"),
    ({"max_in_flight": 0}, "max_in_flight"),
]


@pytest.mark.parametrize(("bad", "named"), BAD)
def test_a_bad_queue_argument_is_named_and_sends_nothing(bad: dict[str, Any], named: str) -> None:
    arguments: dict[str, Any] = {"group": GROUP, "topic": TOPIC, **bad}
    # nothing listens there: nothing may be sent
    with Client("127.0.0.1:1") as client, pytest.raises(InvalidArgument, match=named):
        client.queue(**arguments)
    with pytest.raises(InvalidArgument, match=named):
        aio.Client("127.0.0.1:1").queue(**arguments)


def test_bad_receive_and_settle_arguments_are_named() -> None:
    c = Coordinator()
    q = queue(c)
    with pytest.raises(InvalidArgument, match="max_records"):
        run(q, c, q.receive(0, 1.0))
    with pytest.raises(InvalidArgument, match="timeout_s"):
        run(q, c, q.receive(1, -1))
    with pytest.raises(InvalidArgument, match="not a Delivery"):
        run(q, c, q.settle([1, 2], "ack"))
    assert not c.calls
    record = Record(0, None, b"", (), 0, TOPIC, 0)
    with Client("127.0.0.1:1") as client:
        sync = client.queue(GROUP, TOPIC)
        with pytest.raises(InvalidArgument, match="delay_ms"):
            sync.release(Delivery(record, 1, 0), delay_ms=-1)
        with pytest.raises(InvalidArgument, match="invisible_ms"):
            sync.extend(Delivery(record, 1, 0), invisible_ms=10)


def test_the_sdk_checks_the_ranges_the_node_checks() -> None:
    """The SDK refuses a bad argument before sending it, with the limits the node enforces
    (`consumers.queue_validate`, used by the node's edge too): they must not drift apart."""
    from consumers import queue_validate as core
    from flotilla import _queue as sdk

    names = (
        "MIN_INVISIBLE_MS",
        "MAX_INVISIBLE_MS",
        "MAX_DELIVERIES",
        "MAX_DELAY_MS",
        "MAX_RECORDS",
        "MAX_SETTLEMENTS",
        "MAX_IN_FLIGHT",
        "MAX_BACKOFF_STEPS",
    )
    assert {n: getattr(sdk, n) for n in names} == {n: getattr(core, n) for n in names}
