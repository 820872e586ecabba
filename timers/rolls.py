"""Roll-forward rounds (`timers.types`): which pending batches a timer partition's leader copies
forward so that its log may go below `cut_offset`, and the floor it may claim once the copies
committed. Pure: the node (`cluster.timer_roll`) and the simulator gather the inputs and append
the copies and the floor record.

    round = roll_round(cut_offset, pending_below, unread_bounds, config.max_roll_batches)
    append a copy of each of round.copies (in order), then, once all committed and folded,
    a floor record at round.floor (if it is above the floor already claimed)

Bounded work per round: at most `limit` copies; the floor stops at the first pending batch not
copied, and at the lower bound of every bucket not read this round. So the claim "no pending
timer lies below the floor" holds whatever the limit left for later rounds:

    floor = min(cut_offset, offsets of pending batches below it not copied, unread bounds)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from timers.errors import InvalidTimer
from timers.types import TimerBatch

__all__ = ["RollRound", "roll_round"]


@dataclass(frozen=True, slots=True)
class RollRound:
    copies: tuple[TimerBatch, ...]  # the originals to copy forward, in offset order
    floor: int  # once they committed, no pending timer lies below this offset


def roll_round(
    cut_offset: int,
    pending_below: Iterable[TimerBatch],
    unread_bounds: Iterable[int],
    limit: int,
) -> RollRound:
    """`pending_below`: every pending batch below `cut_offset` in the buckets read (exactly);
    `unread_bounds`: for each bucket with pending timers not read, a lower bound of its lowest
    pending offset. The copies are the lowest `limit` pending batches."""
    if limit < 1:
        raise InvalidTimer(f"roll limit {limit}: must be >= 1")
    below = sorted({b.offset: b for b in pending_below if b.offset < cut_offset}.values(),
                   key=lambda b: b.offset)  # fmt: skip
    copies, rest = below[:limit], below[limit:]
    floor = min([cut_offset, *(b.offset for b in rest), *unread_bounds])
    return RollRound(tuple(copies), floor)
