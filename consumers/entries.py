"""The entries a coordinator replicates: what changed in one group, as one `__groups` record value.

Layout: every entry is one msgpack array `[FORMAT_VERSION, kind, group, *fields]` with positional
fields. A member is written whole (`MemberSet`), so replaying entries in log order rebuilds the
group table exactly; nothing in an entry depends on the coordinator that wrote it (no clock, no
session deadline: sessions are not replicated).

Contracts: `decode(encode(e)) == e` for every entry; `decode` raises `UnknownEntry` (naming what
it could not read) for anything `encode` cannot produce, in particular an entry of a newer
`FORMAT_VERSION` or kind, and never another exception type. A node that meets one stops serving
the partition's groups rather than guess (a newer node wrote it: see the rolling-upgrade rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from consumers.queue_types import QueueOptions
from consumers.types import TopicPartition

__all__ = [
    "FORMAT_VERSION",
    "Entry",
    "GroupDeleted",
    "MemberRecord",
    "MemberRemoved",
    "MemberSet",
    "OffsetsCommitted",
    "QueueDeadLettered",
    "QueueLeased",
    "QueueOptionsSet",
    "QueueSettled",
    "UnknownEntry",
    "decode",
    "encode",
]

FORMAT_VERSION = 1

(
    _MEMBER_SET,
    _MEMBER_REMOVED,
    _OFFSETS_COMMITTED,
    _GROUP_DELETED,
    _QUEUE_OPTIONS,
    _QUEUE_LEASED,
    _QUEUE_SETTLED,
    _QUEUE_DEAD_LETTERED,
) = range(8)
_LAST_KIND = _QUEUE_DEAD_LETTERED
_MAX_ENTRY_BYTES = 64 * 1024 * 1024


class UnknownEntry(Exception):
    """An entry of a format this version cannot read."""


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """A member as replicated. `assignment` is what it may own, each partition with the member
    epoch at which it was granted (a commit must carry at least that epoch), sorted."""

    id: str
    serial: int  # the group table's counter when the member was named: ids are never reused
    instance_id: str | None
    epoch: int
    topics: tuple[str, ...]  # the subscription, sorted
    session_timeout_ms: int
    assignment: tuple[tuple[str, int, int], ...]  # (topic, partition, grant epoch), sorted

    @property
    def partitions(self) -> frozenset[TopicPartition]:
        return frozenset((topic, partition) for topic, partition, _ in self.assignment)


@dataclass(frozen=True, slots=True)
class MemberSet:
    """The member is now exactly `member` (joined, or its assignment or subscription changed)."""

    group: str
    kind: str
    member: MemberRecord


@dataclass(frozen=True, slots=True)
class MemberRemoved:
    """The member left, its session expired, or a static member's new incarnation replaced it:
    its id is fenced for good and its partitions are free."""

    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class OffsetsCommitted:
    """Committed offsets: (topic, topic uid, partition, next offset to read), sorted. Offsets of
    a topic are keyed by its uid (its incarnation)."""

    group: str
    offsets: tuple[tuple[str, str, int, int], ...]


@dataclass(frozen=True, slots=True)
class GroupDeleted:
    group: str


# -- queue groups (consumers/queues.py applies them). Each names one partition of one topic
# incarnation (group, topic, topic uid, partition) and carries absolute epoch-ms times, so a
# replay needs no clock; one entry per (call, partition).


@dataclass(frozen=True, slots=True)
class QueueOptionsSet:
    group: str
    options: QueueOptions


@dataclass(frozen=True, slots=True)
class QueueLeased:
    """A receive: first the log start (retention: what lies below it and is not leased or
    pending a dead letter is settled as deleted), then the leases handed to `member_id` until
    `deadline_ms`, each (offset, delivery_count, key hash or None), from waiting or fresh; fresh
    records skipped because their key was blocked, (offset, key hash), wait with count 0; the
    partition's next offset becomes `next_offset`."""

    group: str
    topic: str
    topic_uid: str
    partition: int
    log_start: int
    member_id: str
    deadline_ms: int
    next_offset: int
    leases: tuple[tuple[int, int, int | None], ...]
    skipped: tuple[tuple[int, int | None], ...] = ()


