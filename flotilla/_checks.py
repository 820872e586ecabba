"""Argument checks and the admin requests they build: every bad argument is refused with an
InvalidArgument naming the value and what is valid, before anything is sent (so it changes
nothing). No I/O; both clients and the producer use them."""

from __future__ import annotations

import re

from flotilla._delays import check_max_delay
from flotilla.errors import InvalidArgument
from proto import flotilla_pb2 as pb

# A subscription's stream carries a keepalive after this long without records (its max_wait_ms),
# and moves to another replica when it has heard nothing for `idle_timeout_s` (default below:
# a few keepalives, so a busy node's late keepalive is not taken for a stalled one).
SUBSCRIBE_KEEPALIVE_MS = 1000
SUBSCRIBE_IDLE_TIMEOUT_S = 5.0


def check_value(value: object, what: str = "value") -> bytes:
    """`value` as bytes, or InvalidArgument naming its type (`what`: the argument's name)."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgument(f"{what} must be bytes, not {type(value).__name__}")
    return bytes(value)


def create_request(
    name: str,
    partitions: int,
    replication_factor: int,
    retention_bytes: int,
    retention_ms: int,
    max_delay_ms: int | None = None,
) -> pb.CreateTopicRequest:
    """A topic creation, its numbers checked; `max_delay_ms` None (or 0): the default."""
    return pb.CreateTopicRequest(
        name=name,
        partitions=_unsigned("partitions", partitions, 32),
        replication_factor=_unsigned("replication_factor", replication_factor, 32),
        retention_bytes=_unsigned("retention_bytes", retention_bytes, 64),
        retention_ms=_unsigned("retention_ms", retention_ms, 64),
        max_delay_ms=0 if max_delay_ms is None else check_max_delay(max_delay_ms),
    )


def alter_request(
    name: str,
    partitions: int | None,
    retention_bytes: int | None,
    retention_ms: int | None,
    max_delay_ms: int | None = None,
) -> pb.AlterTopicRequest:
    """A topic change: None leaves a setting as it is; retention 0 makes it unlimited,
    `max_delay_ms` 0 the default (40 days)."""
    if (
        partitions is None
        and retention_bytes is None
        and retention_ms is None
        and max_delay_ms is None
    ):
        raise InvalidArgument(
            f"altering topic {name!r} needs partitions, retention_bytes, retention_ms or "
            "max_delay_ms"
        )
    request = pb.AlterTopicRequest(name=name)
    if max_delay_ms is not None:
        request.max_delay_ms = check_max_delay(max_delay_ms)
    if partitions is not None:
        request.partitions = _unsigned("partitions", partitions, 32)
    if retention_bytes is not None:
        request.retention_bytes = _unsigned("retention_bytes", retention_bytes, 64)
    if retention_ms is not None:
        request.retention_ms = _unsigned("retention_ms", retention_ms, 64)
    return request


def _unsigned(what: str, value: object, bits: int) -> int:
    if type(value) is not int or not 0 <= value < 1 << bits:
        raise InvalidArgument(
            f"{what}={value!r} is invalid: use an integer from 0 to {(1 << bits) - 1}"
        )
    return value


def check_record(
    value: object, key: object, headers: object
) -> tuple[bytes, bytes | None, list[tuple[str, bytes]] | None]:
    """A record's value, key and headers as the SDK takes them, or InvalidArgument naming the
    bad one: value and key bytes (key None: no key), headers (name: str, value: bytes) pairs."""
    return (
        value if type(value) is bytes else check_value(value),
        key if key is None or type(key) is bytes else check_value(key, "key"),
        check_headers(headers) if headers else None,
    )


def check_headers(headers: object) -> list[tuple[str, bytes]]:
    """Headers as (name, value) pairs, or InvalidArgument naming the bad one."""
    pairs: list[tuple[str, bytes]] = []
    if isinstance(headers, str | bytes | bytearray | memoryview | dict) or not hasattr(
        headers, "__iter__"
    ):
        raise InvalidArgument(
            f"headers must be a sequence of (name: str, value: bytes) pairs, not "
            f"{type(headers).__name__}"
        )
    for header in headers:
        if (
            not isinstance(header, tuple | list)
            or len(header) != 2
            or not isinstance(header[0], str)
            or not isinstance(header[1], bytes | bytearray | memoryview)
        ):
            shown = repr(header)
            shown = shown if len(shown) <= 60 else shown[:60] + "..."
            raise InvalidArgument(
                f"header {shown} is invalid: each header is a (name: str, value: bytes) pair"
            )
        pairs.append((header[0], bytes(header[1])))
    return pairs


def check_read(offset: object, max_records: object = 1) -> None:
    """InvalidArgument naming a bad read offset (0 to 2**64 - 1) or max_records (1 to
    2**32 - 1); nothing is sent."""
    _unsigned("offset", offset, 64)
    if type(max_records) is not int or not 1 <= max_records < 1 << 32:
        raise InvalidArgument(
            f"max_records={max_records!r} is invalid: use an integer from 1 to {(1 << 32) - 1}"
        )


def check_idle_timeout(idle_timeout_s: object) -> float:
    """InvalidArgument naming a bad subscription `idle_timeout_s` (seconds > 0)."""
    if not isinstance(idle_timeout_s, int | float) or not idle_timeout_s > 0:
        raise InvalidArgument(
            f"idle_timeout_s={idle_timeout_s!r} is invalid: use a number of seconds > 0 (a few "
            f"keepalive intervals of {SUBSCRIBE_KEEPALIVE_MS} ms; default "
            f"{SUBSCRIBE_IDLE_TIMEOUT_S})"
        )
    return float(idle_timeout_s)


def check_stop_after_idle(stop_after_idle_s: object) -> float | None:
    """InvalidArgument naming a bad `stop_after_idle_s` (None, or seconds > 0)."""
    if stop_after_idle_s is None:
        return None
    if (
        not isinstance(stop_after_idle_s, int | float)
        or isinstance(stop_after_idle_s, bool)
        or not stop_after_idle_s > 0
    ):
        raise InvalidArgument(
            f"stop_after_idle_s={stop_after_idle_s!r} is invalid: use None (follow for ever) or "
            "a number of seconds > 0"
        )
    return float(stop_after_idle_s)


def check_poll_timeout(timeout_s: object) -> float:
    """InvalidArgument naming a bad poll `timeout_s` (seconds, 0 to 60)."""
    if (
        not isinstance(timeout_s, int | float)
        or isinstance(timeout_s, bool)
        or not 0 <= timeout_s <= 60
    ):
        raise InvalidArgument(
            f"timeout_s={timeout_s!r} is invalid: use a number of seconds from 0 (answer at once) "
            "to 60"
        )
    return float(timeout_s)


def check_acks(acks: str) -> pb.Acks:
    """The produce acknowledgement a client's `acks` names ("all" or "leader")."""
    if acks not in ("all", "leader"):
        raise InvalidArgument(f"acks={acks!r}: use 'all' (durable on a quorum) or 'leader'")
    return pb.ACKS_ALL if acks == "all" else pb.ACKS_LEADER


