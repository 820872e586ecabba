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

from consumers.types import TopicPartition

__all__ = [
    "FORMAT_VERSION",
    "Entry",
    "GroupDeleted",
    "MemberRecord",
    "MemberRemoved",
    "MemberSet",
    "OffsetsCommitted",
    "UnknownEntry",
    "decode",
    "encode",
]

FORMAT_VERSION = 1

_MEMBER_SET, _MEMBER_REMOVED, _OFFSETS_COMMITTED, _GROUP_DELETED = range(4)
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


Entry = MemberSet | MemberRemoved | OffsetsCommitted | GroupDeleted


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
    raise UnknownEntry(f"entry kind {kind!r}: this node reads kinds 0..{_GROUP_DELETED}")


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
