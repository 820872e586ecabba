"""The MultiRaft host's clock side (a mixin of `cluster.multiraft.MultiRaft`, which owns the
state named below): when its groups tick, when they go quiet, and what a pause does to leases.

Time: a `Ticker` (`cluster.clock`; real on the event loop, or a test's `FakeTicker`) paces the
ticks and the lazy commit-index saves (one every `COMMIT_SAVE_INTERVAL_S` of ticks); nothing here
reads the clock to decide anything.

Quiescence: a group whose leader has gone idle (`quiesce_after_ticks` ticks with no proposal)
stops being ticked (`RaftNode.quiesced`), so thousands of idle partitions cost nothing per tick;
a message, a proposal, or `wake(group)` (a SWIM event about its leader) puts it back on the tick
list.

Ticking costs what the due timers need, not what the active groups are (issue 28): the timer
wheel (`cluster.tick_wheel.TickWheel`, `wheel`) holds the active groups and, for each, the tick
its timer is next due; a tick round touches only the groups due, and any other input to a group
(a message, a call, a proposal) first gives it the ticks it is owed (`wheel.catch_up`), so the
core sees the same inputs in the same order as if every group were ticked every round.

Leases: a tick later than MAX_BEHIND_TICKS intervals after the last (the process was paused),
ticks held back that long (the rounds behind their inputs), or ticks dropped (a slow round) all
mean this node's Raft clocks fell behind its peers': leases are voided, or lease reads wait an
election timeout (`ticks_stalled`).
"""

from __future__ import annotations

import asyncio
import logging

from cluster.clock import MAX_BEHIND_TICKS, Ticker
from cluster.replica import COMMIT_SAVE_INTERVAL_S, Replica
from cluster.tick_wheel import MAX_TICKS_A_ROUND, TickWheel
from raft.types import Role

__all__ = ["BEHIND_ROUNDS", "HostTicks"]

log = logging.getLogger("flotilla.multiraft")

# `behind()`: a round cut short within this many rounds.
BEHIND_ROUNDS = 32


