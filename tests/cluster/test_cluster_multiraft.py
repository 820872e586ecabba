"""The MultiRaft host on one node, driven round by round: ticking, quiescence, and when a
Ready's messages may leave before the round's disk work."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

from harness import hand_driven_host, open_replica

from cluster.clock import MAX_BEHIND_TICKS, FakeTicker
from cluster.multiraft import BEHIND_FRAMES, MAX_ROUND_MESSAGES, MultiRaft, Proposal
from cluster.replica import Replica, Waiter
from cluster.tick_wheel import MAX_TICKS_A_ROUND
from proto.records import encode_batch
from raft.codec import decode_message, encode_message
from raft.config import RaftConfig
from raft.core import RaftNode
from raft.errors import ProposalDropped
from raft.log import MemoryLog
from raft.types import (
    AppendRequest,
    AppendResponse,
    Configuration,
    Heartbeat,
    HeartbeatResponse,
    Message,
    Role,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from storage import FileHandles, HardState, LogConfig, StateJournal

GROUP = "t/0"


def _open(tmp_path: Path, group: str) -> Replica:
    return open_replica(tmp_path, group)


def _host(tmp_path: Path) -> tuple[MultiRaft, Replica, list[tuple[str, object]]]:
    return hand_driven_host(tmp_path, GROUP)


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Waits for the driver (it runs its rounds as tasks) to make `condition` true."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"no {what} within {timeout_s} s"
        await asyncio.sleep(0.001)


def test_a_follower_quiesced_in_a_round_with_ticks_due_stays_quiesced(tmp_path: Path) -> None:
    """On a fake clock: the driver runs its own rounds, and only the test makes time pass."""

    async def scenario() -> None:
        ticker = FakeTicker(0.05)
        sent: list[tuple[str, object]] = []
        multiraft = MultiRaft(
            "b",
            lambda to, group, parts: sent.append((to, decode_message(b"".join(parts)))),
            0.05,
            StateJournal(tmp_path / "journal"),
            ticker=ticker,
        )
        replica = _open(tmp_path, GROUP)
        multiraft.add(replica)
        multiraft.start()
        try:
            # the leader's quiescing heartbeat arrives in the same round as a tick
            heartbeat = Heartbeat(1, "a", "b", 0, quiesce=True, lease_tick=7)
            multiraft.deliver("a", [(GROUP, encode_message(heartbeat))])
            ticker.advance(1)
            await _until(lambda: ("a", HeartbeatResponse(1, "b", "a", 7)) in sent, "answer")
            assert replica.node.quiesced and multiraft.active_count == 0
            # later ticks leave it alone: a quiesced follower never times out and campaigns
            for lease_tick in range(8, 8 + 5 * RaftConfig().election_ticks):
                ticker.advance(1)
                # another quiescing heartbeat, answered after the tick's round: a barrier
                heartbeat = Heartbeat(1, "a", "b", 0, quiesce=True, lease_tick=lease_tick)
                multiraft.deliver("a", [(GROUP, encode_message(heartbeat))])
                answer = ("a", HeartbeatResponse(1, "b", "a", lease_tick))
                await _until(lambda answer=answer: answer in sent, "answer")  # type: ignore[misc]
            assert replica.node.quiesced and replica.node.leader_id == "a"
            assert not any(isinstance(m, VoteRequest) for _, m in sent)
        finally:
            await multiraft.stop()

    asyncio.run(scenario())


def test_messages_wait_for_the_disk_only_when_their_ready_writes(tmp_path: Path) -> None:
    async def scenario() -> None:
        multiraft, voting, sent = _host(tmp_path)
        multiraft.add(_open(tmp_path, "t/1"))
        await multiraft.run_round()
        loop = asyncio.get_running_loop()
        gate = asyncio.Event()
        # hold the storage thread until the test has looked at what was sent
        blocked = asyncio.ensure_future(
            multiraft.run_storage(
                lambda: asyncio.run_coroutine_threadsafe(gate.wait(), loop).result()
            )
        )
        # one round: a vote in t/0 (must be durable before it is sent) and a pre-vote in t/1
        # (changes nothing durable, so its answer need not wait for t/0's disk work)
        multiraft.deliver(
            "a",
            [
                (GROUP, encode_message(VoteRequest(1, "a", "b", 0, 0))),
                ("t/1", encode_message(VoteRequest(1, "a", "b", 0, 0, pre_vote=True))),
            ],
        )
        round_task = asyncio.ensure_future(multiraft.run_round())
        deadline = loop.time() + 30  # the round sends t/1's answer, then waits on the disk
        while not sent and not round_task.done() and loop.time() < deadline:
            await asyncio.sleep(0.005)
        assert not round_task.done()
        assert sent == [("a", VoteResponse(1, "b", "a", True, True))]  # t/1's answer only
        gate.set()
        await blocked
        await round_task
        assert ("a", VoteResponse(1, "b", "a", True, False)) in sent
        assert voting.node.vote == "a" and multiraft.journal.load(GROUP).vote == "a"
        await multiraft.stop()

    asyncio.run(scenario())


def test_only_rounds_with_disk_work_report_their_duration(tmp_path: Path) -> None:
    async def scenario() -> None:
        multiraft, replica, sent = _host(tmp_path)
        durations: list[float] = []
        multiraft.on_disk = durations.append
        await multiraft.run_round()
        durations.clear()  # opening the replica's first Ready may write; start from here
        # a leader of a newer term: the term must be durable before the answer leaves
        multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 0)))])
        await multiraft.run_round()
        assert len(durations) == 1 and durations[0] > 0
        # the same leader again, and ticks: nothing to write, so nothing to report (the fsync
        # histogram counts group commits, not rounds)
        for _ in range(5):
            multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 0)))])
            multiraft.tick(0.0)  # as the ticker would (the host is driven by hand)
            await multiraft.run_round()
        assert len(durations) == 1
        assert sum(isinstance(m, HeartbeatResponse) for _, m in sent) == 6
        assert replica.node.term == 1
        await multiraft.stop()

    asyncio.run(scenario())


def test_messages_of_another_incarnation_of_the_topic_are_dropped(tmp_path: Path) -> None:
    """A topic deleted and created again under the same name: a peer that has not seen it yet
    still hosts the old incarnation's replica. Their Raft messages name the group with a tag of
    the topic uid, so neither log takes the other's entries."""

    async def scenario() -> None:
        sent: list[tuple[str, str, object]] = []
        multiraft = MultiRaft(
            "b",
            lambda to, group, parts: sent.append((to, group, decode_message(b"".join(parts)))),
            0.05,
            StateJournal(tmp_path / "journal"),
        )
        replica = _open(tmp_path, GROUP)
        replica.set_topic_uid("0123456789abcdef" * 2)
        assert replica.wire_group == f"{GROUP}@0123456789abcdef"
        multiraft.add(replica)
        await multiraft.run_round()
        # a leader of the new incarnation (another uid): dropped, nothing answered
        append = encode_message(AppendRequest(3, "a", "b", 0, 0, 0))
        multiraft.deliver("a", [(f"{GROUP}@fedcba9876543210", append)])
        await multiraft.run_round()
        assert multiraft.foreign_messages == 1 and not sent
        assert replica.node.term == 0 and replica.node.leader_id is None
        # the same incarnation, and an untagged message (a peer that does not know the uid):
        # both are taken, and the answers carry this replica's tag
        multiraft.deliver("a", [(f"{GROUP}@0123456789abcdef", append)])
        await multiraft.run_round()
        assert replica.node.term == 3 and replica.node.leader_id == "a"
        assert [(to, group) for to, group, _ in sent] == [("a", f"{GROUP}@0123456789abcdef")]
        multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(4, "a", "b", 0)))])
        await multiraft.run_round()
        assert replica.node.term == 4 and multiraft.foreign_messages == 1
        await multiraft.stop()

    asyncio.run(scenario())


