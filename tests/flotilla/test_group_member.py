"""The group member's state machine and the consumer's plans, without a server: each plan is
run by a scripted driver that answers its calls as a coordinator and a partition leader would
(what the wire contract in proto/flotilla.proto says they answer) and records what happened in
order — calls, callbacks — so the order the design promises is checked: a revoked partition is
committed, then on_revoke is called, and only then is it reported gone; an assigned one's
committed offset is looked up before on_assign; a member silent past its session stops reading
and rejoins; a fenced commit commits nothing and the member rejoins; auto-commit sends only what
changed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from flotilla._consumer import Callback, ConsumerCore, ConsumerPlan
from flotilla._core import ClientCore, Failed, Rpc, Sleep
from flotilla._member import MemberState
from flotilla.errors import FencedMember, FlotillaError, InvalidArgument, Unavailable
from proto import flotilla_pb2 as pb
from proto.records import encode_batch

TOPIC = "orders"
PARTITIONS = 4


def metadata(topics: list[str] | None = None) -> pb.MetadataResponse:
    """One node, `__groups` (1 partition) and `orders` (4 partitions, 10 records each, from 2);
    those of `topics` only, if given."""

    def partitions(count: int, high: int, low: int) -> list[pb.PartitionInfo]:
        return [
            pb.PartitionInfo(index=i, leader="n1", replicas=["n1"], high_watermark=high,
                             log_start=low)
            for i in range(count)
        ]  # fmt: skip

    every = [
        pb.TopicInfo(name="__groups", partitions=partitions(1, 0, 0), uid="g"),
        pb.TopicInfo(name=TOPIC, partitions=partitions(PARTITIONS, 12, 2), uid="u1"),
    ]
    return pb.MetadataResponse(
        members=[pb.Member(id="n1", address="127.0.0.1:1", state=pb.ALIVE)],
        topics=[t for t in every if not topics or t.name in topics],
    )


class Script:
    """Answers a plan's calls: `answers[method]` is a function of the request giving the response
    or an error to fail with; `events` records every call and callback in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.committed: dict[tuple[str, int], int] = {}
        self.answers: dict[str, Callable[[Any], Any]] = {
            "Metadata": lambda request: metadata(list(request.topics)),
            "FetchOffsets": lambda request: pb.FetchOffsetsResponse(
                offsets=[
                    pb.PartitionOffset(topic=t, partition=p, offset=o)
                    for (t, p), o in self.committed.items()
                ]
            ),
            "CommitOffsets": self.commit,
            "Fetch": self.fetch,
        }

    def commit(self, request: pb.CommitOffsetsRequest) -> pb.CommitOffsetsResponse:
        for o in request.offsets:
            self.committed[(o.topic, o.partition)] = o.offset
        return pb.CommitOffsetsResponse()

    def fetch(self, request: pb.FetchRequest) -> pb.FetchResponse:
        """Records 2..11 of every partition, in one batch; the value names the place."""
        rows = [(None, f"{request.partition}:{o}".encode(), None, 1) for o in range(2, 12)]
        batch = pb.StoredBatch(base_offset=2, record_count=10, data=encode_batch(rows))
        wanted = [batch] if request.offset < 12 else []
        return pb.FetchResponse(batches=wanted, high_watermark=12, log_start=2, leader=True)

    def run(self, plan: ConsumerPlan[Any]) -> Any:
        outcome: Any = None
        try:
            step = plan.send(None)
            while True:
                if isinstance(step, Rpc):
                    self.events.append((step.method, step.request))
                    answer = self.answers[step.method](step.request)
                    outcome = Failed(answer, "") if isinstance(answer, FlotillaError) else answer
                elif isinstance(step, Callback):
                    self.events.append((step.function.__name__, set(step.partitions)))
                    outcome = step.function(step.partitions)
                else:
                    assert isinstance(step, Sleep)
                    outcome = None
                step = plan.send(outcome)
        except StopIteration as done:
            return done.value

    def calls(self, *methods: str) -> list[tuple[str, Any]]:
        return [(m, r) for m, r in self.events if m in methods]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    for module in ("flotilla._consumer", "flotilla._group_plans"):
        monkeypatch.setattr(f"{module}.time.monotonic", clock)
    return clock


