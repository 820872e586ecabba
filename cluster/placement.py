"""Placement: which nodes host each partition, by weighted rendezvous hashing (DESIGN §5).

    u(node, partition)     = (xxh64(partition_id || 0x00 || node_id) + 1) / (2^64 + 1)   in (0, 1)
    score(node, partition) = -weight(node) / ln(u)

The `replication_factor` highest scores host the replicas, the highest first. With racks known, the top scores across *distinct* racks are taken first and the
remaining seats filled by score. Anyone holding the member list computes the same answer, and a
node joining or leaving moves only the partitions whose top-R set changed (about R/n of them).

Preferred leaders: the highest score is a random pick per partition, so leaderships would pile up
on some nodes (three partitions on three nodes all prefer one node 1 time in 9).
`balance_leaders` moves to the front of each replica list the replica that prefers the fewest
partitions so far (as Kafka's assignment rotates its first replica), which leaves the replica
sets, and so the data placement, unchanged.

Pure: no I/O, no clock, no randomness beyond the hash.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import xxhash

__all__ = ["Candidate", "balance_leaders", "moved", "partition_id", "place", "score"]

_TWO_64_PLUS_1 = float(2**64 + 1)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A live member that may host replicas."""

    node_id: str
    weight: float = 1.0
    rack: str = ""


def partition_id(topic: str, index: int) -> str:
    """The flat cluster-wide name of a partition."""
    return f"{topic}/{index}"


def score(node_id: str, weight: float, partition: str) -> float:
    digest = xxhash.xxh64_intdigest(partition.encode() + b"\x00" + node_id.encode())
    u = (digest + 1) / _TWO_64_PLUS_1
    return -weight / math.log(u)


def place(partition: str, candidates: Iterable[Candidate], replication_factor: int) -> list[str]:
    """Node ids hosting `partition`, best first; fewer than R only if fewer candidates exist."""
    if replication_factor < 1:
        raise ValueError(f"replication_factor={replication_factor} must be at least 1")
    ranked = sorted(
        (c for c in candidates if c.weight > 0),
        key=lambda c: (score(c.node_id, c.weight, partition), c.node_id),
        reverse=True,
    )
    if not any(c.rack for c in ranked):
        return [c.node_id for c in ranked[:replication_factor]]
    chosen: list[str] = []
    racks_used: set[str] = set()
    for candidate in ranked:
        if len(chosen) == replication_factor:
            break
        if candidate.rack not in racks_used:
            chosen.append(candidate.node_id)
            racks_used.add(candidate.rack)
    for candidate in ranked:
        if len(chosen) == replication_factor:
            break
        if candidate.node_id not in chosen:
            chosen.append(candidate.node_id)
    order = {c.node_id: position for position, c in enumerate(ranked)}
    return sorted(chosen, key=order.__getitem__)


def moved(before: Sequence[str], after: Sequence[str]) -> int:
    """How many replicas changed hosts between two placements of one partition."""
    return len(set(after) - set(before))


def balance_leaders(
    assignment: Sequence[Sequence[str]], already: dict[str, int] | None = None
) -> tuple[tuple[str, ...], ...]:
    """`assignment` with each partition's preferred leader (its first replica) chosen so that
    preferences spread evenly: the replica preferred by the fewest partitions so far, counting
    `already` (node id -> preferred leaderships elsewhere, e.g. of other topics); ties go to
    the higher placement score. The other replicas keep their order."""
    counts = dict(already or {})
    balanced: list[tuple[str, ...]] = []
    for replicas in assignment:
        if not replicas:
            balanced.append(())
            continue
        leader = min(replicas, key=lambda node: (counts.get(node, 0), replicas.index(node)))
        counts[leader] = counts.get(leader, 0) + 1
        balanced.append((leader, *(node for node in replicas if node != leader)))
    return tuple(balanced)
