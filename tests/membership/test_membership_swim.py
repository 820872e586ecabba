"""The Swim core driven by hand: probe cycle, Lifeguard's nacks and awareness, the incarnation
ordering, refutation, push-pull merging, leave, metadata updates, and purity of the package."""

from __future__ import annotations

import ast
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import pytest

from membership import (
    Ack,
    Alive,
    Dead,
    EventKind,
    Gossip,
    InvalidMember,
    Leave,
    Member,
    MemberRecord,
    MemberState,
    Message,
    Nack,
    NotRunning,
    Outgoing,
    Ping,
    PingReq,
    PushPullRequest,
    PushPullResponse,
    Suspect,
    Swim,
    SwimConfig,
    Update,
)

CONFIG = SwimConfig()


def member(member_id: str, **metadata: object) -> Member:
    return Member(member_id, f"sim://{member_id}", **metadata)  # type: ignore[arg-type]


def node_with_peers(*peers: str, seed: int = 7) -> Swim:
    """Member "a" that knows `peers` as alive at incarnation 1 (through a push-pull answer)."""
    swim = Swim(member("a"), CONFIG, random.Random(seed))
    records = tuple(MemberRecord(member(p), MemberState.ALIVE, 1) for p in peers)
    swim.receive(PushPullResponse(member(peers[0]), records))
    swim.take_outbox()
    swim.take_events()
    return swim


def gossip(sender: str, *updates: Update) -> Gossip:
    return Gossip(sender, f"sim://{sender}", updates)


T = TypeVar("T")


@dataclass(frozen=True)
class Sent(Generic[T]):
    to_address: str
    to_id: str | None
    message: T


def tick_until(
    swim: Swim, predicate: Callable[[list[Outgoing]], bool], limit: int = 500
) -> list[Outgoing]:
    """Tick until an outbox satisfies `predicate`; the outboxes seen, the last one included."""
    seen: list[Outgoing] = []
    for _ in range(limit):
        swim.tick()
        outbox = swim.take_outbox()
        seen.extend(outbox)
        if predicate(outbox):
            return seen
    raise AssertionError(f"no such outbox within {limit} ticks; saw {seen[-5:]}")


def of_type(outbox: list[Outgoing], kind: type[T]) -> list[Sent[T]]:
    sent: list[Sent[T]] = []
    for outgoing in outbox:
        message = outgoing.message
        if isinstance(message, kind):
            sent.append(Sent(outgoing.to_address, outgoing.to_id, message))
    return sent


# -- joining ------------------------------------------------------------------------------------


class Network:
    """Instant, lossless delivery between a few members, with an optional drop rule."""

    def __init__(self, *ids: str) -> None:
        self.nodes = {
            i: Swim(member(i), CONFIG, random.Random(index)) for index, i in enumerate(ids)
        }
        self.drop: Callable[[Outgoing], bool] = lambda outgoing: False
        self.log: list[Outgoing] = []

    def deliver(self) -> None:
        for _ in range(100):
            moved = False
            for swim in list(self.nodes.values()):
                for outgoing in swim.take_outbox():
                    moved = True
                    self.log.append(outgoing)
                    target = self.nodes.get(outgoing.to_address.removeprefix("sim://"))
                    if target is not None and not self.drop(outgoing):
                        target.receive(outgoing.message)
            if not moved:
                return

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            for swim in self.nodes.values():
                swim.tick()
            self.deliver()


def test_join_through_a_seed_address_fills_both_tables() -> None:
    net = Network("a", "b")
    net.nodes["b"].join(["sim://a", "sim://b"])  # its own address is skipped
    outbox = net.nodes["b"].take_outbox()
    requests = of_type(outbox, PushPullRequest)
    assert [(o.to_address, o.to_id, o.message.join) for o in requests] == [("sim://a", None, True)]
    net.nodes["a"].receive(requests[0].message)
    net.deliver()
    for name, other in (("a", "b"), ("b", "a")):
        swim = net.nodes[name]
        assert [m.id for m in swim.live_members()] == ["a", "b"]
        events = [(e.kind, e.member.id) for e in swim.take_events()]
        assert events == [(EventKind.JOIN, name), (EventKind.JOIN, other)]
    assert net.nodes["b"].joined
    # the id lookup a node uses to dial a member agrees with the full table
    swim = net.nodes["b"]
    assert swim.member("a") == {r.member.id: r.member for r in swim.records()}["a"]
    member = swim.member("a")
    assert member is not None and member.address == "sim://a"
    assert swim.member("nobody") is None


