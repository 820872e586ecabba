"""Compact msgpack encoding of membership messages.

Layout: every message is one msgpack array `[WIRE_VERSION, kind, *fields]` with positional fields
(no field names on the wire). Members are `[id, address, weight, rack, version]`, where a member
with a raft address sends `version + "+raft=" + raft_address` as its version: a node of the
release before it decodes exactly five fields and takes the version as unparsable; updates are
`[tag, *fields]`; push-pull rows are `[member, state, incarnation]`.

Contracts: `decode(encode(m)) == m` for every message; `decode` accepts only what `encode` can
produce and raises `CodecError` (naming what was wrong) for anything else, never another
exception type. A receiver that sees a `WIRE_VERSION` it does not know refuses the message.
"""

from __future__ import annotations

from typing import Any

import msgpack

from membership.errors import CodecError, InvalidMember
from membership.messages import (
    Ack,
    Gossip,
    Message,
    Nack,
    Ping,
    PingReq,
    PushPullRequest,
    PushPullResponse,
)
from membership.types import (
    RAFT_ADDRESS_MARK,
    Alive,
    Dead,
    Leave,
    Member,
    MemberRecord,
    MemberState,
    Suspect,
    Update,
)

__all__ = ["WIRE_VERSION", "decode", "encode", "encoded_update_size"]

WIRE_VERSION = 1

_PING, _ACK, _PING_REQ, _NACK, _GOSSIP, _PUSH_PULL_REQUEST, _PUSH_PULL_RESPONSE = range(7)
_ALIVE, _SUSPECT, _DEAD, _LEAVE = range(4)
_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def _member(member: Member) -> list[Any]:
    version = member.version
    if member.raft_address:
        version = f"{version}{RAFT_ADDRESS_MARK}{member.raft_address}"
    return [member.id, member.address, member.weight, member.rack, version]


def _update(update: Update) -> list[Any]:
    if isinstance(update, Alive):
        return [_ALIVE, _member(update.member), update.incarnation]
    if isinstance(update, Suspect):
        return [_SUSPECT, update.member_id, update.incarnation, update.accuser_id]
    if isinstance(update, Dead):
        return [_DEAD, update.member_id, update.incarnation, update.declared_by]
    return [_LEAVE, update.member_id, update.incarnation]


def _updates(updates: tuple[Update, ...]) -> list[Any]:
    return [_update(u) for u in updates]


def _records(records: tuple[MemberRecord, ...]) -> list[Any]:
    return [[_member(r.member), int(r.state), r.incarnation] for r in records]


def _fields(message: Message) -> list[Any]:
    match message:
        case Ping():
            return [
                _PING,
                message.sender_id,
                message.sender_address,
                message.seq_no,
                message.target_id,
                _updates(message.updates),
            ]
        case Ack() | Nack():
            kind = _ACK if isinstance(message, Ack) else _NACK
            return [
                kind,
                message.sender_id,
                message.sender_address,
                message.seq_no,
                _updates(message.updates),
            ]
        case PingReq():
            return [
                _PING_REQ,
                message.sender_id,
                message.sender_address,
                message.seq_no,
                message.target_id,
                message.target_address,
                _updates(message.updates),
            ]
        case Gossip():
            return [_GOSSIP, message.sender_id, message.sender_address, _updates(message.updates)]
        case PushPullRequest():
            return [
                _PUSH_PULL_REQUEST,
                _member(message.sender),
                _records(message.states),
                message.join,
            ]
        case PushPullResponse():
            return [_PUSH_PULL_RESPONSE, _member(message.sender), _records(message.states)]
    raise CodecError(f"cannot encode {type(message).__name__}: not a membership message")


def encode(message: Message) -> bytes:
    """The wire bytes of `message`."""
    data: bytes = msgpack.packb([WIRE_VERSION, *_fields(message)], use_bin_type=True)
    return data


def encoded_update_size(update: Update) -> int:
    """Bytes `update` adds to a message's piggyback list."""
    return len(msgpack.packb(_update(update), use_bin_type=True))