# -- consumer groups ------------------------------------------------------------------------------
GROUP_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
STARTS = ("earliest", "latest")
MIN_SESSION_TIMEOUT_MS = 1_000  # the coordinator's bounds (GroupHeartbeatRequest)
MAX_SESSION_TIMEOUT_MS = 300_000


def check_group(group: object) -> str:
    """InvalidArgument naming a bad group name ([A-Za-z0-9._-], 1 to 200 characters)."""
    if not isinstance(group, str) or not GROUP_NAME.fullmatch(group):
        raise InvalidArgument(
            f"group {group!r} is invalid: use 1 to 200 characters of A-Z, a-z, 0-9, '.', '_', '-'"
        )
    return group


def check_topics(topics: object) -> tuple[str, ...]:
    """The topics a consumer subscribes to (a name, or a non-empty list of names), in order,
    without repeats; InvalidArgument naming a bad one."""
    names = [topics] if isinstance(topics, str) else topics
    if not isinstance(names, list | tuple | set | frozenset) or not names:
        raise InvalidArgument(
            f"topics={topics!r} is invalid: give one or more topic names, e.g. ['orders']"
        )
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"topic {name!r} in topics={topics!r} is not a topic name")
    return tuple(dict.fromkeys(sorted(names) if isinstance(names, set | frozenset) else names))