def test_a_call_for_a_replica_removed_since_it_was_queued_is_dropped(tmp_path: Path) -> None:
    """A retired replica's log is closed on the storage thread right after its removal: a call
    queued for it before (a probe, a leadership transfer) must not touch it, or bring it back
    into the rounds."""

    async def scenario() -> None:
        multiraft, replica, _ = _host(tmp_path)
        await multiraft.run_round()
        called: list[str] = []
        multiraft.call(lambda: called.append("gone"), replica)
        multiraft.remove(GROUP)
        await multiraft.run_round()
        assert not called and multiraft.active_count == 0
        other = _open(tmp_path, "t/1")
        multiraft.add(other)
        multiraft.call(lambda: called.append("hosted"), other)
        await multiraft.run_round()
        assert called == ["hosted"]
        replica.close()
        await multiraft.stop()

    asyncio.run(scenario())


def test_a_round_tells_the_transport_it_took_the_delivered_frames(tmp_path: Path) -> None:
    """What frees the transport's inbox budget (cluster.transport.InboxBudget)."""

    async def scenario() -> list[int]:
        multiraft, _, _ = _host(tmp_path)
        backlog = [0]
        taken: list[int] = []

        def on_taken() -> None:
            taken.append(backlog[0])
            backlog[0] = 0

        multiraft.on_inputs_taken = on_taken
        heartbeat = Heartbeat(1, "a", "b", 0, quiesce=False, lease_tick=1)
        multiraft.deliver("a", [(GROUP, encode_message(heartbeat))])
        backlog[0] = 1
        await multiraft.run_round()
        return taken

    assert asyncio.run(scenario()) == [1]


