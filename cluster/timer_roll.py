"""Roll-forward (`timers.types`, `timers.rolls`): the timer partition's leader keeps its log's
retention from being pinned by long timers. A sealed segment whose newest record is older than
`timer_log_retention_ms` is to go; the pending timers in it are copied forward first.

One round, between plans (`cluster.timers.Slot`, when no timer is due soon: `roll_due`), at
most every `retention_check_s`: the cut point is the first offset retention keeps; the index names the
buckets that may hold pending timers below it (`buckets_below`), the leader reads the lowest
`max_roll_buckets` of them (off the event loop), `roll_round` chooses at most
`max_roll_batches` copies and the floor; it appends each copy (acks=all; the producer's batch
read from the log, wrapped: `cluster.timer_log.copy_batch`), then the floor record, then waits
until its follower has folded them all into the index and the book. Only then may a plan be
made: a plan never names an original whose copy committed. A round that fails part-way (a
proposal refused, leadership lost) leaves copies that committed in force (each superseded its
original) and no floor: the next round, on whichever leader, decides again.

The log itself is cut by the timer host's retention pass (`cluster.retention`), below
`min_pending_offset` of each replica's index, which the floor raises.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from cluster.failstop import NodeFailStopped
from cluster.multiraft import Proposal
from cluster.replica import Replica, Waiter
from cluster.timer_fire import read_timer_batch
from cluster.timer_log import Follower, copy_batch, floor_batch, plan_batch
from timers.book import TimerBook
from timers.rolls import roll_round
from timers.types import TimerConfig

__all__ = ["Rolling", "RollingHost"]

log = logging.getLogger("flotilla.timers")

ROLL_CLEARANCE_MS = 500  # a round starts only when no timer is due sooner than this
STARVED_CHECKS = 10  # ... or once this many retention checks went by without a round


class RollingHost(Protocol):
    """What a roll round uses of the node (`cluster.timers.TimerHost`)."""

    config: TimerConfig
    write_timeout_s: float
    retention_check_s: float
    timer_log_retention_ms: int

    def propose(self, proposal: Proposal) -> None: ...


class Rolling:
    """The roll-forward half of a timer slot (`cluster.timers.Slot`)."""

    host: RollingHost
    replica: Replica
    term: int  # the slot's leader term: its copies and floor are appended in it only
    follower: Follower
    _rolled_at = 0.0  # monotonic: the last round
    _floor = 0  # the highest floor this slot appended

    def roll_due(self, book: TimerBook, now_ms: int) -> bool:
        """A round is due every `retention_check_s`, once no timer is due within
        ROLL_CLEARANCE_MS (a round delays the plans behind it); after STARVED_CHECKS checks
        without one, it goes ahead anyway (dense timers never pin the log for long)."""
        waited_s = time.monotonic() - self._rolled_at
        if waited_s < self.host.retention_check_s:
            return False
        due = book.next_due_ms()
        clear = due is None or due > now_ms + ROLL_CLEARANCE_MS
        return clear or waited_s >= STARVED_CHECKS * self.host.retention_check_s

    async def _roll(self, book: TimerBook) -> bool:
        """One round. False: a proposal failed (the slot stops; its successor decides again)."""
        self._rolled_at = time.monotonic()
        index, replica = self.follower.index, self.replica
        if index is None:
            return True
        cut = await asyncio.to_thread(_cut_offset, replica, self.host.timer_log_retention_ms)
        bounds = index.buckets_below(cut)
        plan_at = index.last_plan_offset
        marker = book.remark() if 0 <= plan_at < cut else None
        if not bounds and marker is None:
            return True
        config = self.host.config
        read = sorted(bounds, key=lambda b: (bounds[b], b))[: config.max_roll_buckets]
        fired = {b.offset for b in book.last_plan.batches} if book.last_plan else set()
        loaded = book.loaded_buckets()
        pending, unread = [], [bound for bucket, bound in bounds.items() if bucket not in read]
        for bucket in read:
            for batch in await asyncio.to_thread(index.bucket, bucket):
                # the book is the leader's truth for a bucket it holds; a batch the two do not
                # agree on is not copied, and the floor stays below it
                if batch.offset not in fired and (bucket not in loaded or book.holds(batch.offset)):
                    pending.append(batch)
                else:
                    unread.append(batch.offset)
        retention_ms = self.host.timer_log_retention_ms
        chosen = roll_round(
            cut, pending, unread, config.max_roll_batches, due_after_ms=_now_ms() + retention_ms
        )
        floor = chosen.floor
        proposals = []
        now_ms = _now_ms()
        for original in chosen.copies:
            data = await asyncio.to_thread(read_timer_batch, replica, original.offset)
            if data is None:  # gone: it cannot be copied; the floor stays below it
                log.error("timer batch %s@%d is gone from the log: not rolled forward",
                          replica.group, original.offset)  # fmt: skip
                floor = min(floor, original.offset)
                continue
            copy = copy_batch(data, original.offset, original.due_ms, now_ms)
            proposals.append(self._propose(copy, now_ms))
        copied = len(proposals)
        if marker is not None:  # the last plan's record is to go: its sequence goes on here
            proposals.append(self._propose(plan_batch(marker, now_ms), now_ms))
        if not proposals and floor <= self._floor:
            return True
        if proposals and not await self._committed(proposals):
            return False
        if marker is not None:
            book.planned(marker)
        if floor > self._floor:
            if not await self._committed([self._propose(floor_batch(floor, now_ms), now_ms)]):
                return False
            self._floor = floor
        # every copy folded into the index and the book before the next plan
        await self.follower.caught_up(replica.high_watermark)
        log.info("timer log %s: %d pending timer batches rolled forward; none pending below %d",
                 replica.group, copied, floor)  # fmt: skip
        return True

    def _propose(self, batch: bytes, now_ms: int) -> asyncio.Future[object]:
        waiter = Waiter(asyncio.get_running_loop().create_future())
        self.host.propose(Proposal(self.replica, batch, 1, now_ms, waiter, term=self.term))
        return waiter.future  # type: ignore[return-value]

    async def _committed(self, futures: list[asyncio.Future[object]]) -> bool:
        try:
            await asyncio.wait_for(asyncio.gather(*futures), self.host.write_timeout_s)
            return True
        except (asyncio.CancelledError, NodeFailStopped):
            raise
        except Exception as error:  # NotLeader, ProposalDropped, NotCommitted, TimeoutError
            for future in futures:
                if future.done() and not future.cancelled():
                    future.exception()  # retrieved: a round that gave up is no error
            log.info("a roll round of %s did not commit (%s): the next one decides again",
                     self.replica.group, error or type(error).__name__)  # fmt: skip
            return False


def _cut_offset(replica: Replica, retention_ms: int) -> int:
    """Storage read: the first offset the timer log's retention keeps (whole sealed segments
    whose newest record is older than `retention_ms` go)."""
    segmented = replica.segmented
    cut = segmented.retention_cut(_now_ms(), None, retention_ms)
    return segmented.offset_after(cut - 1)


def _now_ms() -> int:
    return int(time.time() * 1000)