def test_join_is_retried_until_a_seed_answers() -> None:
    net = Network("a", "b")
    net.drop = lambda outgoing: True
    net.nodes["b"].join(["sim://a"])
    net.run(CONFIG.join_retry_interval_ticks * 3)
    joins = [o for o in of_type(net.log, PushPullRequest) if o.message.join]
    assert len(joins) >= 3
    assert not net.nodes["b"].joined
    net.drop = lambda outgoing: False
    net.run(CONFIG.join_retry_interval_ticks)
    assert net.nodes["b"].joined
    assert net.nodes["a"].member_state("b") is MemberState.ALIVE


def test_a_healthy_cluster_stays_alive_and_calm() -> None:
    net = Network("a", "b", "c", "d")
    for name in "bcd":
        net.nodes[name].join(["sim://a"])
    net.run(600)
    for swim in net.nodes.values():
        assert [m.id for m in swim.live_members()] == ["a", "b", "c", "d"]
        assert {r.state for r in swim.records()} == {MemberState.ALIVE}
        assert swim.awareness_score == 0
        assert swim.incarnation == 1
    assert not of_type(net.log, PingReq)


# -- the probe cycle and Lifeguard --------------------------------------------------------------


def test_failed_probe_asks_relays_then_suspects_and_tells_the_suspect_first() -> None:
    swim = node_with_peers("b", "c", "d")
    seen = tick_until(swim, lambda out: bool(of_type(out, Ping)))
    ping = of_type(seen, Ping)[0]
    target = ping.to_id
    assert target is not None and ping.message.target_id == target
    started = swim.now_tick
    # No ack: after probe_timeout the relays are asked.
    seen = tick_until(swim, lambda out: bool(of_type(out, PingReq)))
    assert swim.now_tick - started == CONFIG.probe_timeout_ticks
    requests = of_type(seen, PingReq)
    relays = {o.to_id for o in requests}
    assert relays == {"b", "c", "d"} - {target}
    assert all(o.message.target_id == target for o in requests)
    # Every relay nacks: the target looks dead, not us, so awareness stays at 0.
    for relay in relays:
        assert relay is not None
        swim.receive(Nack(relay, f"sim://{relay}", requests[0].message.seq_no))
    seen = tick_until(swim, lambda out: bool(of_type(out, Gossip)))
    assert swim.now_tick - started == CONFIG.probe_interval_ticks
    assert swim.member_state(target) is MemberState.SUSPECT
    buddy = of_type(seen, Gossip)[-1]
    assert buddy.to_id == target
    assert buddy.message.updates == (Suspect(target, 1, "a"),)
    assert swim.awareness_score == 0


def test_missing_nacks_raise_awareness_and_stretch_the_probe() -> None:
    swim = node_with_peers("b", "c", "d")
    tick_until(swim, lambda out: bool(of_type(out, Ping)))
    tick_until(swim, lambda out: bool(of_type(out, PingReq)))
    seen = tick_until(swim, lambda out: bool(of_type(out, Gossip)))  # suspected, nobody nacked
    assert swim.awareness_score == 2  # two relays asked, no nack from either
    # The next probe starts in the tick the period ended, with a stretched timeout.
    assert of_type(seen, Ping)[-1].message.seq_no == 2
    started = swim.now_tick
    seen = tick_until(swim, lambda out: bool(of_type(out, PingReq)))
    assert swim.now_tick - started == 3 * CONFIG.probe_timeout_ticks  # multiplier = score + 1
    # An answered probe lowers the score again.
    ping = of_type(seen, PingReq)[0]
    swim.receive(Ack("b", "sim://b", ping.message.seq_no))
    assert swim.awareness_score == 1


def test_a_relay_pings_for_the_requester_and_forwards_the_ack_or_nacks() -> None:
    swim = node_with_peers("b", "c")
    swim.receive(PingReq("b", "sim://b", 41, "c", "sim://c"))
    ping = of_type(swim.take_outbox(), Ping)[0]
    assert (ping.to_address, ping.message.target_id) == ("sim://c", "c")
    swim.receive(Ack("c", "sim://c", ping.message.seq_no))
    forwarded = of_type(swim.take_outbox(), Ack)
    assert [(o.to_id, o.message.seq_no) for o in forwarded] == [("b", 41)]
    # No answer this time: a Nack at nack_timeout.
    swim.receive(PingReq("b", "sim://b", 42, "c", "sim://c"))
    swim.take_outbox()
    nacks: list[Sent[Nack]] = []
    for _ in range(CONFIG.probe_timeout_ticks):
        swim.tick()
        nacks.extend(of_type(swim.take_outbox(), Nack))
    assert [(o.to_id, o.message.seq_no) for o in nacks] == [("b", 42)]