def _heartbeats(first: int, count: int) -> list[tuple[str, bytes | memoryview]]:
    """`count` heartbeats from "a" for GROUP, told apart by their lease ticks (from `first`)."""
    return [
        (GROUP, encode_message(Heartbeat(1, "a", "b", 0, lease_tick=tick)))
        for tick in range(first, first + count)
    ]


def test_a_round_steps_at_most_max_round_messages_and_leaves_the_rest_in_order(
    tmp_path: Path,
) -> None:
    """A flood of messages (a frame of thousands, several frames) is stepped over several
    rounds, MAX_ROUND_MESSAGES a round, in the order it came; the inbox's budget is handed
    back once it is empty, not while frames still wait."""

    async def scenario() -> None:
        multiraft, replica, _ = _host(tmp_path)
        taken_rounds: list[int] = []
        multiraft.on_inputs_taken = lambda: taken_rounds.append(multiraft.rounds)
        stepped: list[int] = []
        step = replica.node.step

        def stepping(message: Message) -> None:
            assert isinstance(message, Heartbeat)
            stepped.append(message.lease_tick)
            step(message)

        replica.node.step = stepping  # type: ignore[method-assign]
        size = MAX_ROUND_MESSAGES
        big = _heartbeats(1, size + size // 2)
        multiraft.deliver("a", big)
        rest = _heartbeats(size + size // 2 + 1, size + size // 2)
        multiraft.deliver("a", rest[: size // 2])
        multiraft.deliver("a", rest[size // 2 :])
        per_round: list[int] = []
        for _ in range(4):
            before = len(stepped)
            await multiraft.run_round()
            per_round.append(len(stepped) - before)
        assert per_round == [size, size, size, 0], per_round
        assert stepped == list(range(1, 3 * size + 1))  # every one, in order
        assert taken_rounds == [3, 4], taken_rounds  # the budget back once the inbox is empty
        assert multiraft.rounds_cut_short == 2
        await multiraft.stop()

    asyncio.run(scenario())


def test_ticks_wait_while_the_rounds_are_behind_and_void_the_leases_past_max_behind(
    tmp_path: Path,
) -> None:
    """A round that leaves inputs for the next gives no ticks (the groups' clocks wait with
    their messages); once more than MAX_BEHIND_TICKS are held back, lease reads wait
    (`ticks_stalled`) and the round that gives them again voids every lease first, as after a
    pause, though the ticker itself never ran late."""

    async def scenario() -> None:
        multiraft, _, _ = _host(tmp_path)
        await multiraft.run_round()
        given = multiraft.wheel.count  # ticks the host has given its groups
        multiraft.deliver("a", _heartbeats(1, (MAX_BEHIND_TICKS + 3) * MAX_ROUND_MESSAGES))
        for tick in range(1, MAX_BEHIND_TICKS + 2):
            multiraft.tick(tick * 0.05)  # on time: the ticker is not late
            await multiraft.run_round()  # cut short: no tick given
            assert multiraft.leases_voided == 0
        assert multiraft.wheel.count == given
        assert multiraft.ticks_stalled()  # (held back: the ticker's own clock is not read here)
        while multiraft._inbox:
            await multiraft.run_round()
        assert multiraft.leases_voided == 1
        assert multiraft.wheel.count == given + 3  # the held ticks: 3 a round at most, as ever
        await multiraft.stop()

    asyncio.run(scenario())


def test_ticks_dropped_by_a_slow_round_stall_lease_reads_for_an_election_timeout(
    tmp_path: Path,
) -> None:
    """A round owed more than MAX_TICKS_A_ROUND ticks (a slow round, not a pause: the ticker
    is on time) gives only that many, so this node's Raft clocks fall behind its peers' by the
    rest — past the drift a lease allows (`LEASE_MARGIN_TICKS`): a leader would count a lease
    longer than its followers keep their promise. Lease reads wait (`ticks_stalled`) for an
    election timeout on the ticker's clock, by when every lease counted across the drop has
    ended by this node's own clock."""

    async def scenario() -> None:
        ticker = FakeTicker(0.05)
        multiraft = MultiRaft("b", lambda to, group, parts: None, 0.05, StateJournal(tmp_path / "j"), ticker=ticker)  # fmt: skip
        replica = _open(tmp_path, GROUP)
        multiraft.add(replica)
        await multiraft.run_round()
        ticker.start(multiraft.tick)  # (the host is driven by hand: its driver is not started)

        def tick() -> None:
            ticker.advance(1)

        tick()
        await multiraft.run_round()
        assert not multiraft.ticks_stalled()  # on time, one tick a round
        for _ in range(MAX_TICKS_A_ROUND + 2):
            tick()  # a slow round: five ticks came meanwhile
        assert not multiraft.ticks_stalled()  # owed, not dropped yet (and far from a pause)
        await multiraft.run_round()  # gives 3, drops 2
        assert multiraft.leases_voided == 0  # (no pause: the leases are not voided)
        election = replica.node.config.election_ticks
        for given in range(election):
            assert multiraft.ticks_stalled(), f"lease reads served {given} ticks after a drop"
            tick()
            await multiraft.run_round()
        assert not multiraft.ticks_stalled()

    asyncio.run(scenario())


def test_the_driver_lets_the_loop_run_between_rounds(tmp_path: Path) -> None:
    """Rounds that keep finding work (a flood) do not hold the event loop: a callback scheduled
    meanwhile (a tick, a SWIM packet, a client's call) runs before the flood is through."""

    async def scenario() -> None:
        multiraft, _, _ = _host(tmp_path)
        multiraft.deliver("a", _heartbeats(1, 4 * MAX_ROUND_MESSAGES))
        loop = asyncio.get_running_loop()
        ran_at_round: list[int] = []

        def after_round(touched: object) -> None:
            if multiraft.rounds == 1:  # scheduled from inside the driver's first round
                loop.call_soon(lambda: ran_at_round.append(multiraft.rounds))

        multiraft.on_round = after_round
        multiraft.start()
        await _until(lambda: multiraft.rounds >= 4 and bool(ran_at_round), "the flood's rounds")
        assert ran_at_round == [1], ran_at_round  # right after that round, not after the flood
        await multiraft.stop()

    asyncio.run(scenario())


def test_a_tick_after_a_pause_voids_every_lease_and_regular_ticks_do_not(tmp_path: Path) -> None:
    """The ticker restarts its schedule after a pause: a tick more than MAX_BEHIND_TICKS
    intervals after the last voids the leases (`RaftNode.void_lease`); ticks on schedule, or
    caught up within that, do not."""

    async def scenario() -> None:
        ticker = FakeTicker(0.05)
        multiraft = MultiRaft("b", lambda to, group, parts: None, 0.05, StateJournal(tmp_path / "j"), ticker=ticker)  # fmt: skip
        replica = _open(tmp_path, GROUP)
        multiraft.add(replica)
        voided: list[int] = []
        void = replica.node.void_lease

        def spy() -> None:
            voided.append(1)
            void()

        replica.node.void_lease = spy  # type: ignore[method-assign]
        multiraft.start()
        try:
            ticker.advance(3 * MAX_BEHIND_TICKS)
            late = ticker.now() + MAX_BEHIND_TICKS * 0.05
            multiraft.tick(late)  # late, within what the ticker catches up
            assert multiraft.leases_voided == 0 and not voided
            multiraft.tick(late + (MAX_BEHIND_TICKS + 2) * 0.05)  # after a pause
            assert multiraft.leases_voided == 1 and voided == [1]
        finally:
            await multiraft.stop()

    asyncio.run(scenario())


def test_a_proposal_for_another_term_is_refused_and_appends_nothing(tmp_path: Path) -> None:
    """A proposer that decided in one leader term (a timer partition's slot: its plan numbers
    fire sequences from what its leader knew) must not have its entry appended when the same
    node leads again in a later term, beside its successor's decisions: MultiRaft refuses a
    proposal whose term is not the leader's, when the entry would be appended."""

    async def scenario() -> None:
        journal = StateJournal(tmp_path / "journal")
        multiraft = MultiRaft("b", lambda to, group, parts: None, 0.01, journal)
        replica = Replica.open(
            node_id="b", topic="t", partition=0, directory=str(tmp_path / "t" / "0"),
            bootstrap=Configuration(voters=frozenset({"b"})), hard_state=HardState(term=4),
            raft_config=RaftConfig(), log_config=LogConfig(), handles=FileHandles(16),
            rng=random.Random(1),
        )  # fmt: skip
        multiraft.add(replica)
        multiraft.start()
        try:
            await _until(lambda: replica.node.role is Role.LEADER, "an election")
            term, last = replica.node.term, replica.node.log.last_index
            batch = encode_batch([(None, b"x", None, 0)])
            loop = asyncio.get_running_loop()
            for stale in (term - 1, term + 1):
                waiter = Waiter(loop.create_future())
                multiraft.propose(Proposal(replica, batch, 1, 0, waiter, term=stale))
                try:
                    await asyncio.wait_for(waiter.future, 5)
                except ProposalDropped:
                    pass
                else:
                    raise AssertionError(f"a proposal for term {stale} was appended at {term}")
            assert replica.node.log.last_index == last, "a refused proposal was appended"
            waiter = Waiter(loop.create_future())
            multiraft.propose(Proposal(replica, batch, 1, 0, waiter, term=term))
            await asyncio.wait_for(waiter.future, 5)  # the leader's own term: appended
            assert replica.node.log.last_index == last + 1
        finally:
            await multiraft.stop()

    asyncio.run(scenario())


def test_a_tick_touches_only_the_groups_whose_timer_is_due(tmp_path: Path) -> None:
    """Issue 28: a tick costs what the due timers need, not what the active groups are. Each of
    30 leaderless followers, each deferred a different number of ticks, campaigns at the very
    tick it would if ticked one by one (the pure core's own count), and the ticks in between
    touch none of them."""

    async def scenario() -> None:
        sent: list[tuple[str, str, object]] = []
        multiraft = MultiRaft(
            "b",
            lambda to, group, parts: sent.append((to, group, decode_message(b"".join(parts)))),
            0.05,
            StateJournal(tmp_path / "journal"),
        )
        touched_per_round: list[int] = []
        multiraft.on_round = lambda touched: touched_per_round.append(len(touched))
        expected: dict[str, int] = {}
        for i in range(30):
            replica = _open(tmp_path, f"t/{i}")
            replica.node.defer_campaign(i)
            # the reference: the same node, ticked one by one until it campaigns
            reference = RaftNode(
                "b", Configuration(voters=frozenset("abc")), MemoryLog(), HardState(),
                RaftConfig(), random.Random(1),
            )  # fmt: skip
            reference.defer_campaign(i)
            ticks = 0
            while reference.role is Role.FOLLOWER:
                reference.tick()
                ticks += 1
            expected[replica.wire_group] = ticks
            multiraft.add(replica)
        await multiraft.run_round()
        touched_per_round.clear()
        campaigned: dict[str, int] = {}
        last = max(expected.values())
        for tick in range(1, last + 1):
            multiraft.tick(tick * 0.05)
            await multiraft.run_round()
            for _, group, message in sent:
                if isinstance(message, VoteRequest):
                    campaigned.setdefault(group, tick)
        assert campaigned == expected
        # a follower is touched when its timer is due (three times at most: an election
        # timeout from its start without a leader, its campaign, and a second campaign for the
        # first to campaign, as the last ones start theirs), not at each of the `last` ticks
        assert sum(touched_per_round) <= 3 * len(expected), touched_per_round
        await multiraft.stop()

    asyncio.run(scenario())


def test_a_message_after_quiet_ticks_comes_after_them(tmp_path: Path) -> None:
    """A follower owed quiet ticks is given them before it steps a message: its leader's
    heartbeat then restarts its election timer from that heartbeat's tick, as when it was
    ticked every round (stepped first, the owed ticks would count against the new timer)."""

    async def scenario() -> None:
        multiraft, replica, sent = _host(tmp_path)
        election_ticks = RaftConfig().election_ticks
        tick = 0

        async def tick_round(heartbeat: bool = False) -> None:
            nonlocal tick
            if heartbeat:
                multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 0)))])
            tick += 1
            multiraft.tick(tick * 0.05)
            await multiraft.run_round()

        await tick_round(heartbeat=True)
        for _ in range(election_ticks - 2):  # quiet: owed, not given
            await tick_round()
        await tick_round(heartbeat=True)  # given the owed ticks first, then the heartbeat
        heard_at = tick
        timeout = replica.node._randomized_timeout
        while not any(isinstance(m, VoteRequest) for _, m in sent):
            assert tick < heard_at + 3 * election_ticks, "never campaigned"
            await tick_round()
        # the heartbeat is stepped before its round's tick: that tick is the timer's first
        assert tick == heard_at - 1 + timeout
        await multiraft.stop()

    asyncio.run(scenario())


def test_a_call_sees_its_group_given_every_tick_it_is_owed(tmp_path: Path) -> None:
    """A driver call (a transfer, a probe: one group, or any group) runs on nodes that have
    been given every tick so far, as when each was ticked every round."""

    async def scenario() -> None:
        multiraft = MultiRaft(
            "b", lambda to, group, parts: None, 0.05, StateJournal(tmp_path / "j")
        )
        replica = _open(tmp_path, GROUP)
        multiraft.add(replica)
        seen: list[int] = []
        multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 0)))])
        for tick in range(1, 7):  # the heartbeat in the first round, then quiet ticks only
            multiraft.tick(tick * 0.05)
            await multiraft.run_round()
        for replica_named in (replica, None):
            multiraft.call(lambda: seen.append(replica.node.ticks_without_leader), replica_named)
            await multiraft.run_round()
        assert seen == [6, 6]  # the heartbeat's round's tick and five more
        await multiraft.stop()

    asyncio.run(scenario())


