"""Field checks for queue requests: each raises `InvalidGroupRequest` naming the field, the bad
value and the valid range, before anything changes.

Zero (or empty) stands for the default where the wire does (proto QueueOptions,
QueueReceiveRequest): `options` and `invisible_ms` turn it into the default first."""

from __future__ import annotations

from dataclasses import replace

from consumers import validate
from consumers.queue_types import (
    ACK,
    DEFAULT_BACKOFF_MS,
    DEFAULT_INVISIBLE_MS,
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
from consumers.types import InvalidGroupRequest

__all__ = [
    "ACTIONS",
    "MAX_BACKOFF_STEPS",
    "check_range",
    "invisible_ms",
    "options",
    "settlement",
]

ACTIONS = (ACK, RELEASE, REJECT, EXTEND)
MAX_RECORDS = 10_000
MAX_SETTLEMENTS = 10_000
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 43_200_000  # 12 h
MAX_DELAY_MS = 86_400_000  # a day
MAX_DELIVERIES = 1_000
MAX_IN_FLIGHT = 100_000
MAX_BACKOFF_STEPS = 16


def check_range(field: str, value: int, low: int, high: int, note: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidGroupRequest(f"{field} {value!r:.40} is out of range: use {low}..{high}{note}")


def options(given: QueueOptions | None, group: str) -> QueueOptions:
    """A join's options with defaults filled in (0 / empty / "" mean the default), checked."""
    if given is None:
        return QueueOptions()
    o = replace(
        given,
        max_deliveries=given.max_deliveries or DEFAULT_MAX_DELIVERIES,
        max_in_flight=given.max_in_flight or DEFAULT_MAX_IN_FLIGHT,
        backoff_ms=tuple(given.backoff_ms) or DEFAULT_BACKOFF_MS,
        ordering=given.ordering or NONE,
        dead_letter_topic=given.dead_letter_topic or None,
    )
    check_range("max_deliveries", o.max_deliveries, 1, MAX_DELIVERIES, " (0: the default 5)")
    check_range("max_in_flight", o.max_in_flight, 1, MAX_IN_FLIGHT, " (0: the default 2000)")
    if len(o.backoff_ms) > MAX_BACKOFF_STEPS:
        raise InvalidGroupRequest(
            f"backoff_ms has {len(o.backoff_ms)} steps: use at most {MAX_BACKOFF_STEPS}"
        )
    for step in o.backoff_ms:
        check_range("backoff_ms step", step, 0, MAX_DELAY_MS)
    if o.ordering not in (NONE, KEY):
        raise InvalidGroupRequest(
            f"ordering {o.ordering!r:.40} is not valid: use {NONE!r} or {KEY!r}"
        )
    if o.dead_letter_topic is not None:
        dead_letter_topic(o.dead_letter_topic, "dead_letter_topic")
    validate.check_name("group", group)
    return o


def dead_letter_topic(name: str, field: str) -> None:
    """A dead-letter topic name must be one a topic can have."""
    validate.check_name(field, name)
    if name in (".", ".."):
        raise InvalidGroupRequest(f"{field} {name!r} is not valid: a topic is not . or ..")


def dead_letter_topics(options: QueueOptions, group: str, topics: tuple[str, ...]) -> None:
    """Each subscribed topic's dead-letter topic (by default "<topic>.<group>.dlq") must be a
    valid topic name: refused at join, not when the first record is dead-lettered."""
    if options.dead_letter_topic in topics:
        raise InvalidGroupRequest(
            f"dead_letter_topic {options.dead_letter_topic!r} is a topic the member consumes: "
            "name another (a dead letter would be handed out again)"
        )
    if options.dead_letter_topic is None:
        for topic in topics:
            name = options.dead_letter_topic_of(group, topic)
            if len(name) > validate.MAX_NAME:
                raise InvalidGroupRequest(
                    f"dead_letter_topic: the default {name[:40]!r}... ({len(name)} characters) "
                    f"of topic {topic!r} is too long: name one of at most {validate.MAX_NAME} "
                    "characters"
                )


def invisible_ms(value: int) -> int:
    if value == 0:
        return DEFAULT_INVISIBLE_MS
    check_range(
        "invisible_ms",
        value,
        MIN_INVISIBLE_MS,
        MAX_INVISIBLE_MS,
        f", or 0 for the default ({DEFAULT_INVISIBLE_MS})",
    )
    return value


def max_records(value: int) -> None:
    check_range("max_records", value, 1, MAX_RECORDS)


def settlement_count(count: int) -> None:
    if not 1 <= count <= MAX_SETTLEMENTS:
        raise InvalidGroupRequest(
            f"settlements: {count} given: use 1..{MAX_SETTLEMENTS} per request"
        )


def settlement(s: Settlement) -> None:
    """The fields of one settlement (its topic and partition are checked by the caller)."""
    if s.action not in ACTIONS:
        raise InvalidGroupRequest(
            f"action {s.action!r:.40} is not valid: use one of {', '.join(ACTIONS)}"
        )
    check_range("offset", s.offset, 0, 2**63 - 1)
    check_range("delivery_count", s.delivery_count, 1, 2**31 - 1)
    if s.action == RELEASE:
        check_range("delay_ms", s.delay_ms, 0, MAX_DELAY_MS)
    elif s.delay_ms != 0:
        raise InvalidGroupRequest(f"delay_ms {s.delay_ms}: only a release has a delay (use 0)")
    if s.action == EXTEND:
        check_range("invisible_ms", s.invisible_ms, MIN_INVISIBLE_MS, MAX_INVISIBLE_MS)
    elif s.invisible_ms != 0:
        raise InvalidGroupRequest(f"invisible_ms {s.invisible_ms}: only an extend has one (use 0)")