def test_a_relay_tells_the_requester_of_a_verdict_it_missed() -> None:
    swim = node_with_peers("b", "c")
    swim.receive(gossip("b", Leave("c", 2)))
    swim.take_outbox()
    swim.receive(PingReq("b", "sim://b", 7, "c", "sim://c"))
    outbox = swim.take_outbox()
    assert [(o.to_id, o.message.updates) for o in of_type(outbox, Gossip)] == [
        ("b", (Leave("c", 2),))
    ]
    assert of_type(outbox, Ping)  # it still tries, in case it is the one that is wrong


def test_pinging_a_suspect_carries_the_suspicion_first() -> None:
    swim = node_with_peers("b")
    swim.receive(gossip("b", Suspect("b", 1, "z")))
    seen = tick_until(swim, lambda out: bool(of_type(out, Ping)))
    assert of_type(seen, Ping)[0].message.updates[0] == Suspect("b", 1, "a")


# -- the incarnation ordering -------------------------------------------------------------------

X2 = Alive(member("x"), 2)
CASES: list[tuple[str, list[Update], MemberState, int, list[EventKind]]] = [
    ("stale suspect", [Suspect("x", 1, "z")], MemberState.ALIVE, 2, []),
    ("suspect", [Suspect("x", 2, "z")], MemberState.SUSPECT, 2, []),
    ("equal alive keeps suspect", [Suspect("x", 2, "z"), X2], MemberState.SUSPECT, 2, []),
    (
        "higher alive clears",
        [Suspect("x", 2, "z"), Alive(member("x"), 3)],
        MemberState.ALIVE,
        3,
        [],
    ),
    ("newer suspicion", [Suspect("x", 2, "z"), Suspect("x", 3, "z")], MemberState.SUSPECT, 3, []),
    ("dead", [Dead("x", 2, "z")], MemberState.DEAD, 2, [EventKind.DEAD]),
    ("stale dead", [Dead("x", 1, "z")], MemberState.ALIVE, 2, []),
    ("equal alive after dead", [Dead("x", 2, "z"), X2], MemberState.DEAD, 2, [EventKind.DEAD]),
    (
        "revival",
        [Dead("x", 2, "z"), Alive(member("x"), 3)],
        MemberState.ALIVE,
        3,
        [EventKind.DEAD, EventKind.JOIN],
    ),
    (
        "suspect after dead",
        [Dead("x", 2, "z"), Suspect("x", 2, "z")],
        MemberState.DEAD,
        2,
        [EventKind.DEAD],
    ),
    ("left after dead", [Dead("x", 2, "z"), Leave("x", 2)], MemberState.LEFT, 2, [EventKind.DEAD]),
    ("leave", [Leave("x", 3)], MemberState.LEFT, 3, [EventKind.LEAVE]),
    (
        "suspect after leave",
        [Leave("x", 3), Suspect("x", 5, "z")],
        MemberState.LEFT,
        3,
        [EventKind.LEAVE],
    ),
    ("metadata", [Alive(member("x", rack="r7"), 3)], MemberState.ALIVE, 3, [EventKind.UPDATE]),
    ("same metadata, newer", [Alive(member("x"), 3)], MemberState.ALIVE, 3, []),
]