class HostTicks:
    """Ticks, quiescence and leases of the host's groups (`MultiRaft` sets these fields)."""

    ticker: Ticker
    wheel: TickWheel
    replicas: dict[str, Replica]
    quiesce_after_ticks: int
    election_ticks: int
    rounds: int
    leases_voided: int
    _ticks_due: int  # ticks come since the last round ticked
    _dropped_until_s: float  # lease reads wait until then, on the ticker's clock
    _commits_saved_at: float  # on the ticker's clock
    _last_tick_at: float  # on the ticker's clock
    _cut_short_round: int  # the last round that left inputs for the next
    _wake: asyncio.Event
    _dirty: set[Replica]  # groups that may have a Ready
    _touched: set[Replica]  # ticked, stepped or called since the last `on_round`

    def save_commits_soon(self) -> asyncio.Future[object] | None:
        raise NotImplementedError  # the host's (`MultiRaft.save_commits_soon`)

    def _isolate(self, replica: Replica, doing: str, error: Exception) -> None:
        raise NotImplementedError  # the host's (`MultiRaft._isolate`)

    def tick(self, at: float) -> None:
        """One tick at `at` (seconds on the ticker's clock): the active groups tick in the next
        round, and the moved commit indexes are saved once `COMMIT_SAVE_INTERVAL_S` has passed
        since the last save. The ticker calls it; a host driven by hand may instead.

        A tick later than MAX_BEHIND_TICKS intervals after the last (the ticker restarted its
        schedule: the process was paused, e.g. SIGSTOP or a VM freeze) voids every leader's lease
        (`RaftNode.void_lease`): the followers' clocks ran on meanwhile, so a lease counted in
        this node's ticks may have ended, and another leader may have committed since."""
        if at - self._last_tick_at > MAX_BEHIND_TICKS * self.ticker.interval_s:
            self.void_leases()
        self._last_tick_at = at
        if self.wheel.active:
            self._ticks_due += 1
            self._wake.set()
        if at - self._commits_saved_at >= COMMIT_SAVE_INTERVAL_S:
            self._commits_saved_at = at
            self.save_commits_soon()

    def void_leases(
        self, why: str = "no tick for over %d intervals (was the process paused?)"
    ) -> None:
        """Every replica's lease ends (a lone int each: safe from the loop between rounds' steps,
        and it must not wait for a round: a read may be served before the next one). `why`: for
        the log line (`%d`: MAX_BEHIND_TICKS)."""
        for replica in self.replicas.values():
            replica.node.void_lease()
        self.leases_voided += 1
        log.warning(why + ": leader leases voided until a quorum answers anew", MAX_BEHIND_TICKS)

    def behind(self) -> bool:
        """Has one of the last BEHIND_ROUNDS rounds left inputs for the next (more came than a
        round steps)? Work that can wait (leader balancing) waits meanwhile."""
        return self.rounds - self._cut_short_round < BEHIND_ROUNDS

    def ticks_stalled(self) -> bool:
        """Is the next tick overdue by more than MAX_BEHIND_TICKS intervals (the process was just
        paused and the tick that voids the leases has not run yet), or are that many ticks held
        back (the rounds are behind their inputs), or were ticks dropped within the last election
        timeout (`_tick_all`)? Lease reads wait meanwhile."""
        if self._ticks_due > MAX_BEHIND_TICKS or self.ticker.now() < self._dropped_until_s:
            return True
        return self.ticker.now() - self._last_tick_at > MAX_BEHIND_TICKS * self.ticker.interval_s

    def _tick_all(self) -> None:
        """This round's ticks (at most 3, as ever) to the groups whose timer is due in them;
        the others are given theirs when next touched (`wheel.catch_up`). Only a round that took
        every queued input ticks: while the host is behind its messages, its groups' clocks wait
        for them (as when one long round held the loop), or elections would time out on votes
        still queued here. Ticks held back past MAX_BEHIND_TICKS void every lease, as a pause
        does, and lease reads wait meanwhile (`ticks_stalled`).

        Fewer ticks given than came (more than MAX_TICKS_A_ROUND: a slow round) leave this
        node's Raft clocks behind its peers', by more than the drift a lease allows
        (`LEASE_MARGIN_TICKS`): lease reads wait for an election timeout on the ticker's clock,
        by when every lease a leader here counted across the drop has ended by its own clock
        (unless ticks are dropped again, which starts the wait again; a group that quiesced
        meanwhile holds no lease, and starts its lease afresh when woken). Voiding them instead
        would walk every replica at every slow round."""
        ticks, self._ticks_due = self._ticks_due, 0
        if not ticks:
            return
        if ticks > MAX_BEHIND_TICKS:
            # held back that long (rounds behind their inputs): the followers' clocks ran on
            self.void_leases("over %d ticks held back while the rounds were behind their inputs")
        elif ticks > MAX_TICKS_A_ROUND:
            self._dropped_until_s = self.ticker.now() + self.election_ticks * self.ticker.interval_s
        touched = self._touched
        for replica in self.wheel.advance(ticks):
            touched.add(replica)
            try:
                self._tick(replica, ticks)
            except Exception as error:
                self._isolate(replica, "ticking", error)

    def _tick(self, replica: Replica, ticks: int) -> None:
        owed = self.wheel.count - replica.ticks_given
        if not self.wheel.catch_up(replica):
            return  # quiesced
        node = replica.node
        replica.idle_ticks += max(ticks, owed)
        if replica.idle_ticks >= self.quiesce_after_ticks and node.role is Role.LEADER:
            node.quiesce()  # refused unless every member holds the whole, committed log
        if node.quiesced:
            self.wheel.active.discard(replica)
        else:
            self.wheel.schedule(replica)
        if node.has_ready():
            self._dirty.add(replica)