def consumer(
    script: Script, clock: Clock, *, auto_commit: bool = True, start: str = "earliest"
) -> tuple[ConsumerCore, list[str]]:
    core = ClientCore("127.0.0.1:1", 5.0, "all")
    core.router.absorb(metadata())
    state = MemberState(
        "billing", (TOPIC,), session_timeout_ms=10_000, instance_id=None,
        auto_commit_interval_ms=5000, now=clock.now,
    )  # fmt: skip
    wakes: list[str] = []

    def on_assign(partitions: set[tuple[str, int]]) -> None:
        pass

    def on_revoke(partitions: set[tuple[str, int]]) -> None:
        # what a heartbeat sent now (from the heartbeat thread) would report owned
        request = state.heartbeat_request()
        owned = {(tp.topic, tp.partition) for tp in request.owned} if request else set()
        script.events.append(("owned during on_revoke", owned))

    plans = ConsumerCore(
        core, state, start=start, auto_commit=auto_commit, on_assign=on_assign,
        on_revoke=on_revoke, wake=lambda: wakes.append("wake"),
    )  # fmt: skip
    return plans, wakes


def answer_heartbeats(script: Script, assignment: list[int], epoch: int = 1) -> None:
    script.answers["GroupHeartbeat"] = lambda request: pb.GroupHeartbeatResponse(
        member_id=request.member_id or "m-1",
        member_epoch=epoch,
        assignment=[pb.TopicPartition(topic=TOPIC, partition=p) for p in assignment],
        heartbeat_interval_ms=300,
    )


def test_a_join_names_the_topics_and_the_reply_names_the_member(clock: Clock) -> None:
    script = Script()
    plans, _ = consumer(script, clock)
    answer_heartbeats(script, [0, 1])
    assert script.run(plans.heartbeat()) == pytest.approx(0.3)
    ((_, join),) = script.calls("GroupHeartbeat")
    assert (join.member_id, join.member_epoch, list(join.topics)) == ("", 0, [TOPIC])
    assert join.session_timeout_ms == 10_000 and not join.owned
    assert plans.state.identity() == ("m-1", 1)
    script.run(plans.heartbeat())
    second = script.calls("GroupHeartbeat")[1][1]
    assert second.member_id == "m-1" and second.topics_unchanged and not second.topics


def test_assigned_partitions_start_at_their_commit_else_at_start(clock: Clock) -> None:
    script = Script()
    script.committed[(TOPIC, 1)] = 7
    plans, _ = consumer(script, clock, start="earliest")
    answer_heartbeats(script, [0, 1])
    script.run(plans.heartbeat())
    records = script.run(plans.poll(max_records=100, timeout_s=0))
    names = [m for m, _ in script.events]
    assert names.index("FetchOffsets") < names.index("on_assign") < names.index("Fetch")
    assert script.calls("on_assign") == [("on_assign", {(TOPIC, 0), (TOPIC, 1)})]
    # partition 0 from the log start (2), partition 1 from its committed offset (7)
    by_partition = {p: [r.offset for r in records if r.partition == p] for p in (0, 1)}
    assert by_partition == {0: list(range(2, 12)), 1: list(range(7, 12))}
    assert {r.topic for r in records} == {TOPIC}
    assert plans.state.position((TOPIC, 0)) == 12 and plans.state.position((TOPIC, 1)) == 12


def test_start_latest_begins_at_the_high_watermark(clock: Clock) -> None:
    script = Script()
    plans, _ = consumer(script, clock, start="latest")
    answer_heartbeats(script, [3])
    script.run(plans.heartbeat())
    assert script.run(plans.poll(max_records=100, timeout_s=0)) == []
    assert plans.state.position((TOPIC, 3)) == 12


