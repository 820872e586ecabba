"""One suspicion of one member, with Lifeguard's confirmation-shrunk timeout.

A suspicion starts at tick `start_tick` with a window [min_ticks, max_ticks]. Every *independent*
confirmation (a `Suspect` about the same member from an accuser not counted yet, the first accuser
included in the count from the start) shortens it:

    timeout(c) = max(min, max - (max - min) · log(c + 1) / log(k + 1))      (c confirmations)
    timeout    = min                                                         when k == 0

and the member is declared dead at `deadline_tick = start_tick + timeout(c)`. The deadline only
ever moves earlier, never before `start_tick + min_ticks`. The timer is a number, not a callback:
the owner compares it with its tick count.
"""

from __future__ import annotations

import math

__all__ = ["Suspicion"]


class Suspicion:
    def __init__(
        self,
        *,
        incarnation: int,
        first_accuser: str,
        start_tick: int,
        expected_confirmations: int,
        min_ticks: int,
        max_ticks: int,
    ) -> None:
        self.incarnation = incarnation
        self.first_accuser = first_accuser
        self.start_tick = start_tick
        self.expected_confirmations = max(0, expected_confirmations)
        self.min_ticks = max(0, min_ticks)
        self.max_ticks = max(self.min_ticks, max_ticks)
        self._accusers: set[str] = {first_accuser}
        self.deadline_tick = start_tick + self.timeout_ticks()

    @property
    def confirmations(self) -> int:
        """Independent accusers beyond the first."""
        return len(self._accusers) - 1

    def timeout_ticks(self) -> int:
        k = self.expected_confirmations
        if k < 1:
            return self.min_ticks
        fraction = math.log(self.confirmations + 1) / math.log(k + 1)
        raw = self.max_ticks - fraction * (self.max_ticks - self.min_ticks)
        return max(self.min_ticks, math.floor(raw))

    def confirm(self, accuser: str) -> bool:
        """Count `accuser` once; True when it was new (the caller then re-gossips the suspect)."""
        if accuser in self._accusers:
            return False
        self._accusers.add(accuser)
        self.deadline_tick = min(self.deadline_tick, self.start_tick + self.timeout_ticks())
        return True

    def expired(self, now_tick: int) -> bool:
        return now_tick >= self.deadline_tick
