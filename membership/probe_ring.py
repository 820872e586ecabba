"""The order in which a member probes the others: round-robin over a shuffled list (SWIM §4.3).

Contract: between two reshuffles every eligible member is probed once, so a given prober probes a
given member at most 2(n - 1) - 1 protocol periods apart (first in one round, last in the next).
A member added mid-round is inserted at a random position among those not yet probed in this
round, so it is probed within the current round.
Members that stopped being eligible (dead, left, forgotten) are skipped when their turn comes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

__all__ = ["ProbeRing"]


class ProbeRing:
    def __init__(self, eligible: Callable[[str], bool]) -> None:
        self._eligible = eligible
        self._order: list[str] = []
        self._index = 0

    def add(self, member_id: str, rng: random.Random) -> None:
        position = rng.randint(self._index, len(self._order))
        self._order.insert(position, member_id)

    def next(self, member_ids: Iterable[str], rng: random.Random) -> str | None:
        """The next eligible member; at the end of a round, reshuffle `member_ids` and go on."""
        for _ in range(2):
            while self._index < len(self._order):
                member_id = self._order[self._index]
                self._index += 1
                if self._eligible(member_id):
                    return member_id
            self._order = [m for m in member_ids if self._eligible(m)]
            rng.shuffle(self._order)
            self._index = 0
        return None