def test_a_revoked_partition_is_committed_then_revoked_then_reported_gone(clock: Clock) -> None:
    script = Script()
    plans, wakes = consumer(script, clock)
    answer_heartbeats(script, [0, 1])
    script.run(plans.heartbeat())
    script.run(plans.poll(max_records=100, timeout_s=0))  # positions 12, 12
    answer_heartbeats(script, [0], epoch=2)  # partition 1 moves away
    script.run(plans.heartbeat())
    # still owned until the poll lets it go: the coordinator gives it to no one else meanwhile
    assert {(t.topic, t.partition) for t in script.calls("GroupHeartbeat")[-1][1].owned} == {
        (TOPIC, 0),
        (TOPIC, 1),
    }
    del script.events[:]
    script.run(plans.poll(max_records=100, timeout_s=0))
    names = [m for m, _ in script.events]
    assert names[:3] == ["CommitOffsets", "on_revoke", "owned during on_revoke"], names
    commit = script.events[0][1]
    assert [(o.topic, o.partition, o.offset) for o in commit.offsets] == [(TOPIC, 1, 12)]
    assert script.events[1][1] == {(TOPIC, 1)}
    # while on_revoke runs, a heartbeat still reports the partition: no one else gets it yet
    assert script.events[2][1] == {(TOPIC, 0), (TOPIC, 1)}
    assert wakes and plans.state.owned() == {(TOPIC, 0)}
    script.run(plans.heartbeat())
    reported = script.calls("GroupHeartbeat")[-1][1]
    assert {(t.topic, t.partition) for t in reported.owned} == {(TOPIC, 0)}


def test_without_auto_commit_a_revocation_commits_nothing(clock: Clock) -> None:
    script = Script()
    plans, _ = consumer(script, clock, auto_commit=False)
    answer_heartbeats(script, [0, 1])
    script.run(plans.heartbeat())
    script.run(plans.poll(max_records=100, timeout_s=0))
    answer_heartbeats(script, [], epoch=2)
    script.run(plans.heartbeat())
    script.run(plans.poll(max_records=100, timeout_s=0))
    assert script.calls("CommitOffsets") == []
    assert script.calls("on_revoke") == [("on_revoke", {(TOPIC, 0), (TOPIC, 1)})]


def test_auto_commit_sends_only_what_changed_and_nothing_when_idle(clock: Clock) -> None:
    script = Script()
    script.committed[(TOPIC, 1)] = 12  # partition 1 is read to its end already
    plans, _ = consumer(script, clock)
    answer_heartbeats(script, [0, 1])
    script.run(plans.heartbeat())
    script.run(plans.poll(max_records=100, timeout_s=0))  # partition 0: 2 -> 12
    clock.now += 5.0
    script.run(plans.poll(max_records=100, timeout_s=0))
    ((_, commit),) = script.calls("CommitOffsets")
    assert [(o.partition, o.offset) for o in commit.offsets] == [(0, 12)]
    clock.now += 5.0  # due again, nothing changed: nothing sent
    script.run(plans.poll(max_records=100, timeout_s=0))
    assert len(script.calls("CommitOffsets")) == 1
    clock.now += 1.0  # an explicit commit of unchanged positions sends nothing either
    script.run(plans.commit(None))
    assert len(script.calls("CommitOffsets")) == 1


def test_a_member_silent_past_its_session_stops_reading_and_rejoins(clock: Clock) -> None:
    script = Script()
    plans, _ = consumer(script, clock)
    answer_heartbeats(script, [0, 1])
    script.run(plans.heartbeat())
    script.run(plans.poll(max_records=100, timeout_s=0))
    # the coordinator stops answering; 10 s after the last acknowledged heartbeat was sent
    script.answers["GroupHeartbeat"] = lambda request: FencedMember("unreachable stand-in")
    clock.now += 10.0
    with pytest.raises(FencedMember, match="session ended"):
        script.run(plans.commit({(TOPIC, 0): 5}))
    assert script.calls("CommitOffsets") == []  # a zombie's commit never leaves
    del script.events[:]
    assert script.run(plans.poll(max_records=100, timeout_s=0)) == []
    # every partition revoked without a commit (it cannot), none fetched, then a fresh join
    assert [m for m, _ in script.events] == ["on_revoke", "owned during on_revoke"]
    assert script.events[0][1] == {(TOPIC, 0), (TOPIC, 1)}
    assert plans.state.identity() == ("", 0) and plans.state.owned() == frozenset()
    answer_heartbeats(script, [2])
    script.run(plans.heartbeat())
    join = script.calls("GroupHeartbeat")[-1][1]
    assert (join.member_id, join.member_epoch, list(join.topics)) == ("", 0, [TOPIC])


