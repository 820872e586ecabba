"""Rendezvous assignment: deterministic, subscription-aware, and a join or leave among N members
moves about 1/N of the partitions and none between the members that stay (measured)."""

from __future__ import annotations

import pytest

from consumers.assignment import Subscriber, target_assignment, weight
from consumers.types import TopicMeta, TopicPartition

PARTITIONS = 2_000
TOPICS = {"orders": TopicMeta("u", PARTITIONS), "audit": TopicMeta("a", 10)}


def members(n: int, first: int = 0) -> list[Subscriber]:
    return [Subscriber(f"g-{i}", f"g-{i}", ("orders",)) for i in range(first, first + n)]


def owner_map(target: dict[str, frozenset[TopicPartition]]) -> dict[TopicPartition, str]:
    return {tp: member for member, tps in target.items() for tp in tps}


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16])
def test_a_join_moves_about_one_nth_and_only_to_the_newcomer(n: int) -> None:
    before = owner_map(target_assignment(members(n), TOPICS))
    after = owner_map(target_assignment(members(n + 1), TOPICS))
    moved = [tp for tp in before if before[tp] != after[tp]]
    assert all(after[tp] == f"g-{n}" for tp in moved)  # nothing moves between the others
    ideal = PARTITIONS / (n + 1)
    print(f"join to {n + 1}: moved {len(moved)} of {PARTITIONS} (ideal {ideal:.0f})")
    assert 0.8 * ideal <= len(moved) <= 1.2 * ideal


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
def test_a_leave_moves_only_the_leavers_partitions(n: int) -> None:
    before = owner_map(target_assignment(members(n), TOPICS))
    after = owner_map(target_assignment(members(n - 1, first=1), TOPICS))
    moved = [tp for tp in before if before[tp] != after[tp]]
    assert all(before[tp] == "g-0" for tp in moved)
    ideal = PARTITIONS / n
    print(f"leave from {n}: moved {len(moved)} of {PARTITIONS} (ideal {ideal:.0f})")
    assert 0.8 * ideal <= len(moved) <= 1.2 * ideal


def test_the_target_is_deterministic_and_follows_subscriptions() -> None:
    subs = [
        Subscriber("g-1", "g-1", ("orders",)),
        Subscriber("g-2", "static-a", ("orders", "audit")),
        Subscriber("g-3", "g-3", ("missing",)),
    ]
    target = target_assignment(subs, TOPICS)
    assert target == target_assignment(list(reversed(subs)), TOPICS)
    assert {t for t, _ in target["g-1"]} == {"orders"}
    assert {("audit", p) for p in range(10)} <= target["g-2"]
    assert target["g-3"] == frozenset()  # a topic that does not exist yet: nothing
    assert len(target["g-1"] | target["g-2"]) == PARTITIONS + 10
    # a static member's key, not its id, decides: a new id with the same key gets the same
    renamed = [subs[0], Subscriber("g-9", "static-a", ("orders", "audit")), subs[2]]
    assert target_assignment(renamed, TOPICS)["g-9"] == target["g-2"]


def test_each_partition_goes_to_the_subscriber_of_highest_weight() -> None:
    """The target is the definition: argmax of `weight(key, topic, partition)` (ties to the
    larger key), whatever the computation does to go fast."""
    subs = [Subscriber(f"g-{i}", f"key-{i}", ("orders", "audit")) for i in range(7)]
    target = target_assignment(subs, TOPICS)
    for topic, meta in TOPICS.items():
        for partition in range(min(meta.partitions, 300)):
            best = max(subs, key=lambda s: (weight(s.key, topic, partition), s.key))
            assert (topic, partition) in target[best.member_id]
