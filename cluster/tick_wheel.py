"""The MultiRaft host's timer wheel (issue 28): which of the active groups a tick must touch.

The host counts the ticks it gives (`count`, at most 3 a round); each active replica remembers
how many it has been given (`Replica.ticks_given`) and the count at which its timer is next due
(`Replica.tick_due`, an entry here). A follower's or candidate's ticks that only count
(`RaftNode.quiet_ticks`) are not given one by one: the group is due only when its next tick
would do something, and any other input to it first gives it the ticks it is owed
(`catch_up`), so its core sees the same inputs in the same order as if every group were ticked
at every round. A leader's ticks are never quiet (heartbeats): a leader is due at every tick.

Pure bookkeeping on the driver's side: no I/O, no clock; the host decides what a due group's
tick does (quiescence, Readies, quarantine) in `cluster.host_ticks.HostTicks._tick`.
"""

from __future__ import annotations

from collections.abc import Iterator

from cluster.replica import Replica
from raft.types import Role

__all__ = ["MAX_TICKS_A_ROUND", "TickWheel"]

MAX_TICKS_A_ROUND = 3  # ticks given in one round at most, however many came meanwhile


class TickWheel:
    __slots__ = ("_due", "active", "count")

    def __init__(self) -> None:
        self.active: set[Replica] = set()  # groups ticked (the others are quiesced)
        self.count = 0  # ticks given to the active groups so far
        self._due: dict[int, list[Replica]] = {}  # count -> groups due then (or stale entries)

    def activate(self, replica: Replica) -> None:
        """`replica` is ticked from now on (a quiesced node's clock stood still meanwhile)."""
        if replica not in self.active:
            self.active.add(replica)
            replica.ticks_given = self.count
            replica.tick_due = 0
        self.schedule(replica)

    def schedule(self, replica: Replica) -> None:
        """Puts `replica` (active, given all its ticks, or just touched) in the wheel at the tick
        its timer is due, unless an earlier entry of it is there already (that one, when due,
        looks again)."""
        node = replica.node
        if node.role is Role.LEADER:  # (its ticks are never quiet)
            due = self.count + 1
        else:  # (never in the past: a lagging replica is owed no more than its quiet ticks)
            due = max(replica.ticks_given + node.quiet_ticks(), self.count) + 1
        if replica.tick_due <= self.count or due < replica.tick_due:
            replica.tick_due = due
            slot = self._due.get(due)
            if slot is None:
                self._due[due] = [replica]
            else:
                slot.append(replica)

    def catch_up(self, replica: Replica) -> bool:
        """Gives an active replica the ticks it is owed before anything else touches its node:
        the quiet ones at once, the others one by one, exactly as if each had been given at its
        round. False (and no tick): quiesced meanwhile (by a message or a call), so no longer
        ticked — a tick would wake it again, and a woken follower whose leader sleeps ends up
        campaigning."""
        node = replica.node
        if node.quiesced:
            self.active.discard(replica)
            return False
        owed = self.count - replica.ticks_given
        if owed <= 0 or replica not in self.active:
            return True
        replica.ticks_given = self.count
        while owed:
            quiet = node.quiet_ticks()
            if quiet:
                quiet = min(quiet, owed)
                node.pass_ticks(quiet)
                owed -= quiet
            else:
                node.tick()
                owed -= 1
        return True

    def advance(self, ticks: int) -> Iterator[Replica]:
        """Counts this round's `ticks` (at most MAX_TICKS_A_ROUND) and yields the active groups
        due in them, in due order (the caller ticks each: `catch_up`, then `schedule` again)."""
        first = self.count + 1
        self.count += min(ticks, MAX_TICKS_A_ROUND)
        active = self.active
        for count in range(first, self.count + 1):
            for replica in self._due.pop(count, ()):
                if replica.tick_due == count and replica in active:
                    yield replica  # (else rescheduled since, or no longer ticked)