@pytest.mark.parametrize(
    "updates, state, incarnation, events", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_incarnation_ordering(
    updates: list[Update], state: MemberState, incarnation: int, events: list[EventKind]
) -> None:
    swim = node_with_peers("z")
    swim.receive(gossip("z", X2))
    swim.take_events()
    for update in updates:
        swim.receive(gossip("z", update))
    record = {r.member.id: r for r in swim.records()}["x"]
    assert (record.state, record.incarnation) == (state, incarnation)
    assert [e.kind for e in swim.take_events()] == events
    assert ("x" in {m.id for m in swim.live_members()}) == state.is_live


# -- refutation and corrections -----------------------------------------------------------------


def test_a_suspected_member_refutes_with_a_higher_incarnation() -> None:
    swim = node_with_peers("b", "c", "d", "e")
    swim.receive(gossip("c", Suspect("a", 1, "b")))
    assert swim.incarnation == 2
    assert swim.awareness_score == 1
    direct = of_type(swim.take_outbox(), Gossip)
    refutation = Alive(member("a"), 2)
    assert direct[0].to_id == "b"  # the accuser hears it first
    assert len(direct) == 1 + CONFIG.refute_fanout
    assert all(o.message.updates == (refutation,) for o in direct)
    assert swim.member_state("a") is MemberState.ALIVE


def test_dead_verdict_about_self_is_refuted_too() -> None:
    swim = node_with_peers("b")
    swim.receive(gossip("b", Dead("a", 1, "b")))
    assert swim.incarnation == 2
    assert not [e for e in swim.take_events() if e.kind is EventKind.DEAD]


def test_a_rumour_already_refuted_gets_a_reminder_not_a_new_incarnation() -> None:
    swim = node_with_peers("b", "c")
    swim.receive(gossip("b", Suspect("a", 1, "b")))
    swim.take_outbox()
    swim.receive(gossip("c", Suspect("a", 1, "b")))
    assert swim.incarnation == 2
    reminders = of_type(swim.take_outbox(), Gossip)
    assert {o.to_id for o in reminders} == {"b", "c"}
    assert all(o.message.updates == (Alive(member("a"), 2),) for o in reminders)


def test_a_stale_rumour_about_another_member_is_corrected_at_its_sender() -> None:
    swim = node_with_peers("b", "c")
    swim.receive(gossip("b", Alive(member("c"), 3)))
    swim.take_outbox()
    swim.receive(gossip("b", Suspect("c", 2, "z")))
    assert swim.member_state("c") is MemberState.ALIVE
    corrections = of_type(swim.take_outbox(), Gossip)
    assert [(o.to_id, o.message.updates) for o in corrections] == [("b", (Alive(member("c"), 3),))]


def test_an_ack_to_a_member_held_dead_tells_it_so_first() -> None:
    swim = node_with_peers("b", "x")
    swim.receive(gossip("b", Dead("x", 1, "b")))
    swim.take_outbox()
    swim.receive(Ping("x", "sim://x", 5, "a"))
    ack = of_type(swim.take_outbox(), Ack)[0]
    assert ack.to_address == "sim://x"
    assert ack.message.updates[0] == Dead("x", 1, "a")


def test_a_ping_for_someone_else_is_not_answered() -> None:
    swim = node_with_peers("b")
    swim.receive(Ping("b", "sim://b", 5, "not-a"))
    assert not of_type(swim.take_outbox(), Ack)


def test_a_stranger_triggers_one_push_pull_per_probe_interval() -> None:
    swim = node_with_peers("b")
    for _ in range(3):
        swim.receive(Ping("new", "sim://new", 1, "a"))
    requests = of_type(swim.take_outbox(), PushPullRequest)
    assert [(o.to_address, o.message.join) for o in requests] == [("sim://new", False)]
    for _ in range(CONFIG.probe_interval_ticks):
        swim.tick()
    swim.take_outbox()
    swim.receive(Ping("new", "sim://new", 2, "a"))
    assert len(of_type(swim.take_outbox(), PushPullRequest)) == 1


# -- push-pull ----------------------------------------------------------------------------------


def _table(*rows: tuple[str, MemberState, int]) -> tuple[MemberRecord, ...]:
    return tuple(MemberRecord(member(m), state, inc) for m, state, inc in rows)


def test_push_pull_request_is_merged_and_answered_with_the_whole_table() -> None:
    swim = node_with_peers("b")
    swim.receive(PushPullRequest(member("c"), _table(("c", MemberState.ALIVE, 1)), join=True))
    response = of_type(swim.take_outbox(), PushPullResponse)[0]
    assert response.to_address == "sim://c"
    assert {r.member.id for r in response.message.states} == {"a", "b", "c"}
    assert [e.member.id for e in swim.take_events()] == ["c"]


def test_a_remote_dead_verdict_at_our_incarnation_is_verified_not_adopted() -> None:
    swim = node_with_peers("b", "x")
    swim.receive(PushPullResponse(member("b"), _table(("x", MemberState.DEAD, 1))))
    assert swim.member_state("x") is MemberState.ALIVE
    told = of_type(swim.take_outbox(), Gossip)
    assert [(o.to_id, o.message.updates) for o in told] == [("x", (Suspect("x", 1, "b"),))]


def test_remote_verdicts_that_know_more_are_adopted_as_suspicion_or_leave() -> None:
    swim = node_with_peers("b", "x", "y")
    rows = _table(
        ("x", MemberState.DEAD, 2),
        ("y", MemberState.LEFT, 1),
        ("ghost", MemberState.DEAD, 4),
        ("new", MemberState.SUSPECT, 1),
    )
    swim.receive(PushPullResponse(member("b"), rows))
    assert swim.member_state("x") is MemberState.SUSPECT  # never straight to dead
    assert swim.member_state("y") is MemberState.LEFT
    assert swim.member_state("ghost") is None
    assert swim.member_state("new") is MemberState.SUSPECT
    kinds = [(e.kind, e.member.id) for e in swim.take_events()]
    assert kinds == [(EventKind.LEAVE, "y"), (EventKind.JOIN, "new")]


def test_a_remote_verdict_about_self_is_refuted() -> None:
    swim = node_with_peers("b")
    swim.receive(PushPullResponse(member("b"), _table(("a", MemberState.DEAD, 1))))
    assert swim.incarnation == 2


# -- leave and metadata -------------------------------------------------------------------------


def test_leave_tells_a_few_members_directly_then_only_answers() -> None:
    swim = node_with_peers("b", "c", "d", "e")
    swim.leave()
    told = of_type(swim.take_outbox(), Gossip)
    assert len(told) == CONFIG.leave_fanout
    assert all(o.message.updates == (Leave("a", 2),) for o in told)
    assert [(e.kind, e.member.id) for e in swim.take_events()] == [(EventKind.LEAVE, "a")]
    assert "a" not in {m.id for m in swim.live_members()}
    for _ in range(5 * CONFIG.probe_interval_ticks):
        swim.tick()
    assert not of_type(swim.take_outbox(), Ping)
    swim.receive(Ping("b", "sim://b", 9, "a"))
    ack = of_type(swim.take_outbox(), Ack)[0]
    assert Leave("a", 2) in ack.message.updates
    swim.receive(gossip("b", Suspect("a", 2, "b")))
    assert swim.incarnation == 2  # a leaving member does not refute
    with pytest.raises(NotRunning, match="'a' has left"):
        swim.update_metadata(weight=2.0)
    with pytest.raises(NotRunning):
        swim.join(["sim://b"])


def test_update_metadata_raises_the_incarnation_and_rides_on_the_next_message() -> None:
    swim = node_with_peers("b")
    swim.update_metadata(weight=2.5, rack="r7")
    assert swim.incarnation == 2
    assert (swim.self_member.weight, swim.self_member.rack) == (2.5, "r7")
    assert [e.kind for e in swim.take_events()] == [EventKind.UPDATE]
    swim.receive(Ping("b", "sim://b", 3, "a"))
    ack = of_type(swim.take_outbox(), Ack)[0]
    assert Alive(member("a", weight=2.5, rack="r7"), 2) in ack.message.updates
    swim.update_metadata(weight=2.5)
    assert swim.incarnation == 2  # nothing changed, nothing announced
    with pytest.raises(InvalidMember, match="weight -1"):
        swim.update_metadata(weight=-1, rack="r8")
    assert (swim.incarnation, swim.self_member.rack) == (2, "r7")  # bad input changes nothing


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"id": "", "address": "x"}, "member id ''"),
        ({"id": "a", "address": ""}, "address ''"),
        ({"id": "a", "address": "x", "weight": 0}, "weight 0"),
        ({"id": "a", "address": "x", "weight": float("nan")}, "weight nan"),
        ({"id": "a", "address": "x", "weight": True}, "weight True"),
    ],
)
def test_bad_member_metadata_is_refused(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidMember, match=fragment):
        Member(**kwargs)  # type: ignore[arg-type]


