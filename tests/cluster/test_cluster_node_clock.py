"""The node's time-based decisions on a fake clock: a `Node` built (not started) with a
`FakeTicker` decides when to reconcile, apply retention and probe, when a dead member is
replaced, how long an opened replica counts as settling and how long the graceful hand-off
tries, and its steward when to give a group back to its preferred leader, all on that ticker's
clock: only `advance` makes time pass, and no test sleeps to let it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import hand_driven_host

from cluster import opener as opener_module
from cluster import partitions as partitions_module
from cluster import steward as steward_module
from cluster.clean_shutdown import take_clean_shutdown
from cluster.clock import FakeTicker
from cluster.config import NodeConfig
from cluster.controller import TopicSpec
from cluster.host_ticks import BEHIND_ROUNDS
from cluster.multiraft import BUSY_CAMPAIGNS, MAX_ROUND_MESSAGES, MultiRaft
from cluster.node import Node
from cluster.partitions import RECONCILE_ANYWAY_S, RECONCILE_EVERY_S, PartitionManager
from cluster.placement import Candidate, place
from cluster.replica import Replica
from cluster.steward import GroupSteward
from membership import Member
from membership.codec import encode
from membership.messages import Gossip
from membership.types import Alive, Dead, Leave
from proto import peer_pb2
from raft.codec import encode_message
from raft.types import (
    AppendRequest,
    AppendResponse,
    Configuration,
    Role,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

TICK_S = PartitionManager.interval_s  # 0.2 s


def _node(tmp_path: Path, **config: object) -> tuple[Node, FakeTicker]:
    ticker = FakeTicker(TICK_S)
    node = Node(NodeConfig(node_id="n1", data_dir=str(tmp_path / "n1"), **config), ticker)  # type: ignore[arg-type]
    Path(node.partitions_dir).mkdir(parents=True, exist_ok=True)
    return node, ticker


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"no {what} within {timeout_s} s"
        await asyncio.sleep(0.001)


async def _close(node: Node) -> None:
    await node.multiraft.stop()
    await node.gossip.stop()
    await node.transport.close()
    node.data_dir_lock.release()  # as the process ending would


def test_the_partition_managers_intervals_run_on_its_tickers_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass per tick; reconciling (every RECONCILE_EVERY_S, when something it depends on
    changed, else every RECONCILE_ANYWAY_S), retention (every retention_check_s) and the probe of
    unplaced followers (every probe_interval_s) come on the first tick past their interval,
    counted on the ticker's clock."""
    ran: dict[str, list[int]] = {"reconcile": [], "retention": [], "probe": []}

    async def scenario() -> None:
        node, ticker = _node(tmp_path, retention_check_s=1.1)
        node.topics = {"t": TopicSpec("t", 1, 1, assignment=(("n2",),))}
        manager = node.partitions
        reconcile_local = manager.reconcile_local

        async def reconciling() -> None:
            ran["reconcile"].append(ticker.ticks)
            await reconcile_local()

        async def retention(*args: object) -> None:
            ran["retention"].append(ticker.ticks)

        async def probe() -> None:
            ran["probe"].append(ticker.ticks)

        monkeypatch.setattr(manager, "reconcile_local", reconciling)
        monkeypatch.setattr(partitions_module, "apply_retention", retention)
        monkeypatch.setattr(node.collector, "probe_unplaced", probe)
        monkeypatch.setattr(partitions_module, "RECONCILE_ANYWAY_S", 20.0)
        node.collector.probe_interval_s = 2.5
        task = asyncio.get_running_loop().create_task(manager.run())
        try:
            await asyncio.sleep(0)  # the task starts the ticker
            for tick in range(1, 161):
                if tick == 30:  # a replica retired here: the next comparison is due
                    node.opener.retired["gone/0"] = "uid"
                if tick == 70:  # a replica queued, then opened from the queue: nothing is due
                    node.opener.queue(node.topics["t"], 0, Configuration())
                ticker.advance(1)
                await _until(lambda tick=tick: manager.passes == tick, f"pass {tick}")  # type: ignore[misc]
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await _close(node)

    asyncio.run(scenario())
    # at 0.2 s (the topics were new); not at 5.4 s (nothing changed since); at 10.6 s, the
    # first tick more than 5 s on after the retirement at 6.0 s; then not until 31.4 s, more
    # than RECONCILE_ANYWAY_S (here 20 s) after the last
    assert (RECONCILE_EVERY_S, RECONCILE_ANYWAY_S) == (5.0, 60.0)
    assert ran["reconcile"] == [1, 53, 157]
    # 1.2 s, 2.4 s, ...: each > 1.1 s on
    assert [t for t in ran["retention"] if t <= 30] == [6, 12, 18, 24, 30]
    assert [t for t in ran["probe"] if t <= 30] == [13, 26]  # 2.6 s, 5.2 s


