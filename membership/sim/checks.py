"""The simulator's checkers: each returns the list of violations it found (empty = claim holds).

They read only ground truth and the members' public views and events, so a deliberately broken
member (`membership.sim.faults`) makes them report; the tests prove that for each of them.
"""

from __future__ import annotations

from membership.sim.cluster import SimCluster
from membership.types import EventKind, MemberState

__all__ = [
    "check_crash_detected",
    "check_left_everywhere",
    "check_no_false_dead",
    "check_one_member_list",
    "check_update_seen_everywhere",
]


def _observers(cluster: SimCluster, *exclude: str) -> list[str]:
    return [m for m in cluster.running_ids() if m not in cluster.left_at and m not in exclude]


def check_no_false_dead(cluster: SimCluster) -> list[str]:
    """No member that was up and reachable was declared dead (see `SimCluster.is_false_dead`)."""
    return [
        f"tick {e.tick}: {e.observer_id} holds {e.event.member.id} dead "
        f"(declared by {e.event.declared_by}, incarnation {e.event.incarnation}, {e.phase})"
        for e in cluster.false_dead_events()
    ]


def check_crash_detected(
    cluster: SimCluster, victim: str, crash_tick: int, bound_ticks: int
) -> list[str]:
    """Every running member got a `dead` event about `victim` within `bound_ticks` of the crash."""
    deadline = crash_tick + bound_ticks
    seen = {
        e.observer_id
        for e in cluster.events
        if e.event.kind is EventKind.DEAD
        and e.event.member.id == victim
        and crash_tick <= e.tick <= deadline
    }
    return [
        f"{observer} did not declare {victim} dead within {bound_ticks} ticks of its crash "
        f"(state now {cluster.nodes[observer].swim.member_state(victim)})"
        for observer in _observers(cluster)
        if observer not in seen
    ]


def check_one_member_list(cluster: SimCluster) -> list[str]:
    """Every running member's live list equals the set of members that are up."""
    truth = cluster.up_ids()
    problems = []
    for observer in _observers(cluster):
        view = cluster.view(observer)
        if view != truth:
            problems.append(
                f"{observer} misses {sorted(truth - view)} and wrongly keeps {sorted(view - truth)}"
            )
    return problems


def check_left_everywhere(cluster: SimCluster, leaver: str) -> list[str]:
    """Every running member holds `leaver` as LEFT, after a `leave` event (not a `dead` one)."""
    problems = []
    for observer in _observers(cluster, leaver):
        kinds = [
            e.event.kind
            for e in cluster.events
            if e.observer_id == observer and e.event.member.id == leaver
        ]
        state = cluster.nodes[observer].swim.member_state(leaver)
        if state is not MemberState.LEFT or EventKind.LEAVE not in kinds:
            problems.append(f"{observer} holds {leaver} as {state} after events {kinds}")
    return problems


def check_update_seen_everywhere(
    cluster: SimCluster, member_id: str, weight: float, rack: str
) -> list[str]:
    """Every running member got an `update` event carrying the new weight and rack."""
    problems = []
    for observer in _observers(cluster):
        updates = [
            e.event.member
            for e in cluster.events
            if e.observer_id == observer
            and e.event.kind is EventKind.UPDATE
            and e.event.member.id == member_id
        ]
        if not any(m.weight == weight and m.rack == rack for m in updates):
            problems.append(f"{observer} saw no update of {member_id} to {weight}/{rack!r}")
    return problems