def test_the_counts_of_leaders_and_led_replicas_follow_every_change(tmp_path: Path) -> None:
    """Health reports how many hosted replicas lead and how many know their leader from counts
    the host keeps as rounds end (`MultiRaft.leading`, `led`), not from a walk of every replica
    at each poll; checked against that walk after each change: a leader heard of, an election
    won, a leader lost to a newer term, a replica removed."""
    multiraft, _, sent = hand_driven_host(tmp_path, "t/0")
    for group in ("t/1", "t/2"):
        multiraft.add(open_replica(tmp_path, group))

    def walked() -> tuple[int, int]:
        nodes = [replica.node for replica in multiraft.replicas.values()]
        leading = sum(node.role is Role.LEADER for node in nodes)
        return leading, sum(node.leader_id is not None for node in nodes)

    async def rounds(*messages: tuple[str, str, Message]) -> tuple[int, int]:
        for group, sender, message in messages:
            multiraft.deliver(sender, [(group, encode_message(message))])
        await multiraft.run_round()
        return multiraft.leading, multiraft.led

    async def scenario() -> None:
        assert await rounds() == walked() == (0, 0)
        heard = [(g, "a", Heartbeat(1, "a", "b", 0)) for g in ("t/0", "t/1")]
        assert await rounds(*heard) == walked() == (0, 2)
        assert await rounds(("t/2", "a", TimeoutNow(1, "a", "b"))) == walked() == (0, 2)
        assert ("a", VoteRequest(2, "b", "a", 0, 0, transfer=True)) in sent, sent
        won = await rounds(("t/2", "a", VoteResponse(2, "a", "b", True)))
        assert won == walked() == (1, 3)
        newer = VoteRequest(5, "c", "b", 9, 1, transfer=True)  # t/0's leader unknown at term 5
        assert await rounds(("t/0", "c", newer)) == walked() == (1, 2)
        multiraft.remove("t/2")
        assert (multiraft.leading, multiraft.led) == walked() == (0, 1)
        assert await rounds() == (0, 1)
        for replica in list(multiraft.replicas.values()):
            replica.close()

    asyncio.run(scenario())