def test_comparing_many_partitions_with_the_topics_lets_the_loop_run_between_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`reconcile_local` walks every partition of every topic: at 100,000 partitions that held
    the event loop for a few hundred milliseconds. It lets the loop's other work (ticks, SWIM)
    run every `YIELD_EVERY_PARTITIONS` partitions."""
    monkeypatch.setattr(partitions_module, "YIELD_EVERY_PARTITIONS", 3)
    events: list[str] = []

    async def scenario() -> None:
        node, _ = _node(tmp_path)
        node.topics = {"t": TopicSpec("t", 10, 1, assignment=(("n9",),) * 10)}
        knows = node.opener.knows

        def knowing(group: str) -> bool:
            events.append("k")
            return knows(group)

        monkeypatch.setattr(node.opener, "knows", knowing)

        async def other_work() -> None:
            while True:
                events.append("o")
                await asyncio.sleep(0)

        other = asyncio.get_running_loop().create_task(other_work())
        try:
            await node.partitions.reconcile_local()
        finally:
            other.cancel()
            await _close(node)

    asyncio.run(scenario())
    looked = "".join(events).strip("o")
    assert looked.count("k") == 10, looked
    assert "kkkk" not in looked and "o" in looked, looked  # never more than 3 in one go


def _gossip(sender: str, *updates: object) -> peer_pb2.SwimPacket:
    message = Gossip(sender, "127.0.0.1:1", tuple(updates))  # type: ignore[arg-type]
    return peer_pb2.SwimPacket(
        from_node=sender, from_address="127.0.0.1:1", payload=encode(message)
    )


def test_a_dead_member_stays_a_placement_candidate_for_replace_after_on_the_nodes_clock(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        node, ticker = _node(tmp_path, replace_after_s=3.0)
        ticker.start(lambda at: None)
        try:
            n2 = Member("n2", "127.0.0.1:1")
            node.gossip.receive(_gossip("n3", Alive(n2, 1)))
            assert "n2" in {c.node_id for c in node.members.placement_candidates()}
            ticker.advance(5)  # n2 dies at 1.0 s
            node.gossip.receive(_gossip("n3", Dead("n2", 1, "n3")))
            assert node.gossip.swim.member_state("n2") is not None
            assert "n2" not in {m.id for m in node.gossip.swim.live_members()}
            ticker.advance(14)  # 3.8 s: dead for 2.8 s, not yet replace_after
            assert "n2" in {c.node_id for c in node.members.placement_candidates()}
            ticker.advance(2)  # 4.2 s: dead for 3.2 s
            assert "n2" not in {c.node_id for c in node.members.placement_candidates()}
        finally:
            await _close(node)

    asyncio.run(scenario())


def test_a_member_that_left_gracefully_stays_a_candidate_for_replace_left_after(
    tmp_path: Path,
) -> None:
    """A graceful leave is a restart (a Kafka broker's controlled shutdown): it moves no
    replica for `replace_left_after_s`, while a death does after `replace_after_s`; and the
    member's return ends the wait."""

    async def scenario() -> None:
        node, ticker = _node(tmp_path, replace_after_s=3.0, replace_left_after_s=10.0)
        ticker.start(lambda at: None)
        try:
            n2, n4 = Member("n2", "127.0.0.1:1"), Member("n4", "127.0.0.1:2")
            node.gossip.receive(_gossip("n3", Alive(n2, 1), Alive(n4, 1)))
            ticker.advance(5)  # at 1.0 s n2 leaves (SIGTERM) and n4 dies
            node.gossip.receive(_gossip("n3", Leave("n2", 1), Dead("n4", 1, "n3")))
            assert node.gossip.swim.member_state("n2") is not None
            assert "n2" not in {m.id for m in node.gossip.swim.live_members()}
            ticker.advance(16)  # 4.2 s: gone 3.2 s, past replace_after_s
            candidates = {c.node_id for c in node.members.placement_candidates()}
            assert "n4" not in candidates and "n2" in candidates
            ticker.advance(44)  # 13.0 s: left 12 s ago
            assert "n2" not in {c.node_id for c in node.members.placement_candidates()}
            node.gossip.receive(_gossip("n3", Alive(n2, 2)))  # back: a candidate again
            assert "n2" in {c.node_id for c in node.members.placement_candidates()}
        finally:
            await _close(node)

    asyncio.run(scenario())


def test_an_opened_replica_counts_as_settling_for_settling_max_s_on_the_nodes_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(opener_module, "OPEN_BATCH_REPLICAS", 4)
    monkeypatch.setattr(opener_module, "SETTLING_LIMIT", 4)

    async def scenario() -> None:
        node, ticker = _node(tmp_path)
        ticker.start(lambda at: None)
        assignment = tuple(("n1", "n2", "n3") for _ in range(12))
        node.topics = {"t": TopicSpec("t", 12, 3, assignment=assignment)}
        try:
            await node.partitions.reconcile_local()
            await node.opener.open_pending()
            assert len(node.multiraft.replicas) == 4  # one batch, then the limit holds
            ticks_per_settling = round(opener_module.SETTLING_MAX_S / TICK_S)  # 50
            ticker.advance(ticks_per_settling)  # 10.0 s: not more than SETTLING_MAX_S yet
            await node.opener.open_pending()
            assert len(node.multiraft.replicas) == 4
            ticker.advance(1)  # 10.2 s: the first batch no longer counts as settling
            await node.opener.open_pending()
            assert len(node.multiraft.replicas) == 8
        finally:
            await _close(node)

    asyncio.run(scenario())


def test_the_graceful_hand_off_gives_up_after_four_election_timeouts_on_the_nodes_clock(
    tmp_path: Path,
) -> None:
    """A leader with no live voter to hand its group to: the stop tries until four election
    timeouts have passed on the node's clock, however long that takes in real time."""

    async def scenario() -> None:
        node, ticker = _node(tmp_path, tick_ms=10, election_ticks=5)  # election timeout 50 ms
        node.topics = {"solo": TopicSpec("solo", 1, 1, assignment=(("n1",),))}
        manager = asyncio.get_running_loop().create_task(node.partitions.run())
        await asyncio.sleep(0)  # the task starts the ticker
        ticker.advance(1)
        await _until(lambda: "solo/0" in node.multiraft.replicas, "the replica")
        node.multiraft.start()
        replica = node.multiraft.replicas["solo/0"]
        await _until(lambda: replica.node.role is Role.LEADER, "its election")
        stopping = asyncio.get_running_loop().create_task(node.stop())
        # ten real election timeouts: a hand-off on the real clock would have given up, and the
        # node would be leaving the membership (the next step of a graceful stop)
        loop = asyncio.get_running_loop()
        held_until = loop.time() + 10 * node.config.election_timeout_ms / 1000
        while loop.time() < held_until:
            assert not node.gossip.swim.leaving, "the hand-off gave up before its time"
            await asyncio.sleep(0.01)
        assert replica.node.role is Role.LEADER and not stopping.done()
        # 4 election timeouts = 0.2 s = one tick; one more passes the deadline
        ticker.advance(2)
        await _until(lambda: node.gossip.swim.leaving, "the hand-off to give up")
        await stopping
        manager.cancel()  # the node's own stop cancels the task it started; this one is ours
        with pytest.raises(asyncio.CancelledError):
            await manager

    asyncio.run(scenario())


async def _lead(multiraft: MultiRaft, sent: list[tuple[str, object]]) -> Replica:
    """Makes the hand-driven host's replica of t/0 (voters a, b, c; this is b) the leader, with
    a answering and caught up: a's vote, then its acknowledgement of the leader's first append."""
    replica = multiraft.replicas["t/0"]
    for _ in range(100):  # the election timeout is at most 2 * election_ticks
        if any(isinstance(m, VoteRequest) for _, m in sent):
            break
        multiraft.tick(0.0)
        await multiraft.run_round()
    # at term 0 the campaign is an election at once, without a pre-vote
    assert [m.pre_vote for _, m in sent if isinstance(m, VoteRequest)] == [False, False], sent
    vote = VoteResponse(1, "a", "b", True, False)
    multiraft.deliver("a", [("t/0", encode_message(vote))])
    await multiraft.run_round()
    assert replica.node.role is Role.LEADER, sent
    [append] = [m for to, m in sent if to == "a" and isinstance(m, AppendRequest)]
    acked = AppendResponse(1, "a", "b", append.prev_index + len(append.entries))
    multiraft.deliver("a", [("t/0", encode_message(acked))])
    await multiraft.run_round()
    assert replica.node.is_caught_up("a") and replica.node.recently_active("a")
    return replica


def _balancing_host(
    tmp_path: Path,
) -> tuple[FakeTicker, MultiRaft, GroupSteward, list[tuple[str, object]]]:
    """A hand-driven host "b" of t/0 (voters a, b, c; preferred leader a) and its steward,
    balancing after 1 s on a fake ticker's clock, every member alive since the clock's 0."""
    ticker = FakeTicker(TICK_S)
    ticker.start(lambda at: None)
    multiraft, _, sent = hand_driven_host(tmp_path, "t/0")
    steward = GroupSteward(
        multiraft,
        balance_after_s=1.0,
        election_timeout_s=0.5,
        is_live=lambda member: True,
        alive_since={"a": 0.0, "b": 0.0, "c": 0.0}.get,
        clock=ticker.now,
    )
    return ticker, multiraft, steward, sent


async def _leading(
    multiraft: MultiRaft, steward: GroupSteward, sent: list[tuple[str, object]]
) -> tuple[list[Candidate], dict[str, TopicSpec]]:
    """b leads t/0 (`_lead`), and its steward knows it; the candidates and topics t/0 is placed
    by (preferred leader a)."""
    steward.note_roles({await _lead(multiraft, sent)})
    candidates = [Candidate(member) for member in ("a", "b", "c")]
    return candidates, {"t": TopicSpec("t", 1, 3, assignment=(("a", "b", "c"),))}


async def _handed_to_a_at_the_fifth_tick(
    ticker: FakeTicker,
    multiraft: MultiRaft,
    steward: GroupSteward,
    sent: list[tuple[str, object]],
    candidates: list[Candidate],
    topics: dict[str, TopicSpec],
) -> None:
    """Six passes of the steward a tick apart: t/0 is handed to a (a TimeoutNow) at the sixth,
    five ticks (1 s) on, and not one pass before."""
    sent.clear()
    for tick in range(6):
        steward.reconcile(candidates, topics, 1)
        await multiraft.run_round()
        handed = [to for to, m in sent if isinstance(m, TimeoutNow)]
        assert handed == (["a"] if tick == 5 else []), (tick, sent)
        ticker.advance(1)


def test_leader_balancing_waits_balance_after_s_on_the_stewards_clock(tmp_path: Path) -> None:
    """This node (b) leads t/0, whose preferred leader is a: it hands a the group once a has
    been alive, and b has led, `balance_after_s` on the steward's clock (a ticker's), and not
    before, however fast the test runs."""

    async def scenario() -> None:
        ticker, multiraft, steward, sent = _balancing_host(tmp_path)
        try:
            candidates, topics = await _leading(multiraft, steward, sent)  # b leads since 0.0
            # at 1.0 s (tick 5) a and b have waited balance_after_s: not one tick before
            await _handed_to_a_at_the_fifth_tick(
                ticker, multiraft, steward, sent, candidates, topics
            )
        finally:
            await multiraft.stop()

    asyncio.run(scenario())


def test_leader_balancing_hands_one_member_a_bounded_number_of_groups_at_once(
    tmp_path: Path,
) -> None:
    """With BALANCE_IN_FLIGHT_PER_MEMBER transfers to a begun and unfinished (their groups still
    led here, begun within an election timeout), another transfer to a that is due waits; it
    starts once those are over (here: an election timeout on, abandoned)."""

    async def scenario() -> None:
        ticker, multiraft, steward, sent = _balancing_host(tmp_path)
        try:
            candidates, topics = await _leading(multiraft, steward, sent)
            ticker.advance(int(2.0 / TICK_S))  # the transfer is due
            # the others began two ticks short of an election timeout ago
            began = ticker.now() - steward.election_timeout_s + 2 * TICK_S
            steward._handing = {
                f"other/{n}": ("a", began)
                for n in range(steward_module.BALANCE_IN_FLIGHT_PER_MEMBER)
            }
            sent.clear()
            for _ in range(2):
                steward.reconcile(candidates, topics, 1)
                await multiraft.run_round()
                ticker.advance(1)
            assert not [m for _, m in sent if isinstance(m, TimeoutNow)], sent
            steward.reconcile(candidates, topics, 1)
            await multiraft.run_round()
            assert [to for to, m in sent if isinstance(m, TimeoutNow)] == ["a"], sent
            assert set(steward._handing) == {"t/0"}
        finally:
            await multiraft.stop()

    asyncio.run(scenario())


def test_leader_balancing_waits_while_the_nodes_rounds_are_behind(tmp_path: Path) -> None:
    """A transfer that is due waits while the host's rounds are behind their inputs (a round
    left messages for the next: `MultiRaft.behind`), and starts once BEHIND_ROUNDS rounds have
    kept up."""

    async def scenario() -> None:
        ticker, multiraft, steward, sent = _balancing_host(tmp_path)
        try:
            candidates, topics = await _leading(multiraft, steward, sent)
            ticker.advance(int(2.0 / TICK_S))  # the transfer is due
            # more messages (for a group not hosted here: dropped) than a round steps
            noise = encode_message(VoteResponse(1, "a", "b", True, False))
            multiraft.deliver("a", [("x/0", noise)] * (MAX_ROUND_MESSAGES + 1))
            await multiraft.run_round()
            assert multiraft.behind()
            sent.clear()
            rounds = 0
            while multiraft.behind():
                steward.reconcile(candidates, topics, 1)
                await multiraft.run_round()
                assert not [m for _, m in sent if isinstance(m, TimeoutNow)], rounds
                rounds += 1
            assert rounds == BEHIND_ROUNDS
            steward.reconcile(candidates, topics, 1)
            await multiraft.run_round()
            assert [to for to, m in sent if isinstance(m, TimeoutNow)] == ["a"], sent
        finally:
            await multiraft.stop()

    asyncio.run(scenario())


def test_leader_balancing_waits_while_the_node_is_still_opening_replicas(tmp_path: Path) -> None:
    """A transfer that is due waits while the node is still opening the replicas it was given
    (a topic of thousands of partitions being created: `ReplicaOpener.busy`), and starts once
    it is not."""

    async def scenario() -> None:
        ticker, multiraft, steward, sent = _balancing_host(tmp_path)
        busy = {"now": True}
        steward.opening = lambda: busy["now"]
        try:
            candidates, topics = await _leading(multiraft, steward, sent)
            ticker.advance(int(2.0 / TICK_S))  # the transfer is due
            sent.clear()
            for _ in range(5):
                steward.reconcile(candidates, topics, 1)
                await multiraft.run_round()
                ticker.advance(1)
            assert not [m for _, m in sent if isinstance(m, TimeoutNow)], sent
            assert list(steward.unsettled) == ["t/0"]  # still to be balanced
            busy["now"] = False
            steward.reconcile(candidates, topics, 1)
            await multiraft.run_round()
            assert [to for to, m in sent if isinstance(m, TimeoutNow)] == ["a"], sent
        finally:
            await multiraft.stop()

    asyncio.run(scenario())


def test_leader_balancing_waits_while_the_preferred_member_still_asks_for_votes(
    tmp_path: Path,
) -> None:
    """A transfer to a that is due waits while a's replicas ask this node for votes of their
    own accord at a busy rate (a node back from a restart asks who leads, with a pre-vote, as
    each of its replicas opens: hundreds a second): until `balance_after_s` after the last
    second with `BUSY_CAMPAIGNS` of them, on the steward's clock. Fewer (one replica that keeps
    asking) do not hold it."""

    async def scenario() -> None:
        ticker, multiraft, steward, sent = _balancing_host(tmp_path)
        multiraft.ticker = ticker  # one clock for both, as a node's
        steward.campaigned_at = multiraft.campaigned_at.get
        probe = encode_message(VoteRequest(1, "a", "b", 1, 1, pre_vote=True))  # who leads t/0?
        try:
            candidates, topics = await _leading(multiraft, steward, sent)  # term 1
            ticker.advance(int(2.0 / TICK_S))  # the transfer is due
            multiraft.deliver("a", [("t/0", probe)] * (BUSY_CAMPAIGNS - 1))
            await multiraft.run_round()
            assert multiraft.campaigned_at == {}  # not busy
            asked_at = ticker.now()
            multiraft.deliver("a", [("t/0", probe)])  # the same second: busy
            await multiraft.run_round()
            assert multiraft.campaigned_at == {"a": asked_at}
            # balance_after_s (1 s, 5 ticks) after a last asked: not one tick before
            await _handed_to_a_at_the_fifth_tick(
                ticker, multiraft, steward, sent, candidates, topics
            )
        finally:
            await multiraft.stop()

    asyncio.run(scenario())


def test_only_a_busy_rate_of_own_campaigns_counts(tmp_path: Path) -> None:
    """Vote requests a transfer started do not count, however many; `BUSY_CAMPAIGNS` of a
    member's own within a second do; as many spread over more than a second do not."""

    async def scenario() -> None:
        ticker, multiraft, _, _ = _balancing_host(tmp_path)
        multiraft.ticker = ticker
        try:
            transfer = encode_message(VoteRequest(5, "c", "b", 9, 4, transfer=True))
            multiraft.deliver("c", [("t/0", transfer)] * BUSY_CAMPAIGNS)
            await multiraft.run_round()
            assert multiraft.campaigned_at == {}
            campaign = encode_message(VoteRequest(6, "a", "b", 9, 4))
            half = BUSY_CAMPAIGNS // 2
            multiraft.deliver("a", [("t/0", campaign)] * half)
            await multiraft.run_round()
            ticker.advance(int(1.0 / TICK_S))  # a second later: counted anew
            multiraft.deliver("a", [("t/0", campaign)] * (BUSY_CAMPAIGNS - half))
            await multiraft.run_round()
            assert multiraft.campaigned_at == {}
            multiraft.deliver("a", [("t/0", campaign)] * half)
            await multiraft.run_round()
            assert multiraft.campaigned_at == {"a": ticker.now()}
        finally:
            await multiraft.stop()

    asyncio.run(scenario())


def test_a_pass_looks_at_groups_per_pass_groups_in_turn_and_places_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass looks at `GROUPS_PER_PASS` unsettled groups at most, the longest unvisited
    first, and computes a group's placement once while the candidates and topics stay the same
    (a node electing 20,000 leaderships spent most of its CPU placing every one of them again,
    five times a second)."""
    monkeypatch.setattr(steward_module, "GROUPS_PER_PASS", 2)
    placed: list[str] = []

    def placing(key: str, candidates: list[Candidate], factor: int) -> list[str]:
        placed.append(key)
        return place(key, candidates, factor)

    monkeypatch.setattr(steward_module, "place", placing)

    async def scenario() -> None:
        ticker, multiraft, steward, sent = _balancing_host(tmp_path)
        try:
            candidates, topics = await _leading(multiraft, steward, sent)
            steward.reconcile(candidates, topics, 1)  # not due yet: t/0 stays unsettled
            assert list(steward.unsettled) == ["t/0"] and placed == ["t/0"]
            # two groups ahead of it in line (no longer hosted here: each leaves when looked at)
            steward.unsettled = {"x/0": None, "y/0": None, **steward.unsettled}
            ticker.advance(int(2.0 / TICK_S))  # the transfer is due
            sent.clear()
            steward.reconcile(candidates, topics, 1)
            await multiraft.run_round()
            assert not [m for _, m in sent if isinstance(m, TimeoutNow)]  # t/0 not reached
            assert list(steward.unsettled) == ["t/0"]
            steward.reconcile(candidates, topics, 1)
            await multiraft.run_round()
            assert [to for to, m in sent if isinstance(m, TimeoutNow)] == ["a"], sent
            assert placed == ["t/0"]  # once, for three passes
        finally:
            await multiraft.stop()

    asyncio.run(scenario())


def test_a_clean_stop_leaves_a_marker_the_next_start_takes_to_open_its_logs_as_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop that closed every log (each flushed) names their groups in CLEAN_SHUTDOWN; the
    next process takes the marker (removing it, so its own crash is never taken for a clean
    stop) and opens each of those logs once without recovery's fsync."""
    opened: dict[str, bool] = {}
    real_open = Replica.open

    def spying_open(**kwargs: object) -> Replica:
        opened[f"{kwargs['topic']}/{kwargs['partition']}"] = bool(kwargs.get("durable"))
        return real_open(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Replica, "open", staticmethod(spying_open))
    topics = {"t": TopicSpec("t", 2, 1, assignment=(("n1",), ("n1",)))}

    async def scenario() -> None:
        node, ticker = _node(tmp_path)
        ticker.start(lambda at: None)
        node.topics = topics
        await node.partitions.reconcile_local()
        await node.opener.open_pending()
        assert set(node.multiraft.replicas) == {"t/0", "t/1"} and not any(opened.values())
        await node.stop(graceful=False)
        marker = Path(node.clean_shutdown_path)
        assert set(marker.read_text().split("\n")) == {"t/0", "t/1"}

        again, ticker = _node(tmp_path)
        ticker.start(lambda at: None)
        again.opener.cleanly_closed = take_clean_shutdown(again.config.data_dir)
        assert not marker.exists()
        again.topics = topics
        opened.clear()
        await again.partitions.reconcile_local()
        await again.opener.open_pending()
        assert opened == {"t/0": True, "t/1": True} and not again.opener.cleanly_closed
        await _close(again)
        assert not marker.exists()  # only `Node.stop` writes it
        assert take_clean_shutdown(again.config.data_dir) == set()

    asyncio.run(scenario())
