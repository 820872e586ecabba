"""Roll-forward rounds (`timers.types`): which pending batches a timer partition's leader copies
forward so that its log may go below `cut_offset`, and the floor it may claim once the copies
committed. Pure: the node (`cluster.timer_roll`) and the simulator gather the inputs and append
the copies and the floor record.

    round = roll_round(cut_offset, pending_below, unread_bounds, config.max_roll_batches,
                       due_after_ms=now + retention)
    append a copy of each of round.copies (in order), then, once all committed and folded,
    a floor record at round.floor (if it is above the floor already claimed)

Bounded work per round: at most `limit` copies; a timer due by `due_after_ms` is not copied
(it fires before long, and its segment goes then); the floor stops at the first pending batch
not copied, and at the lower bound of every bucket not read this round. So the claim "no
pending timer lies below the floor" holds whatever was left for later:

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
    due_after_ms: int | None = None,
) -> RollRound:
    """`pending_below`: every pending batch below `cut_offset` in the buckets read (exactly);
    `unread_bounds`: for each bucket with pending timers not read, a lower bound of its lowest
    pending offset. The copies are the lowest `limit` pending batches."""
    if limit < 1:
        raise InvalidTimer(f"roll limit {limit}: must be >= 1")
    below = sorted({b.offset: b for b in pending_below if b.offset < cut_offset}.values(),
                   key=lambda b: b.offset)  # fmt: skip
    if due_after_ms is not None:
        later = [b for b in below if b.due_ms > due_after_ms]
        soon = [b for b in below if b.due_ms <= due_after_ms]
    else:
        later, soon = below, []
    copies, rest = later[:limit], later[limit:] + soon
    floor = min([cut_offset, *(b.offset for b in rest), *unread_bounds])
    return RollRound(tuple(copies), floor)