# -- decoding ---------------------------------------------------------------------------------


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise CodecError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _uint(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CodecError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _list(value: Any, what: str, length: int | None = None) -> list[Any]:
    if not isinstance(value, list):
        raise CodecError(f"{what} must be an array, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise CodecError(f"{what} must have {length} elements, got {len(value)}")
    return value


def _decode_member(value: Any) -> Member:
    fields = _list(value, "member", 5)
    weight = fields[2]
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise CodecError(f"member weight must be a number, got {weight!r}")
    version, _, raft_address = _str(fields[4], "member version").partition(RAFT_ADDRESS_MARK)
    try:
        return Member(
            id=_str(fields[0], "member id"),
            address=_str(fields[1], "member address"),
            weight=weight,
            rack=_str(fields[3], "member rack"),
            version=version,
            raft_address=raft_address,
        )
    except InvalidMember as error:
        raise CodecError(f"bad member: {error}") from error


def _decode_update(value: Any) -> Update:
    fields = _list(value, "update")
    if not fields:
        raise CodecError("update must not be empty")
    tag = fields[0]
    if tag == _ALIVE and len(fields) == 3:
        return Alive(_decode_member(fields[1]), _uint(fields[2], "incarnation"))
    if tag == _SUSPECT and len(fields) == 4:
        return Suspect(
            _str(fields[1], "member id"),
            _uint(fields[2], "incarnation"),
            _str(fields[3], "accuser id"),
        )
    if tag == _DEAD and len(fields) == 4:
        return Dead(
            _str(fields[1], "member id"),
            _uint(fields[2], "incarnation"),
            _str(fields[3], "declared_by"),
        )
    if tag == _LEAVE and len(fields) == 3:
        return Leave(_str(fields[1], "member id"), _uint(fields[2], "incarnation"))
    raise CodecError(f"unknown update tag {tag!r} with {len(fields)} fields (valid tags 0..3)")


def _decode_updates(value: Any) -> tuple[Update, ...]:
    return tuple(_decode_update(u) for u in _list(value, "updates"))


def _decode_records(value: Any) -> tuple[MemberRecord, ...]:
    records = []
    for row in _list(value, "states"):
        fields = _list(row, "member record", 3)
        state = _uint(fields[1], "member state")
        if state > MemberState.LEFT:
            raise CodecError(f"member state {state} is not valid (valid 0..3)")
        records.append(
            MemberRecord(
                _decode_member(fields[0]), MemberState(state), _uint(fields[2], "incarnation")
            )
        )
    return tuple(records)


def _decode_fields(kind: Any, f: list[Any]) -> Message:
    if kind == _PING and len(f) == 5:
        return Ping(
            _str(f[0], "sender id"),
            _str(f[1], "sender address"),
            _uint(f[2], "seq_no"),
            _str(f[3], "target id"),
            _decode_updates(f[4]),
        )
    if kind in (_ACK, _NACK) and len(f) == 4:
        cls = Ack if kind == _ACK else Nack
        return cls(
            _str(f[0], "sender id"),
            _str(f[1], "sender address"),
            _uint(f[2], "seq_no"),
            _decode_updates(f[3]),
        )
    if kind == _PING_REQ and len(f) == 6:
        return PingReq(
            _str(f[0], "sender id"),
            _str(f[1], "sender address"),
            _uint(f[2], "seq_no"),
            _str(f[3], "target id"),
            _str(f[4], "target address"),
            _decode_updates(f[5]),
        )
    if kind == _GOSSIP and len(f) == 3:
        return Gossip(_str(f[0], "sender id"), _str(f[1], "sender address"), _decode_updates(f[2]))
    if kind == _PUSH_PULL_REQUEST and len(f) == 3:
        if not isinstance(f[2], bool):
            raise CodecError(f"join flag must be a boolean, got {f[2]!r}")
        return PushPullRequest(_decode_member(f[0]), _decode_records(f[1]), f[2])
    if kind == _PUSH_PULL_RESPONSE and len(f) == 2:
        return PushPullResponse(_decode_member(f[0]), _decode_records(f[1]))
    raise CodecError(f"unknown message kind {kind!r} with {len(f)} fields (valid kinds 0..6)")


def decode(data: bytes | bytearray | memoryview) -> Message:
    """The message in `data`; `CodecError` when `data` is not exactly one well-formed message."""
    if len(data) > _MAX_MESSAGE_BYTES:
        raise CodecError(f"message of {len(data)} bytes exceeds {_MAX_MESSAGE_BYTES} bytes")
    try:
        value = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise CodecError(f"not a msgpack message: {error}") from error
    outer = _list(value, "message")
    if len(outer) < 2:
        raise CodecError(f"message must hold a version and a kind, got {len(outer)} elements")
    if outer[0] != WIRE_VERSION:
        raise CodecError(f"wire version {outer[0]!r} is not supported (this node speaks 1)")
    return _decode_fields(outer[1], outer[2:])
