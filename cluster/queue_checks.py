"""Queue requests checked at the edge (DESIGN §9): each bad field refused with `Invalid` naming
it and its valid range, before any coordinator is asked; and a queue group's options between
the wire (`pb.QueueOptions`) and the core (`consumers.queue_types.QueueOptions`)."""

from __future__ import annotations

from cluster.errors import Invalid
from cluster.validation import check_topic_name
from consumers.queue_types import (
    ACK,
    DEFAULT_BACKOFF_MS,
    DEFAULT_MAX_DELIVERIES,
    DEFAULT_MAX_IN_FLIGHT,
    EXTEND,
    KEY,
    NONE,
    REJECT,
    RELEASE,
    QueueOptions,
    Settlement,
)
from consumers.queue_validate import (
    MAX_BACKOFF_STEPS,
    MAX_DELAY_MS,
    MAX_DELIVERIES,
    MAX_IN_FLIGHT,
    MAX_INVISIBLE_MS,
    MAX_RECORDS,
    MAX_SETTLEMENTS,
    MIN_INVISIBLE_MS,
)
from proto import flotilla_pb2 as pb
from proto.groups import is_internal

__all__ = [
    "MAX_RECORDS",
    "check_receive",
    "check_settle",
    "queue_options",
    "queue_options_pb",
]

MAX_WAIT_MS = 30_000  # QueueReceiveRequest.wait_ms (the node's; the core never waits)

ACTIONS = {
    pb.SETTLE_ACK: ACK,
    pb.SETTLE_RELEASE: RELEASE,
    pb.SETTLE_REJECT: REJECT,
    pb.SETTLE_EXTEND: EXTEND,
}


def _in_range(name: str, value: int, low: int, high: int, zero: str = "") -> None:
    if (zero and value == 0) or low <= value <= high:
        return
    valid = f"{low}..{high}" + (f" (0: {zero})" if zero else "")
    raise Invalid(f"{name}={value} is invalid: use {valid}")


def check_receive(request: pb.QueueReceiveRequest) -> None:
    """Raises `Invalid` naming a bad field of a receive and its valid range."""
    check_topic_name(request.topic)
    _in_range("max_records", request.max_records, 1, MAX_RECORDS)
    _in_range("invisible_ms", request.invisible_ms, MIN_INVISIBLE_MS, MAX_INVISIBLE_MS, "30000")
    _in_range("wait_ms", request.wait_ms, 0, MAX_WAIT_MS)


def check_settle(request: pb.QueueSettleRequest) -> tuple[Settlement, ...]:
    """The settlements of a request; raises `Invalid` naming a bad field and its valid range."""
    count = len(request.settlements)
    if not 1 <= count <= MAX_SETTLEMENTS:
        raise Invalid(f"settlements: {count} given; use 1..{MAX_SETTLEMENTS}")
    settlements = []
    for index, item in enumerate(request.settlements):
        where = f"settlements[{index}]"
        try:
            check_topic_name(item.topic)
        except Invalid as error:
            raise Invalid(f"{where}.topic: {error}") from None
        action = ACTIONS.get(item.action)
        if action is None:
            valid = ", ".join(pb.SettleAction.Name(a) for a in ACTIONS)
            raise Invalid(f"{where}.action={item.action} is invalid: use one of {valid}")
        if item.delivery_count < 1:
            raise Invalid(f"{where}.delivery_count=0 is invalid: use the lease's (>= 1)")
        if action == RELEASE:
            _in_range(f"{where}.delay_ms", item.delay_ms, 0, MAX_DELAY_MS)
        if action == EXTEND:
            _in_range(
                f"{where}.invisible_ms", item.invisible_ms, MIN_INVISIBLE_MS, MAX_INVISIBLE_MS
            )
        settlements.append(
            Settlement(
                item.topic,
                item.partition,
                item.offset,
                item.delivery_count,
                action,
                delay_ms=item.delay_ms if action == RELEASE else 0,
                invisible_ms=item.invisible_ms if action == EXTEND else 0,
            )
        )
    return tuple(settlements)


def queue_options(options: pb.QueueOptions, group: str, topics: list[str]) -> QueueOptions:
    """A join's options with their defaults; raises `Invalid` naming a bad one (including a
    dead-letter topic, named or derived, that could not be created)."""
    _in_range("queue.max_deliveries", options.max_deliveries, 1, MAX_DELIVERIES, "5")
    _in_range("queue.max_in_flight", options.max_in_flight, 1, MAX_IN_FLIGHT, "2000")
    if options.ordering not in ("", NONE, KEY):
        raise Invalid(f"queue.ordering={options.ordering!r} is invalid: use 'none' or 'key'")
    if len(options.backoff_ms) > MAX_BACKOFF_STEPS:
        raise Invalid(
            f"queue.backoff_ms: {len(options.backoff_ms)} steps given; use at most "
            f"{MAX_BACKOFF_STEPS}"
        )
    for index, delay in enumerate(options.backoff_ms):
        _in_range(f"queue.backoff_ms[{index}]", delay, 0, MAX_DELAY_MS)
    chosen = QueueOptions(
        max_deliveries=options.max_deliveries or DEFAULT_MAX_DELIVERIES,
        dead_letter_topic=options.dead_letter_topic or None,
        ordering=options.ordering or NONE,
        backoff_ms=tuple(options.backoff_ms) or DEFAULT_BACKOFF_MS,
        max_in_flight=options.max_in_flight or DEFAULT_MAX_IN_FLIGHT,
    )
    for topic in topics:
        name = chosen.dead_letter_topic_of(group, topic)
        field = "queue.dead_letter_topic" if chosen.dead_letter_topic else "the dead-letter topic"
        try:
            check_topic_name(name)
        except Invalid as error:
            raise Invalid(f"{field} of topic {topic!r}: {error}") from None
        if is_internal(name) or name == topic:
            raise Invalid(
                f"{field} {name!r} is invalid: name a topic other than the source {topic!r} and "
                "not one of the cluster's own ('__...')"
            )
    return chosen


def queue_options_pb(options: QueueOptions) -> pb.QueueOptions:
    return pb.QueueOptions(
        max_deliveries=options.max_deliveries,
        dead_letter_topic=options.dead_letter_topic or "",
        ordering=options.ordering,
        backoff_ms=list(options.backoff_ms),
        max_in_flight=options.max_in_flight,
    )