@dataclass(frozen=True, slots=True)
class QueueSettled:
    """Leases that ended (settle, expiry, a departed member): `acked` offsets; `waiting`
    (offset, available_at_ms, delivery_count) back to waiting; `extended` (offset, deadline_ms);
    `dead` (offset, sequence, delivery_count, reason, dead-letter topic) decided for the
    dead-letter topic, pending its copy."""

    group: str
    topic: str
    topic_uid: str
    partition: int
    acked: tuple[int, ...] = ()
    waiting: tuple[tuple[int, int, int], ...] = ()
    extended: tuple[tuple[int, int], ...] = ()
    dead: tuple[tuple[int, int, int, str, str], ...] = ()
    # the member whose settle call ended these leases ("" for expiries and departures): its
    # settlements are remembered, so that the same call retried is answered as applied
    settled_by: str = ""


@dataclass(frozen=True, slots=True)
class QueueDeadLettered:
    """The copies of these pending dead letters (`offsets`) are in the dead-letter topic; those
    of `gone` could not be made (retention deleted the source record, or its topic was deleted):
    settled as deleted."""

    group: str
    topic: str
    topic_uid: str
    partition: int
    offsets: tuple[int, ...]
    gone: tuple[int, ...] = ()


QueueEntry = QueueOptionsSet | QueueLeased | QueueSettled | QueueDeadLettered
Entry = MemberSet | MemberRemoved | OffsetsCommitted | GroupDeleted | QueueEntry


def encode(entry: Entry) -> bytes:
    fields: list[Any]
    match entry:
        case MemberSet(group=group, kind=kind, member=m):
            fields = [
                _MEMBER_SET,
                group,
                kind,
                m.id,
                m.serial,
                m.instance_id,
                m.epoch,
                list(m.topics),
                m.session_timeout_ms,
                [list(a) for a in m.assignment],
            ]
        case MemberRemoved(group=group, member_id=member_id):
            fields = [_MEMBER_REMOVED, group, member_id]
        case OffsetsCommitted(group=group, offsets=offsets):
            fields = [_OFFSETS_COMMITTED, group, [list(o) for o in offsets]]
        case GroupDeleted(group=group):
            fields = [_GROUP_DELETED, group]
        case QueueOptionsSet(group=group, options=o):
            fields = [
                _QUEUE_OPTIONS,
                group,
                o.max_deliveries,
                o.dead_letter_topic,
                o.ordering,
                list(o.backoff_ms),
                o.max_in_flight,
            ]
        case QueueLeased():
            fields = [
                _QUEUE_LEASED,
                entry.group,
                entry.topic,
                entry.topic_uid,
                entry.partition,
                entry.log_start,
                entry.member_id,
                entry.deadline_ms,
                entry.next_offset,
                [list(lease) for lease in entry.leases],
                [list(skipped) for skipped in entry.skipped],
            ]
        case QueueSettled():
            fields = [
                _QUEUE_SETTLED,
                entry.group,
                entry.topic,
                entry.topic_uid,
                entry.partition,
                list(entry.acked),
                [list(w) for w in entry.waiting],
                [list(x) for x in entry.extended],
                [list(d) for d in entry.dead],
                entry.settled_by,
            ]
        case QueueDeadLettered():
            fields = [
                _QUEUE_DEAD_LETTERED,
                entry.group,
                entry.topic,
                entry.topic_uid,
                entry.partition,
                list(entry.offsets),
                list(entry.gone),
            ]
    packed: bytes = msgpack.packb([FORMAT_VERSION, *fields], use_bin_type=True)
    return packed


def decode(data: bytes) -> Entry:
    if len(data) > _MAX_ENTRY_BYTES:
        raise UnknownEntry(f"entry of {len(data)} bytes: at most {_MAX_ENTRY_BYTES} are read")
    try:
        value = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as error:  # msgpack raises several types for bad bytes
        raise UnknownEntry(f"not a msgpack entry ({type(error).__name__}: {error})") from None
    if not isinstance(value, list) or len(value) < 3:
        raise UnknownEntry(f"an entry is an array [version, kind, group, ...], not {value!r:.80}")
    version, kind, *fields = value
    if version != FORMAT_VERSION:
        raise UnknownEntry(
            f"entry format version {version!r}: this node reads version {FORMAT_VERSION} only"
        )
    try:
        return _decode_fields(kind, fields)
    except (TypeError, ValueError) as error:
        raise UnknownEntry(f"malformed entry of kind {kind!r}: {error}") from None


