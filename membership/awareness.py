"""Lifeguard's local health ("awareness"): how much a node should distrust its own judgement.

A node that cannot get its own messages through (a CPU-starved process, a saturated link) sees
everyone else as failing. Lifeguard makes such a node slow down instead of accusing: it keeps a
score in 0 .. max_multiplier - 1, and multiplies its probe interval and probe timeout by
score + 1. The score moves by these rules (memberlist's, from the Lifeguard paper):

    probe answered (directly or through a relay)        -1
    probe failed, k relays asked, m of them nacked      +(k - m)   (missing nacks: our fault)
    probe failed, no relay could be asked               +1
    had to refute a suspicion about ourselves           +1

Invariant: 0 <= score <= max_multiplier - 1, so 1 <= multiplier <= max_multiplier.
"""

from __future__ import annotations

__all__ = ["Awareness"]


class Awareness:
    def __init__(self, max_multiplier: int) -> None:
        self._max_score = max(0, max_multiplier - 1)
        self._score = 0

    @property
    def score(self) -> int:
        return self._score

    @property
    def multiplier(self) -> int:
        """The factor applied to probe interval and probe timeout (1 when healthy)."""
        return self._score + 1

    def apply_delta(self, delta: int) -> None:
        self._score = min(self._max_score, max(0, self._score + delta))

    def scale(self, ticks: int) -> int:
        return ticks * (self._score + 1)
