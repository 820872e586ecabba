"""Reconciliation: the next single step that moves a group's members toward its placement.

The leader of each group calls `next_step` with its configuration and the desired replicas
(weighted rendezvous over the live members, where a member dead for less than `replace_after`
still counts as live so that a restart moves nothing). One step at a time, in this order:

1. a learner that is not desired is removed;
2. a desired learner that has caught up (holds every committed entry) is promoted;
3. a desired member that is not yet a member is added as a learner — one learner at a time;
4. once every desired member votes, a voter that is not desired is removed; if it is the leader
   itself, leadership is transferred first to a desired voter.

So a move is always: add learner → catch up → promote → remove, and the voter count never
drops below the replication factor while data moves. Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

__all__ = ["Step", "StepKind", "next_step"]


class StepKind(enum.Enum):
    ADD_LEARNER = "add_learner"
    PROMOTE = "promote"
    REMOVE = "remove"
    TRANSFER = "transfer"


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    node_id: str


def next_step(
    leader: str,
    voters: Collection[str],
    learners: Collection[str],
    desired: Sequence[str],
    caught_up: Callable[[str], bool],
) -> Step | None:
    wanted = set(desired)
    for learner in sorted(learners):
        if learner not in wanted:
            return Step(StepKind.REMOVE, learner)
    for learner in sorted(learners):
        if caught_up(learner):
            return Step(StepKind.PROMOTE, learner)
    if learners:
        return None  # one learner at a time: let it catch up
    for node in desired:
        if node not in voters:
            return Step(StepKind.ADD_LEARNER, node)
    extra = sorted(v for v in voters if v not in wanted)
    if not extra:
        return None
    if extra[0] == leader or (leader in extra and len(extra) == 1):
        targets = [v for v in desired if v in voters and v != leader and caught_up(v)]
        return Step(StepKind.TRANSFER, targets[0]) if targets else None
    victim = next(v for v in extra if v != leader)
    return Step(StepKind.REMOVE, victim)