def _decode_fields(kind: object, fields: list[Any]) -> Entry:
    if kind == _MEMBER_SET:
        group, group_kind, mid, serial, instance, epoch, topics, session, assignment = fields
        member = MemberRecord(
            id=_str(mid),
            serial=_int(serial),
            instance_id=None if instance is None else _str(instance),
            epoch=_int(epoch),
            topics=tuple(_str(t) for t in _list(topics)),
            session_timeout_ms=_int(session),
            assignment=tuple(_assigned(a) for a in _list(assignment)),
        )
        return MemberSet(_str(group), _str(group_kind), member)
    if kind == _MEMBER_REMOVED:
        group, member_id = fields
        return MemberRemoved(_str(group), _str(member_id))
    if kind == _OFFSETS_COMMITTED:
        group, offsets = fields
        return OffsetsCommitted(_str(group), tuple(_offset(o) for o in _list(offsets)))
    if kind == _GROUP_DELETED:
        (group,) = fields
        return GroupDeleted(_str(group))
    if kind == _QUEUE_OPTIONS:
        group, max_deliveries, dead_letter_topic, ordering, backoff, max_in_flight = fields
        options = QueueOptions(
            max_deliveries=_int(max_deliveries),
            dead_letter_topic=None if dead_letter_topic is None else _str(dead_letter_topic),
            ordering=_str(ordering),
            backoff_ms=tuple(_int(b) for b in _list(backoff)),
            max_in_flight=_int(max_in_flight),
        )
        return QueueOptionsSet(_str(group), options)
    if kind == _QUEUE_LEASED:
        group, topic, uid, partition, log_start, member, deadline, next_offset, leases, skip = (
            fields
        )
        return QueueLeased(
            _str(group),
            _str(topic),
            _str(uid),
            _int(partition),
            _int(log_start),
            _str(member),
            _int(deadline),
            _int(next_offset),
            tuple(_lease(x) for x in _list(leases)),
            tuple(_skipped(x) for x in _list(skip)),
        )
    if kind == _QUEUE_SETTLED:
        group, topic, uid, partition, acked, waiting, extended, dead, settled_by = fields
        return QueueSettled(
            _str(group),
            _str(topic),
            _str(uid),
            _int(partition),
            tuple(_int(x) for x in _list(acked)),
            tuple(_ints3(x) for x in _list(waiting)),
            tuple(_ints2(x) for x in _list(extended)),
            tuple(_dead(x) for x in _list(dead)),
            _str(settled_by),
        )
    if kind == _QUEUE_DEAD_LETTERED:
        group, topic, uid, partition, offsets, gone = fields
        return QueueDeadLettered(
            _str(group),
            _str(topic),
            _str(uid),
            _int(partition),
            tuple(_int(x) for x in _list(offsets)),
            tuple(_int(x) for x in _list(gone)),
        )
    raise UnknownEntry(f"entry kind {kind!r}: this node reads kinds 0..{_LAST_KIND}")


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, not {value!r:.40}")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, not {value!r:.40}")
    return value


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected an array, not {value!r:.40}")
    return value


def _assigned(value: object) -> tuple[str, int, int]:
    topic, partition, epoch = _list(value)
    return _str(topic), _int(partition), _int(epoch)


def _offset(value: object) -> tuple[str, str, int, int]:
    topic, uid, partition, offset = _list(value)
    return _str(topic), _str(uid), _int(partition), _int(offset)


def _optional_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _lease(value: object) -> tuple[int, int, int | None]:
    offset, count, key_hash = _list(value)
    return _int(offset), _int(count), _optional_int(key_hash)


def _skipped(value: object) -> tuple[int, int | None]:
    offset, key_hash = _list(value)
    return _int(offset), _optional_int(key_hash)


def _ints2(value: object) -> tuple[int, int]:
    a, b = _list(value)
    return _int(a), _int(b)


def _ints3(value: object) -> tuple[int, int, int]:
    a, b, c = _list(value)
    return _int(a), _int(b), _int(c)


def _dead(value: object) -> tuple[int, int, int, str, str]:
    offset, sequence, count, reason, topic = _list(value)
    return _int(offset), _int(sequence), _int(count), _str(reason), _str(topic)