# -- purity -------------------------------------------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "membership"
CORE_MAY_IMPORT = {
    "__future__",
    "collections.abc",
    "dataclasses",
    "enum",
    "math",
    "random",
    "typing",
    "msgpack",
    "membership",
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_core_imports_no_clock_no_socket_no_thread_and_nothing_of_flotilla() -> None:
    core = sorted(PACKAGE.glob("*.py"))
    assert core
    for path in core:
        for name in _imports(path):
            allowed = name in CORE_MAY_IMPORT or name.startswith("membership.")
            assert allowed, f"{path.name} imports {name}"
            assert not name.startswith("membership.sim"), f"{path.name} imports the simulator"


def test_the_simulator_reads_the_clock_only_to_report_wall_time() -> None:
    for path in sorted((PACKAGE / "sim").glob("*.py")):
        names = _imports(path)
        forbidden = names & {"socket", "asyncio", "threading", "os", "datetime"}
        assert not forbidden, f"{path.name} imports {forbidden}"
        if path.name != "__main__.py":
            assert "time" not in names, f"{path.name} imports time"


def test_messages_are_data() -> None:
    message: Message = Ping("a", "sim://a", 1, "b")
    with pytest.raises(AttributeError):
        message.sender_id = "c"  # type: ignore[misc]
