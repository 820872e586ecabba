"""A simulated queue receiver: what it holds, and how it settles (acks most; releases, rejects,
extends some, keeps some past their deadlines; settles some leases late, which must be lost).
Poison records are never acked: released or let expire until they are dead-lettered, or, in the
quiet phase that drains the run, rejected or released."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from consumers.queue_types import ACK, EXTEND, REJECT, RELEASE, Lease, Settlement

__all__ = ["Receiver"]

_STAT = {ACK: "acks", RELEASE: "releases", REJECT: "rejects", EXTEND: "extends"}


@dataclass
class Receiver:
    pid: int
    rng: random.Random
    session_ms: int
    member_id: str = ""
    alive: bool = True
    held: dict[tuple[int, int], Lease] = field(default_factory=dict)
    stale: list[Lease] = field(default_factory=list)  # expired by its clock: settled late, once
    busy: bool = False  # a receive or settle awaits its reply
    busy_since: int = 0
    next_heartbeat: int = 0

    def choose_settlements(
        self, topic: str, poison: set[tuple[int, int]], quiet: bool, stats: Counter[str]
    ) -> tuple[list[Settlement], list[Lease]]:
        """The settlements of one request, and the leases they name (as the receiver saw them)."""
        rng = self.rng
        settlements, sent = [], []
        for (p, o), lease in sorted(self.held.items()):
            if quiet:
                action = (REJECT if rng.random() < 0.3 else RELEASE) if (p, o) in poison else ACK
            else:
                roll = rng.random()
                if roll < 0.3:
                    continue  # keep it (it may expire)
                if (p, o) in poison or roll < 0.4:
                    action = RELEASE
                elif roll < 0.43:
                    action = REJECT
                elif roll < 0.5:
                    action = EXTEND
                else:
                    action = ACK
            delay = rng.choice((0, 0, 200)) if action == RELEASE else 0
            invisible = rng.choice((1_000, 2_000)) if action == EXTEND else 0
            settlements.append(
                Settlement(topic, p, o, lease.delivery_count, action, delay, invisible)
            )
            sent.append(lease)
            stats[_STAT[action]] += 1
        for lease in self.stale:
            action = rng.choice((ACK, RELEASE, REJECT))
            settlements.append(
                Settlement(topic, lease.partition, lease.offset, lease.delivery_count, action)
            )
            sent.append(lease)
        self.stale.clear()
        return settlements, sent