def test_behind_its_inbox_a_host_steps_only_the_newest_waiting_heartbeat_of_a_group(
    tmp_path: Path,
) -> None:
    """A host `BEHIND_FRAMES` frames behind its inbox voids a waiting heartbeat once a newer one
    of the same group from the same sender arrives (as if the network had lost it): a node
    restarted with 60,000 replicas fell tens of MB behind, most of it heartbeats sent every
    interval by its peers' awake groups. Every other message is stepped, in order."""
    multiraft, replica, sent = hand_driven_host(tmp_path, GROUP)

    def frame(*messages: Message) -> list[tuple[str, bytes | memoryview]]:
        return [(GROUP, encode_message(message)) for message in messages]

    for lease_tick in range(1, BEHIND_FRAMES + 1):  # not behind yet: each is kept
        multiraft.deliver("a", frame(Heartbeat(1, "a", "b", 0, lease_tick=lease_tick)))
    late = [Heartbeat(1, "a", "b", 0, lease_tick=tick) for tick in range(9, 13)]
    multiraft.deliver("a", frame(late[0]))
    multiraft.deliver("a", frame(late[1], AppendRequest(1, "a", "b", 0, 0, 0)))
    multiraft.deliver("a", frame(late[2]))
    multiraft.deliver("a", frame(late[3]))
    asyncio.run(multiraft.run_round())
    answered = [m.lease_tick for to, m in sent if isinstance(m, HeartbeatResponse)]
    assert answered == [*range(1, BEHIND_FRAMES + 1), 12], sent
    assert any(isinstance(m, AppendResponse) for _, m in sent), sent  # the append still stepped
    assert replica.node.leader_id == "a"
    replica.close()
