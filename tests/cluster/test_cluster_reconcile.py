"""Reconciliation steps: add learner → promote → remove, one at a time, never below RF."""

from __future__ import annotations

import random
from collections.abc import Callable

from cluster.reconcile import Step, StepKind, next_step


def _converge(
    leader: str,
    voters: set[str],
    desired: list[str],
    seed: int = 0,
    decide: Callable[..., Step | None] = next_step,
) -> tuple[set[str], list[Step]]:
    """Applies steps (learners catch up after a random delay) until nothing is left to do."""
    rng = random.Random(seed)
    learners: set[str] = set()
    caught: set[str] = set(voters)
    steps: list[Step] = []
    for _ in range(100):
        step = decide(leader, voters, learners, desired, caught.__contains__)
        if step is None:
            if learners:
                caught.update(n for n in learners if rng.random() < 0.5)
                continue
            return voters, steps
        steps.append(step)
        if step.kind is StepKind.ADD_LEARNER:
            learners.add(step.node_id)
        elif step.kind is StepKind.PROMOTE:
            learners.discard(step.node_id)
            voters = voters | {step.node_id}
        elif step.kind is StepKind.REMOVE:
            voters = voters - {step.node_id}
            learners.discard(step.node_id)
        else:
            leader = step.node_id
        assert len(voters) >= min(3, len(desired)), f"dropped below RF: {voters}"
    raise AssertionError("did not converge")


def test_a_move_is_add_learner_promote_remove() -> None:
    voters, steps = _converge("n1", {"n1", "n2", "n3"}, ["n4", "n1", "n2"])
    assert voters == {"n1", "n2", "n4"}
    assert [s.kind for s in steps] == [StepKind.ADD_LEARNER, StepKind.PROMOTE, StepKind.REMOVE]
    assert steps[-1] == Step(StepKind.REMOVE, "n3")


def test_a_leader_that_must_go_transfers_first() -> None:
    assert next_step(
        "n3", {"n1", "n2", "n3", "n4"}, set(), ["n1", "n2", "n4"], lambda n: True
    ) == Step(StepKind.TRANSFER, "n1")
    assert (
        next_step("n3", {"n1", "n2", "n3", "n4"}, set(), ["n1", "n2", "n4"], lambda n: False)
        is None
    )


def test_only_one_learner_at_a_time_and_undesired_learners_go() -> None:
    assert next_step("n1", {"n1", "n2", "n3"}, {"n4"}, ["n1", "n4", "n5"], lambda n: False) is None
    assert next_step("n1", {"n1", "n2", "n3"}, {"n9"}, ["n1", "n2", "n3"], lambda n: True) == Step(
        StepKind.REMOVE, "n9"
    )


def test_nothing_to_do_when_placement_matches() -> None:
    assert next_step("n1", {"n1", "n2", "n3"}, set(), ["n2", "n1", "n3"], lambda n: True) is None


def test_random_moves_always_converge_without_dropping_below_rf() -> None:
    nodes = [f"n{n}" for n in range(1, 8)]
    for seed in range(200):
        rng = random.Random(seed)
        voters = set(rng.sample(nodes, 3))
        desired = rng.sample(nodes, 3)
        final, _ = _converge(rng.choice(sorted(voters)), voters, desired, seed)
        assert final == set(desired)


def _remove_first(leader, voters, learners, desired, caught_up):  # type: ignore[no-untyped-def]
    """A deliberately broken order: drop the unwanted voter before adding its replacement."""
    extra = sorted(v for v in voters if v not in desired and v != leader)
    if extra:
        return Step(StepKind.REMOVE, extra[0])
    return next_step(leader, voters, learners, desired, caught_up)


def test_the_rf_check_catches_removing_before_adding() -> None:
    import pytest

    with pytest.raises(AssertionError, match="dropped below RF"):
        _converge("n1", {"n1", "n2", "n3"}, ["n4", "n1", "n2"], decide=_remove_first)