def test_records_fetched_across_the_end_of_the_session_are_dropped(clock: Clock) -> None:
    """A member paused (SIGSTOP) while a fetch was out resumes past its session: what that fetch
    brings back must not be delivered, even before its heartbeat thread noticed the session's
    end — the partition may belong to another member by now."""
    script = Script()
    plans, _ = consumer(script, clock)
    answer_heartbeats(script, [0])
    script.run(plans.heartbeat())

    def paused_fetch(request: pb.FetchRequest) -> pb.FetchResponse:
        clock.now += 10.0  # the process stood still while the fetch was out
        return script.fetch(request)

    script.answers["Fetch"] = paused_fetch
    assert script.run(plans.poll(max_records=100, timeout_s=0)) == []
    assert plans.state.lost


def test_a_heartbeat_answer_to_a_member_that_rejoined_since_is_ignored(clock: Clock) -> None:
    state = MemberState(
        "g", (TOPIC,), session_timeout_ms=10_000, instance_id=None,
        auto_commit_interval_ms=5000, now=0,
    )  # fmt: skip
    old = state.heartbeat_request()
    assert old is not None
    state.heartbeat_ok(old, pb.GroupHeartbeatResponse(member_id="m-1", member_epoch=1), 0)
    stale = state.heartbeat_request()
    state.fenced()
    state.rejoin()
    assert stale is not None and stale.member_id == "m-1"
    state.heartbeat_ok(stale, pb.GroupHeartbeatResponse(member_id="m-1", member_epoch=3), 1)
    assert state.identity() == ("", 0)


def test_a_fenced_commit_raises_commits_nothing_and_the_member_rejoins(clock: Clock) -> None:
    script = Script()
    plans, wakes = consumer(script, clock)
    answer_heartbeats(script, [0])
    script.run(plans.heartbeat())
    script.run(plans.poll(max_records=100, timeout_s=0))
    script.answers["CommitOffsets"] = lambda request: FencedMember("partition moved")
    with pytest.raises(FencedMember):
        script.run(plans.commit(None))
    assert script.committed == {} and plans.state.lost
    assert plans.state.heartbeat_request() is None  # no heartbeat until the partitions are dropped
    script.run(plans.poll(max_records=100, timeout_s=0))
    assert script.calls("on_revoke")[-1] == ("on_revoke", {(TOPIC, 0)})
    request = plans.state.heartbeat_request()
    assert request is not None and request.member_id == "" and request.member_epoch == 0
    assert wakes


def test_an_explicit_commit_of_a_partition_not_owned_is_refused_before_sending(
    clock: Clock,
) -> None:
    script = Script()
    plans, _ = consumer(script, clock)
    answer_heartbeats(script, [0])
    script.run(plans.heartbeat())
    script.run(plans.poll(max_records=100, timeout_s=0))
    with pytest.raises(FencedMember, match=r"does not own \[\('orders', 3\)\]"):
        script.run(plans.commit({(TOPIC, 3): 5}))
    with pytest.raises(InvalidArgument, match="offset -1"):
        script.run(plans.commit({(TOPIC, 0): -1}))
    assert script.calls("CommitOffsets") == []
    script.run(plans.commit({(TOPIC, 0): 5}))
    assert script.committed == {(TOPIC, 0): 5}


def test_close_commits_revokes_and_leaves(clock: Clock) -> None:
    script = Script()
    plans, _ = consumer(script, clock)
    answer_heartbeats(script, [0, 1])
    script.run(plans.heartbeat())
    script.run(plans.poll(max_records=100, timeout_s=0))
    del script.events[:]
    script.run(plans.close())
    names = [m for m, _ in script.events]
    assert names == ["CommitOffsets", "on_revoke", "owned during on_revoke", "GroupHeartbeat"]
    leave = script.events[-1][1]
    assert (leave.member_id, leave.member_epoch, list(leave.owned)) == ("m-1", -1, [])
    assert script.run(plans.close()) is None and len(script.events) == 4  # once
    with pytest.raises(InvalidArgument, match="is closed"):
        script.run(plans.poll(max_records=1, timeout_s=0))
    with pytest.raises(InvalidArgument, match="is closed"):
        script.run(plans.commit(None))


