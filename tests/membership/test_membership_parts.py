"""Suspicion (Lifeguard's shrinking timeout), awareness, the broadcast queue and the probe ring."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from membership import Alive, Dead, Member, Suspect, SwimConfig
from membership.awareness import Awareness
from membership.broadcast import BroadcastQueue
from membership.codec import encoded_update_size
from membership.probe_ring import ProbeRing
from membership.suspicion import Suspicion


def _suspicion(k: int, min_ticks: int = 40, max_ticks: int = 240) -> Suspicion:
    return Suspicion(
        incarnation=1,
        first_accuser="a",
        start_tick=100,
        expected_confirmations=k,
        min_ticks=min_ticks,
        max_ticks=max_ticks,
    )


def test_unconfirmed_suspicion_lasts_the_maximum() -> None:
    assert _suspicion(k=2).deadline_tick == 100 + 240


def test_without_expected_confirmations_the_minimum_applies() -> None:
    assert _suspicion(k=0).deadline_tick == 100 + 40


def test_confirmations_shrink_the_timeout_down_to_the_minimum() -> None:
    suspicion = _suspicion(k=2)
    deadlines = [suspicion.deadline_tick]
    for accuser in ("b", "c", "d"):
        suspicion.confirm(accuser)
        deadlines.append(suspicion.deadline_tick)
    # max - (max - min) · log(c + 1) / log(k + 1): 240, 240 - 200·log2/log3, 40, 40
    assert deadlines == [340, 100 + 113, 140, 140]


def test_the_same_accuser_counts_once() -> None:
    suspicion = _suspicion(k=2)
    assert not suspicion.confirm("a")
    assert suspicion.confirm("b")
    assert not suspicion.confirm("b")
    assert suspicion.confirmations == 1


@given(st.lists(st.sampled_from("abcdefgh"), max_size=20), st.integers(0, 5))
def test_deadline_only_moves_earlier_and_stays_in_the_window(accusers: list[str], k: int) -> None:
    suspicion = _suspicion(k=k)
    previous = suspicion.deadline_tick
    for accuser in accusers:
        suspicion.confirm(accuser)
        assert suspicion.deadline_tick <= previous
        assert 100 + 40 <= suspicion.deadline_tick <= 100 + 240
        previous = suspicion.deadline_tick


def test_awareness_stays_within_its_bounds() -> None:
    awareness = Awareness(max_multiplier=8)
    awareness.apply_delta(-5)
    assert (awareness.score, awareness.multiplier) == (0, 1)
    awareness.apply_delta(3)
    assert awareness.scale(10) == 40
    awareness.apply_delta(100)
    assert (awareness.score, awareness.multiplier) == (7, 8)


def _alive(member_id: str, incarnation: int = 1) -> Alive:
    return Alive(Member(member_id, f"sim://{member_id}"), incarnation)


def test_a_newer_update_replaces_the_queued_one_about_the_same_member() -> None:
    queue = BroadcastQueue(SwimConfig())
    queue.enqueue(_alive("x"))
    queue.enqueue(Suspect("x", 1, "y"))
    assert len(queue) == 1
    assert queue.take(1000, live_members=8) == (Suspect("x", 1, "y"),)


def test_each_update_is_sent_retransmit_limit_times_then_dropped() -> None:
    config = SwimConfig()
    queue = BroadcastQueue(config)
    queue.enqueue(_alive("x"))
    limit = config.retransmit_limit(8)
    sent = [queue.take(1000, live_members=8) for _ in range(limit + 2)]
    assert sent[:limit] == [(_alive("x"),)] * limit
    assert sent[limit:] == [(), ()]
    assert len(queue) == 0


def test_least_sent_and_newest_go_first_within_the_byte_budget() -> None:
    queue = BroadcastQueue(SwimConfig())
    queue.enqueue(_alive("old"))
    queue.take(1000, live_members=8)  # "old" now has one transmission
    queue.enqueue(_alive("mid"))
    queue.enqueue(Dead("new", 1, "z"))
    budget = encoded_update_size(Dead("new", 1, "z")) + encoded_update_size(_alive("mid"))
    assert queue.take(budget, live_members=8) == (Dead("new", 1, "z"), _alive("mid"))
    # Now all three were sent once: newest first.
    assert queue.take(1000, live_members=8) == (Dead("new", 1, "z"), _alive("mid"), _alive("old"))


@given(st.lists(st.integers(0, 30), min_size=1, max_size=40), st.integers(50, 400))
@settings(deadline=None)
def test_take_never_exceeds_the_budget(sizes: list[int], budget: int) -> None:
    queue = BroadcastQueue(SwimConfig())
    for index, size in enumerate(sizes):
        queue.enqueue(Alive(Member(f"m{index}", "a" * (size + 1)), 1))
    taken = queue.take(budget, live_members=16)
    assert sum(encoded_update_size(u) for u in taken) <= budget


@given(st.integers(2, 30), st.integers(0, 2**32))
def test_probe_ring_visits_everyone_within_two_rounds(size: int, seed: int) -> None:
    rng = random.Random(seed)
    members = [f"m{i}" for i in range(size)]
    ring = ProbeRing(lambda member_id: True)
    picks = [ring.next(members, rng) for _ in range(5 * size)]
    for start in range(len(picks) - (2 * size - 1)):
        window = picks[start : start + 2 * size - 1]
        assert set(window) == set(members)


def test_probe_ring_skips_ineligible_members_and_gives_none_when_empty() -> None:
    eligible = {"a": True, "b": False, "c": True}
    ring = ProbeRing(lambda member_id: eligible[member_id])
    rng = random.Random(1)
    assert {ring.next(eligible, rng) for _ in range(6)} == {"a", "c"}
    eligible.update(a=False, c=False)
    assert ring.next(eligible, rng) is None
