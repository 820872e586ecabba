"""Delayed delivery on the client side (issue 26): a produce's `delay_ms` or `deliver_at_ms`
checked and turned into the batch's due time, and the `flotilla-deliver-at` header every record
of a delayed batch carries. No I/O.

The node is the authority on the bounds (the topic's `max_delay_ms`, now - 1 s on its clock):
the client checks only what it can know without asking — the arguments' types, that at most one
is given, a delay within the largest any topic may allow — so a topic altered by another client
is never judged on a stale copy of its settings. A retry resends the same bytes, so a delay is
turned into a due time once, when the record is taken.

The limits mirror the timer core's (`timers.types`, which the SDK may not import); a test holds
them equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

from flotilla.errors import FlotillaError, InvalidArgument

__all__ = [
    "DEFAULT_MAX_DELAY_MS",
    "DELIVER_AT_HEADER",
    "MAX_MAX_DELAY_MS",
    "MIN_MAX_DELAY_MS",
    "TIMER_LOG_REFRESH_S",
    "TIMER_TOPIC_PREFIX",
    "check_max_delay",
    "deliver_at_header",
    "due_ms",
    "written_at_once",
]

DAY_MS = 86_400_000
DEFAULT_MAX_DELAY_MS = 40 * DAY_MS  # a topic's max_delay_ms unless set
MIN_MAX_DELAY_MS = 1_000
MAX_MAX_DELAY_MS = 365 * DAY_MS  # the largest max_delay_ms a topic may have
DELIVER_AT_HEADER = "flotilla-deliver-at"
# A topic incarnation's timer log is the internal topic TIMER_TOPIC_PREFIX + its uid: partition p
# holds source partition p's pending delayed batches, and its leader accepts them without a hop
TIMER_TOPIC_PREFIX = "__timers."
TIMER_LOG_REFRESH_S = 10.0  # how often a client relearns where a topic's timer log is led
_LARGEST_EPOCH_MS = (1 << 63) - 1  # ProduceRequest.deliver_at_ms is an int64


def _is_int(value: object) -> TypeGuard[int]:
    return type(value) is int  # not bool, not float: a due time is a whole number of ms


def due_ms(delay_ms: object, deliver_at_ms: object, now_ms: int) -> int | None:
    """When a produced record is due (epoch ms), or None for an ordinary record (neither
    given). InvalidArgument naming the bad value: both given, a delay that is not an integer
    from 0 to MAX_MAX_DELAY_MS, or a due time that is not a positive integer of epoch ms."""
    if delay_ms is None and deliver_at_ms is None:
        return None
    if delay_ms is not None and deliver_at_ms is not None:
        raise InvalidArgument(
            f"delay_ms={delay_ms!r} and deliver_at_ms={deliver_at_ms!r}: give at most one of "
            "them (a delay from now, or a time in epoch milliseconds)"
        )
    if delay_ms is not None:
        if not _is_int(delay_ms) or not 0 <= delay_ms <= MAX_MAX_DELAY_MS:
            raise InvalidArgument(
                f"delay_ms={delay_ms!r} is invalid: use an integer number of milliseconds from 0 "
                f"to the topic's max_delay_ms (default {DEFAULT_MAX_DELAY_MS}, 40 days; at most "
                f"{MAX_MAX_DELAY_MS}, 365 days)"
            )
        return now_ms + delay_ms
    if not _is_int(deliver_at_ms) or not 0 < deliver_at_ms <= _LARGEST_EPOCH_MS:
        raise InvalidArgument(
            f"deliver_at_ms={deliver_at_ms!r} is invalid: use an integer time in milliseconds "
            f"since the Unix epoch (e.g. {now_ms + 60_000} for a minute from now), from 1 s ago "
            "to the topic's max_delay_ms ahead"
        )
    return deliver_at_ms


def deliver_at_header(
    due: int, headers: Sequence[tuple[str, bytes]] | None
) -> list[tuple[str, bytes]]:
    """A delayed record's headers: `flotilla-deliver-at` (the due time, ASCII decimal) first,
    then the caller's. InvalidArgument if the caller set the header itself (the SDK sets it
    from the due time: two values could disagree)."""
    if headers and any(name == DELIVER_AT_HEADER for name, _ in headers):
        raise InvalidArgument(
            f"header {DELIVER_AT_HEADER!r} is set by the SDK on a delayed record: give the time "
            "as delay_ms or deliver_at_ms instead"
        )
    return [(DELIVER_AT_HEADER, str(due).encode()), *(headers or ())]


def check_max_delay(value: object) -> int:
    """A topic's `max_delay_ms` as a request carries it: 0 (the default, 40 days) or
    MIN_MAX_DELAY_MS to MAX_MAX_DELAY_MS; InvalidArgument naming the value otherwise."""
    if not _is_int(value) or not (value == 0 or MIN_MAX_DELAY_MS <= value <= MAX_MAX_DELAY_MS):
        raise InvalidArgument(
            f"max_delay_ms={value!r} is invalid: use 0 (the default, {DEFAULT_MAX_DELAY_MS} ms, "
            f"40 days) or an integer from {MIN_MAX_DELAY_MS} (1 s) to {MAX_MAX_DELAY_MS} (365 days)"
        )
    return value


def written_at_once(topic: str, partition: int, offset: int) -> FlotillaError:
    """The error for a delayed batch a node wrote at once, as an ordinary one: it answered
    without a due time, so it predates delayed delivery (older than 0.4.0) and ignored the
    request's. Said plainly, with where the records went: nothing can take them back."""
    return FlotillaError(
        f"the node leading {topic}/{partition} does not support delayed delivery (a version "
        f"before 0.4.0): it wrote the delayed records at once, from offset {offset}; upgrade "
        "every node before producing delayed records"
    )
