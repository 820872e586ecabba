"""Placement: balance, weights, racks, and minimal movement on join and leave."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import pytest
import xxhash

from cluster.placement import Candidate, balance_leaders, moved, partition_id, place

PARTITIONS = [partition_id(f"topic{t}", p) for t in range(20) for p in range(150)]
Placer = Callable[[str, Iterable[Candidate], int], list[str]]


def _nodes(count: int, **extra: object) -> list[Candidate]:
    return [Candidate(f"n{number}", **extra) for number in range(1, count + 1)]  # type: ignore[arg-type]


def _load(placer: Placer, nodes: list[Candidate], rf: int = 3) -> Counter[str]:
    return Counter(node for p in PARTITIONS for node in placer(p, nodes, rf))


def _movement(placer: Placer, before: list[Candidate], after: list[Candidate]) -> float:
    changed = sum(moved(placer(p, before, 3), placer(p, after, 3)) for p in PARTITIONS)
    return changed / (3 * len(PARTITIONS))


def _leader_spread(assignment: Iterable[Iterable[str]]) -> Counter[str]:
    return Counter(next(iter(replicas)) for replicas in assignment)


def test_balanced_preferred_leaders_spread_evenly_and_keep_the_replica_sets() -> None:
    nodes = _nodes(3)
    raw = [place(partition_id("bench", p), nodes, 3) for p in range(3)]
    balanced = balance_leaders(raw)
    assert [set(r) for r in balanced] == [set(r) for r in raw]
    assert sorted(_leader_spread(balanced).values()) == [1, 1, 1]
    # over many topics of few partitions, counting the leaderships the earlier topics prefer
    nodes = _nodes(7)
    counts: Counter[str] = Counter()
    for topic in range(200):
        raw = [place(partition_id(f"t{topic}", p), nodes, 3) for p in range(2)]
        balanced = balance_leaders(raw, dict(counts))
        assert [set(r) for r in balanced] == [set(r) for r in raw]
        assert all(
            list(b[1:]) == [n for n in r if n != b[0]] for b, r in zip(balanced, raw, strict=True)
        )
        counts.update(_leader_spread(balanced))
    assert max(counts.values()) - min(counts.values()) <= 2, counts


def test_the_leader_spread_check_catches_placement_order_alone() -> None:
    # the checker above can fail: the placement order alone piles leaders up
    nodes = _nodes(7)
    counts = _leader_spread(
        place(partition_id(f"t{topic}", p), nodes, 3) for topic in range(200) for p in range(2)
    )
    assert max(counts.values()) - min(counts.values()) > 2, counts


def test_placement_is_deterministic_distinct_and_sized() -> None:
    nodes = _nodes(5)
    for p in PARTITIONS[:200]:
        replicas = place(p, nodes, 3)
        assert replicas == place(p, list(reversed(nodes)), 3)
        assert len(set(replicas)) == 3
    assert place("t/0", _nodes(2), 3) == place("t/0", _nodes(2), 2)
    assert len(place("t/0", _nodes(2), 3)) == 2


def test_replicas_balance_across_nodes() -> None:
    load = _load(place, _nodes(6))
    expected = 3 * len(PARTITIONS) / 6
    assert all(abs(count - expected) / expected < 0.06 for count in load.values()), load


def test_weights_attract_proportional_load() -> None:
    nodes = [*_nodes(4), Candidate("heavy", weight=2.0)]
    load = _load(place, nodes, rf=1)
    light = sum(load[f"n{n}"] for n in range(1, 5)) / 4
    assert 1.8 < load["heavy"] / light < 2.2


def test_a_join_moves_only_about_r_over_n_of_the_replicas() -> None:
    before, after = _nodes(5), _nodes(6)
    fraction = _movement(place, before, after)
    assert fraction < 1.25 * (1 / 6)
    for p in PARTITIONS[:300]:
        # every replica that moved, moved to the new node
        assert set(place(p, after, 3)) - set(place(p, before, 3)) <= {"n6"}


def test_a_leave_moves_only_the_replicas_it_held() -> None:
    before = _nodes(6)
    after = [c for c in before if c.node_id != "n3"]
    for p in PARTITIONS[:300]:
        old, new = place(p, before, 3), place(p, after, 3)
        if "n3" not in old:
            assert old == new
        else:
            assert moved(old, new) == 1


def test_racks_spread_replicas_before_doubling_up() -> None:
    nodes = [Candidate(f"n{n}", rack=f"r{n % 3}") for n in range(9)]
    for p in PARTITIONS[:300]:
        racks = {n % 3 for n in (int(node[1:]) for node in place(p, nodes, 3))}
        assert len(racks) == 3
    two_racks = [Candidate(f"n{n}", rack=f"r{n % 2}") for n in range(6)]
    for p in PARTITIONS[:100]:
        replicas = place(p, two_racks, 3)
        assert len(replicas) == 3
        assert len({int(node[1:]) % 2 for node in replicas}) == 2


def test_bad_replication_factor_is_refused() -> None:
    with pytest.raises(ValueError, match="replication_factor=0"):
        place("t/0", _nodes(3), 0)


def _modulo_place(partition: str, candidates: Iterable[Candidate], rf: int) -> list[str]:
    """A deliberately poor placement: hash modulo n, which reshuffles on every membership change."""
    ordered = sorted(candidates, key=lambda c: c.node_id)
    start = xxhash.xxh64_intdigest(partition.encode()) % len(ordered)
    return [ordered[(start + k) % len(ordered)].node_id for k in range(min(rf, len(ordered)))]


def test_the_movement_check_catches_modulo_hashing() -> None:
    assert _movement(_modulo_place, _nodes(5), _nodes(6)) > 1.25 * (1 / 6)


def test_a_timer_log_is_placed_as_its_source_topic_and_prefers_the_same_leader() -> None:
    """A timer log `__timers.<uid>` is placed with its source topic's partition ids
    (`topic_spec.placement_key`) and created with the source's assignment (`TopicAdmin._assign`),
    so that one node leads both partitions p: firing needs no network hop, and no cut between
    two nodes separates the timers from their partition (`make chaos`, partition-random: due
    records late while the timer leader could not reach the source leader)."""
    import asyncio

    from cluster.config import NodeConfig
    from cluster.topic_spec import TopicSpec, placement_key, timer_source
    from cluster.topics import TopicAdmin

    nodes = _nodes(7)
    source = TopicSpec("orders", 12, 3, assignment=(), uid="u1")
    other = TopicSpec("other", 4, 3, uid="u2")
    topics = {"orders": source, "other": other}
    assert timer_source("__timers.u1", topics) is source
    assert timer_source("__timers.gone", topics) is None and timer_source("orders", topics) is None
    for p in range(12):
        key = placement_key("__timers.u1", p, topics)
        assert key == partition_id("orders", p) == placement_key("orders", p, topics)
        assert place(key, nodes, 3) == place(partition_id("orders", p), nodes, 3)
    assert placement_key("__timers.gone", 0, topics) == partition_id("__timers.gone", 0)

    async def assign() -> tuple[tuple[str, ...], ...]:
        admin = TopicAdmin(NodeConfig(node_id="n1"), None, lambda: nodes, lambda: None, None)  # type: ignore[arg-type]
        created = admin._assign("orders", range(12), 3)
        admin.topics = {"orders": TopicSpec("orders", 12, 3, assignment=created, uid="u1")}
        timers = admin._assign("__timers.u1", range(12), 3)
        assert timers == created, (timers, created)  # the same members, order, preferred leader
        return created

    created = asyncio.run(assign())
    assert len({row[0] for row in created}) > 1  # a real spread, not one node preferred