def test_a_static_member_leaves_with_epoch_minus_two() -> None:
    state = MemberState(
        "g", (TOPIC,), session_timeout_ms=10_000, instance_id="host-7",
        auto_commit_interval_ms=5000, now=0,
    )  # fmt: skip
    join = state.heartbeat_request()
    assert join is not None and join.instance_id == "host-7"
    state.heartbeat_ok(join, pb.GroupHeartbeatResponse(member_id="m-9", member_epoch=1), 0)
    leave = state.leave_request()
    assert leave is not None and leave.member_epoch == -2 and leave.instance_id == "host-7"


def test_polls_start_at_a_different_partition_each_time() -> None:
    state = MemberState(
        "g", (TOPIC,), session_timeout_ms=10_000, instance_id=None,
        auto_commit_interval_ms=5000, now=0,
    )  # fmt: skip
    join = state.heartbeat_request()
    assert join is not None
    reply = pb.GroupHeartbeatResponse(
        member_id="m", member_epoch=1,
        assignment=[pb.TopicPartition(topic=TOPIC, partition=p) for p in range(3)],
    )  # fmt: skip
    state.heartbeat_ok(join, reply, 0)
    state.add({(TOPIC, p): 0 for p in range(3)}, {})
    firsts = {state.fetch_order()[0] for _ in range(3)}
    assert firsts == {(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)}


def test_the_asyncio_consumer_awaits_coroutine_callbacks(clock: Clock) -> None:
    from flotilla.consumer import AsyncConsumer

    script = Script()
    seen: list[set[tuple[str, int]]] = []

    async def on_assign(partitions: set[tuple[str, int]]) -> None:
        await asyncio.sleep(0)
        seen.append(partitions)

    async def call(rpc: Rpc) -> Any:
        return script.answers[rpc.method](rpc.request)

    async def main() -> None:
        core = ClientCore("127.0.0.1:1", 5.0, "all")
        core.router.absorb(metadata())
        consumer = AsyncConsumer(core, call, "billing", [TOPIC], on_assign=on_assign)
        answer_heartbeats(script, [2])
        await consumer._run(consumer._core.heartbeat())
        await consumer._run(consumer._core.reconcile())
        assert consumer.assignment() == {(TOPIC, 2)}

    asyncio.run(main())
    assert seen == [{(TOPIC, 2)}]


def test_a_callback_that_raises_still_lets_close_leave(clock: Clock) -> None:
    """The sync driver throws a callback's exception into the plan: close()'s cleanup (drop,
    leave) runs, then the caller sees the exception."""
    from flotilla.consumer import Consumer

    script = Script()
    calls: list[str] = []

    def on_revoke(partitions: set[tuple[str, int]]) -> None:
        raise RuntimeError("the application's bug")

    def call(rpc: Rpc) -> Any:
        calls.append(rpc.method)
        return script.answers[rpc.method](rpc.request)

    core = ClientCore("127.0.0.1:1", 5.0, "all")
    core.router.absorb(metadata())
    consumer = Consumer(core, call, "billing", [TOPIC], on_revoke=on_revoke, auto_commit=False)
    answer_heartbeats(script, [1])
    consumer._run(consumer._core.heartbeat())
    consumer._run(consumer._core.reconcile())
    with pytest.raises(RuntimeError, match="application's bug"):
        consumer.close()
    assert calls[-1] == "GroupHeartbeat" and consumer.assignment() == set()
    assert consumer._core.state.closed


def test_a_revocation_whose_commit_fails_still_lets_the_partition_go(clock: Clock) -> None:
    """The coordinator is away when a partition moves: poll does not fail; the partition is
    revoked and reported gone anyway (its next owner repeats from the last commit)."""
    script = Script()
    plans, _ = consumer(script, clock)
    answer_heartbeats(script, [0, 1])
    script.run(plans.heartbeat())
    script.run(plans.poll(max_records=100, timeout_s=0))
    answer_heartbeats(script, [0], epoch=2)
    script.run(plans.heartbeat())

    def away(request: object) -> Unavailable:
        clock.now += 1.0  # each attempt takes a second, until the commit gives up
        return Unavailable("coordinator away")

    script.answers["CommitOffsets"] = away
    script.run(plans.poll(max_records=100, timeout_s=0))
    assert script.calls("on_revoke") == [("on_revoke", {(TOPIC, 1)})]
    assert plans.state.owned() == {(TOPIC, 0)}
