"""Field checks for requests: each raises `InvalidGroupRequest` naming the field, the bad value and
what is valid, before anything changes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from consumers.types import InvalidGroupRequest, TopicMeta, UnknownTopic

__all__ = [
    "KINDS",
    "MAX_NAME",
    "NAME_RULE",
    "check_kind",
    "check_name",
    "check_offset",
    "check_partition",
    "check_topic",
    "check_topics",
    "session_timeout",
]

MAX_NAME = 200
NAME_RULE = f"1 to {MAX_NAME} characters of [A-Za-z0-9._-]"
_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
KINDS = ("stream", "queue")


def check_name(field: str, value: str) -> None:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidGroupRequest(f"{field} {value!r:.220} is not valid: use {NAME_RULE}")


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise InvalidGroupRequest(
            f"kind {kind!r:.40} is not served: valid kinds are {', '.join(KINDS)}"
        )


def session_timeout(requested_ms: int, default_ms: int, min_ms: int, max_ms: int) -> int:
    """The session timeout a request asks for (0: the default), checked against the range."""
    if requested_ms == 0:
        return default_ms
    if not min_ms <= requested_ms <= max_ms:
        raise InvalidGroupRequest(
            f"session_timeout_ms {requested_ms} is out of range: use {min_ms}..{max_ms}, "
            f"or 0 for the default ({default_ms})"
        )
    return requested_ms


def check_topics(topics: Iterable[str]) -> tuple[str, ...]:
    """A subscription, sorted and without duplicates. A topic that does not exist yet is fine
    (its partitions are assigned once it does)."""
    names = sorted(set(topics))
    for name in names:
        check_name("topic", name)
    return tuple(names)


def check_topic(topic: str, topics: Mapping[str, TopicMeta]) -> TopicMeta:
    check_name("topic", topic)
    meta = topics.get(topic)
    if meta is None:
        raise UnknownTopic(f"topic {topic!r} does not exist")
    return meta


def check_partition(topic: str, partition: int, meta: TopicMeta) -> None:
    if not 0 <= partition < meta.partitions:
        raise InvalidGroupRequest(
            f"partition {partition} of topic {topic!r} is out of range: "
            f"it has partitions 0..{meta.partitions - 1}"
        )


def check_offset(topic: str, partition: int, offset: int) -> None:
    if offset < 0:
        raise InvalidGroupRequest(
            f"offset {offset} for {topic}/{partition} is negative: an offset is >= 0 "
            "(the next offset to read)"
        )