def check_start(start: object) -> str:
    """Where a partition with no committed offset begins: "earliest" or "latest"."""
    if start not in STARTS:
        raise InvalidArgument(
            f"start={start!r} is invalid: use 'earliest' (the log start) or 'latest' (only "
            "records written from now on), for partitions with no committed offset"
        )
    return str(start)


def check_consumer(
    auto_commit: object,
    auto_commit_interval_ms: object,
    session_timeout_ms: object,
    instance_id: object,
    on_assign: object,
    on_revoke: object,
) -> None:
    """InvalidArgument naming a bad consumer setting; nothing is sent."""
    if not isinstance(auto_commit, bool):
        raise InvalidArgument(f"auto_commit={auto_commit!r} is invalid: use True or False")
    if type(auto_commit_interval_ms) is not int or not 1 <= auto_commit_interval_ms <= 3_600_000:
        raise InvalidArgument(
            f"auto_commit_interval_ms={auto_commit_interval_ms!r} is invalid: use an integer "
            "number of milliseconds from 1 to 3600000 (default 5000)"
        )
    if type(session_timeout_ms) is not int or not (
        MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS
    ):
        raise InvalidArgument(
            f"session_timeout_ms={session_timeout_ms!r} is invalid: use an integer number of "
            f"milliseconds from {MIN_SESSION_TIMEOUT_MS} to {MAX_SESSION_TIMEOUT_MS} (default 10000)"
        )
    if instance_id is not None and (not isinstance(instance_id, str) or not instance_id):
        raise InvalidArgument(
            f"instance_id={instance_id!r} is invalid: use None (a dynamic member) or a non-empty "
            "string that stays the same across this member's restarts (a static member)"
        )
    for name, callback in (("on_assign", on_assign), ("on_revoke", on_revoke)):
        if callback is not None and not callable(callback):
            raise InvalidArgument(
                f"{name}={callback!r} is invalid: use None or a function taking a "
                "set of (topic, partition)"
            )


def check_offsets(offsets: object) -> dict[tuple[str, int], int]:
    """A commit's offsets: {(topic, partition): next offset to read}, each offset 0 to
    2**63 - 1; InvalidArgument naming a bad entry."""
    if not isinstance(offsets, dict):
        raise InvalidArgument(
            f"offsets={offsets!r} is invalid: use a dict of (topic, partition) -> the next "
            "offset to read, e.g. {('orders', 0): 42}"
        )
    checked: dict[tuple[str, int], int] = {}
    for key, offset in offsets.items():
        if (
            not isinstance(key, tuple)
            or len(key) != 2
            or not isinstance(key[0], str)
            or type(key[1]) is not int
            or key[1] < 0
        ):
            raise InvalidArgument(
                f"{key!r} in offsets is invalid: name a partition as (topic, partition), "
                "e.g. ('orders', 0)"
            )
        checked[key] = _offset(f"offset {offset!r} of {key!r}", offset)
    return checked


def _offset(what: str, offset: object) -> int:
    if type(offset) is not int or not 0 <= offset < 1 << 63:
        raise InvalidArgument(f"{what} is invalid: use an integer from 0 to {(1 << 63) - 1}")
    return offset


def check_reset_to(to: object) -> str | int | dict[int, int]:
    """`reset_group_offsets`'s `to`: "earliest", "latest", an offset, or {partition: offset}."""
    if to in STARTS:
        return str(to)
    if type(to) is int:
        return _offset(f"to={to!r}", to)
    if isinstance(to, dict) and to:
        for partition, offset in to.items():
            if type(partition) is not int or partition < 0:
                raise InvalidArgument(
                    f"partition {partition!r} in to={to!r} is invalid: use partition numbers "
                    "(integers >= 0) as keys"
                )
            _offset(f"offset {offset!r} of partition {partition}", offset)
        return dict(to)
    raise InvalidArgument(
        f"to={to!r} is invalid: use 'earliest', 'latest', an offset (an integer >= 0) or a "
        "dict {partition: offset}"
    )
