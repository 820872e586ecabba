"""Compact msgpack encodings of Raft messages and configuration entries.

A message is one msgpack array whose first element is its type code, followed by the fields in
declaration order; booleans that are usually false are packed into one flags integer. An
AppendRequest without entries is [2, term, sender, recipient, prev_index, prev_term, commit, []].

One that carries entries keeps their data out of the msgpack, so the batch bytes are never
packed: `encode_message_parts` returns the pieces, which the transport joins into its frame
(the only copy of the data on the way out). The entries are consecutive, so only the first
index is sent; entry i has index prev_index + 1 + i, and its kind follows from record_count and
data_length:

    0xC1 (a byte msgpack never uses) | u32 little-endian head length | head | data of every entry
    head = [2, term, sender, recipient, prev_index, prev_term, commit,
            [[term, record_count, data_length, timestamp_ms], ...]]

Decoding checks shapes, types and lengths and raises `CodecError` on anything else, so bytes
from the network never reach the core as a malformed message.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import msgpack

from raft.errors import CodecError
from raft.types import (
    AppendRequest,
    AppendResponse,
    ConfigChange,
    ConfigChangeOp,
    Configuration,
    Entry,
    Heartbeat,
    HeartbeatResponse,
    LogBoundary,
    LogReset,
    Message,
    Removed,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    entry_kind,
)

__all__ = [
    "decode_config_entry",
    "decode_configuration",
    "decode_message",
    "encode_config_entry",
    "encode_configuration",
    "encode_message",
    "encode_message_parts",
    "is_heartbeat",
]

_SPLIT = 0xC1  # first byte of an AppendRequest whose entry data follows its msgpack head
_SPLIT_HEAD = struct.Struct("<BI")

(_VOTE, _VOTE_RESP, _APPEND, _APPEND_RESP, _HEARTBEAT, _HEARTBEAT_RESP, _RESET, _TIMEOUT,
 _REMOVED) = range(9)  # fmt: skip
_PRE_VOTE, _TRANSFER = 1, 2
_HEARTBEAT_HEAD = 0x97  # msgpack's array of 7: a Heartbeat's fields (`_pack`)


def is_heartbeat(payload: bytes | memoryview) -> bool:
    """Is `payload` an encoded `Heartbeat` (read from its first two bytes, not decoded)? A host
    behind its inbox drops a heartbeat a newer one of the same group and sender follows."""
    return len(payload) > 1 and payload[0] == _HEARTBEAT_HEAD and payload[1] == _HEARTBEAT


def encode_message(message: Message) -> bytes:
    parts = encode_message_parts(message)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def encode_message_parts(message: Message) -> list[bytes]:
    """The encoding of `message` as pieces to be concatenated; an AppendRequest's entry data
    are pieces of their own (not copied here)."""
    m = message
    if isinstance(m, AppendRequest) and m.entries:
        entries = [[e.term, e.record_count, len(e.data), e.timestamp_ms] for e in m.entries]
        fields = [_APPEND, m.term, m.sender, m.recipient, m.prev_index, m.prev_term, m.commit]
        fields.append(entries)
        head: bytes = msgpack.packb(fields, use_bin_type=True)
        return [_SPLIT_HEAD.pack(_SPLIT, len(head)), head, *(e.data for e in m.entries)]
    return [_pack(m)]


def _pack(m: Message) -> bytes:
    fields: list[Any]
    if isinstance(m, AppendRequest):
        fields = [_APPEND, m.term, m.sender, m.recipient, m.prev_index, m.prev_term, m.commit, []]
    elif isinstance(m, AppendResponse):
        fields = [_APPEND_RESP, m.term, m.sender, m.recipient, m.index, m.reject]
        fields += [m.hint_index, m.hint_term]
    elif isinstance(m, Heartbeat):
        fields = [_HEARTBEAT, m.term, m.sender, m.recipient, m.commit, m.quiesce, m.lease_tick]
    elif isinstance(m, HeartbeatResponse):
        fields = [_HEARTBEAT_RESP, m.term, m.sender, m.recipient, m.lease_tick]
    elif isinstance(m, VoteRequest):
        flags = (_PRE_VOTE if m.pre_vote else 0) | (_TRANSFER if m.transfer else 0)
        fields = [_VOTE, m.term, m.sender, m.recipient, m.last_log_index, m.last_log_term, flags]
    elif isinstance(m, VoteResponse):
        fields = [_VOTE_RESP, m.term, m.sender, m.recipient, m.granted, m.pre_vote]
    elif isinstance(m, LogReset):
        b = m.boundary
        config = None if b.config is None else _pack_configuration(b.config)
        fields = [_RESET, m.term, m.sender, m.recipient, b.index, b.term, b.next_offset, config]
        if m.state:  # absent when empty: what a node without host state sends and reads
            fields.append(m.state)
    elif isinstance(m, TimeoutNow):
        fields = [_TIMEOUT, m.term, m.sender, m.recipient]
    elif isinstance(m, Removed):
        fields = [_REMOVED, m.term, m.sender, m.recipient, m.config_index]
    else:
        raise CodecError(f"cannot encode {type(m).__name__}: not a Raft message")
    return msgpack.packb(fields, use_bin_type=True)  # type: ignore[no-any-return]


def decode_message(data: bytes | memoryview) -> Message:
    try:
        if len(data) and data[0] == _SPLIT:
            return _decode_split(memoryview(data))
        fields = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
        if not isinstance(fields, list) or len(fields) < 4:
            raise CodecError("a Raft message is a msgpack array of at least 4 fields")
        code, term, sender, recipient = fields[0], _int(fields[1]), fields[2], fields[3]
        if not isinstance(sender, str) or not isinstance(recipient, str):
            raise CodecError(f"sender and recipient must be strings, got {sender!r}, {recipient!r}")
        rest = fields[4:]
        return _decode_body(code, term, sender, recipient, rest)
    except CodecError:
        raise
    except (ValueError, TypeError, IndexError, msgpack.ExtraData) as error:
        raise CodecError(f"malformed Raft message: {error}") from None


def _decode_split(view: memoryview) -> AppendRequest:
    """An AppendRequest whose entry data follow its head (see the module docstring)."""
    if len(view) < _SPLIT_HEAD.size:
        raise CodecError("a split AppendRequest is shorter than its 5-byte prefix")
    _, head_length = _SPLIT_HEAD.unpack_from(view, 0)
    start = _SPLIT_HEAD.size
    if head_length > len(view) - start:
        raise CodecError(f"split AppendRequest head of {head_length} bytes overruns the message")
    fields = msgpack.unpackb(view[start : start + head_length], raw=False, use_list=True)
    if not isinstance(fields, list) or len(fields) != 8 or fields[0] != _APPEND:
        raise CodecError("a split AppendRequest head is [2, term, sender, recipient, ...]")
    term, sender, recipient = _int(fields[1]), fields[2], fields[3]
    if not isinstance(sender, str) or not isinstance(recipient, str):
        raise CodecError(f"sender and recipient must be strings, got {sender!r}, {recipient!r}")
    prev_index, prev_term, commit, rows = (
        _int(fields[4]),
        _int(fields[5]),
        _int(fields[6]),
        fields[7],
    )
    if not isinstance(rows, list) or not rows:
        raise CodecError("a split AppendRequest carries a non-empty array of entries")
    at = start + head_length
    entries = []
    for i, row in enumerate(rows):
        index = prev_index + 1 + i
        if not isinstance(row, list) or len(row) != 4:
            raise CodecError(f"entry {index} must be [term, record_count, length, timestamp_ms]")
        length = _int(row[2])
        if at + length > len(view):
            raise CodecError(f"entry {index} data ({length} bytes) overruns the message")
        data = bytes(view[at : at + length])
        at += length
        count = _int(row[1])
        entries.append(
            Entry(index, _int(row[0]), entry_kind(count, length), count, data, _int(row[3]))
        )
    if at != len(view):
        raise CodecError(f"{len(view) - at} bytes follow the last entry's data")
    return AppendRequest(term, sender, recipient, prev_index, prev_term, commit, tuple(entries))


def _decode_body(code: object, term: int, sender: str, recipient: str, rest: list[Any]) -> Message:
    decoder = _DECODERS.get(code) if type(code) is int else None
    if decoder is None:
        raise CodecError(f"unknown Raft message type code {code!r}; valid codes are 0..8")
    return decoder(term, sender, recipient, rest)


# one decoder per type code, looked up by code (the common ones are heartbeats and answers)
def _decode_append(term: int, sender: str, recipient: str, rest: list[Any]) -> Message:
    _arity(rest, 4, "AppendRequest")
    prev_index, prev_term, commit = _int(rest[0]), _int(rest[1]), _int(rest[2])
    if rest[3] != []:
        raise CodecError("an AppendRequest with entries travels in the split format")
    return AppendRequest(term, sender, recipient, prev_index, prev_term, commit, ())


def _decode_append_response(term: int, sender: str, recipient: str, rest: list[Any]) -> Message:
    _arity(rest, 4, "AppendResponse")
    index, reject, hint_index, hint_term = (
        _int(rest[0]),
        _bool(rest[1]),
        _int(rest[2]),
        _int(rest[3]),
    )
    return AppendResponse(term, sender, recipient, index, reject, hint_index, hint_term)


def _decode_heartbeat(term: int, sender: str, recipient: str, rest: list[Any]) -> Message:
    _arity(rest, 3, "Heartbeat")
    return Heartbeat(term, sender, recipient, _int(rest[0]), _bool(rest[1]), _int(rest[2]))


def _decode_heartbeat_response(term: int, sender: str, recipient: str, rest: list[Any]) -> Message:
    _arity(rest, 1, "HeartbeatResponse")
    return HeartbeatResponse(term, sender, recipient, _int(rest[0]))


def _decode_vote(term: int, sender: str, recipient: str, rest: list[Any]) -> Message:
    _arity(rest, 3, "VoteRequest")
    flags = _int(rest[2])
    return VoteRequest(
        term,
        sender,
        recipient,
        _int(rest[0]),
        _int(rest[1]),
        pre_vote=bool(flags & _PRE_VOTE),
        transfer=bool(flags & _TRANSFER),
    )


def _decode_vote_response(term: int, sender: str, recipient: str, rest: list[Any]) -> Message:
    _arity(rest, 2, "VoteResponse")
    return VoteResponse(term, sender, recipient, _bool(rest[0]), _bool(rest[1]))


def _decode_reset(term: int, sender: str, recipient: str, rest: list[Any]) -> Message:
    if len(rest) != 5:
        _arity(rest, 4, "LogReset")
    config = None if rest[3] is None else _unpack_configuration(rest[3])
    boundary = LogBoundary(_int(rest[0]), _int(rest[1]), _int(rest[2]), config)
    state = rest[4] if len(rest) == 5 else b""
    if type(state) is not bytes:
        raise CodecError(f"LogReset state must be bytes, got {type(state).__name__}")
    return LogReset(term, sender, recipient, boundary, state)


def _decode_timeout(term: int, sender: str, recipient: str, rest: list[Any]) -> Message:
    _arity(rest, 0, "TimeoutNow")
    return TimeoutNow(term, sender, recipient)


def _decode_removed(term: int, sender: str, recipient: str, rest: list[Any]) -> Message:
    _arity(rest, 1, "Removed")
    return Removed(term, sender, recipient, _int(rest[0]))


_DECODERS: dict[object, Callable[[int, str, str, list[Any]], Message]] = {
    _VOTE: _decode_vote,
    _VOTE_RESP: _decode_vote_response,
    _APPEND: _decode_append,
    _APPEND_RESP: _decode_append_response,
    _HEARTBEAT: _decode_heartbeat,
    _HEARTBEAT_RESP: _decode_heartbeat_response,
    _RESET: _decode_reset,
    _TIMEOUT: _decode_timeout,
    _REMOVED: _decode_removed,
}


def _arity(rest: list[Any], count: int, name: str) -> None:
    if len(rest) != count:
        raise CodecError(f"{name} has {len(rest) + 4} fields, expected {count + 4}")


def _int(value: object) -> int:
    if type(value) is not int or value < 0:
        raise CodecError(f"expected a non-negative integer, got {value!r}")
    return value


def _bool(value: object) -> bool:
    if type(value) is not bool:
        raise CodecError(f"expected a boolean, got {value!r}")
    return value


# -- configurations ---------------------------------------------------------------------------


def _pack_configuration(config: Configuration) -> list[list[str]]:
    return [sorted(config.voters), sorted(config.learners)]


def _unpack_configuration(raw: object) -> Configuration:
    if not isinstance(raw, list) or len(raw) != 2:
        raise CodecError("a configuration is [voters, learners]")
    voters, learners = raw
    if not isinstance(voters, list) or not isinstance(learners, list):
        raise CodecError("configuration voters and learners must be arrays")
    if not all(isinstance(n, str) for n in voters + learners):
        raise CodecError("configuration member ids must be strings")
    try:
        return Configuration(frozenset(voters), frozenset(learners))
    except ValueError as error:
        raise CodecError(str(error)) from None


def encode_configuration(config: Configuration) -> bytes:
    return msgpack.packb(_pack_configuration(config))  # type: ignore[no-any-return]


def decode_configuration(data: bytes | memoryview) -> Configuration:
    try:
        return _unpack_configuration(msgpack.unpackb(data, raw=False))
    except (ValueError, TypeError, msgpack.ExtraData) as error:
        raise CodecError(f"malformed configuration: {error}") from None


def encode_config_entry(change: ConfigChange, result: Configuration) -> bytes:
    """The data of a CONFIG entry: the change and the whole configuration it results in, so a
    node that sees the entry without its predecessors (a reset follower) knows the config."""
    packed = [int(change.op), change.node_id, *_pack_configuration(result)]
    return msgpack.packb(packed)  # type: ignore[no-any-return]


def decode_config_entry(data: bytes | memoryview) -> tuple[ConfigChange, Configuration]:
    try:
        raw = msgpack.unpackb(data, raw=False)
        if not isinstance(raw, list) or len(raw) != 4 or not isinstance(raw[1], str):
            raise CodecError("a config entry is [op, node_id, voters, learners]")
        change = ConfigChange(ConfigChangeOp(raw[0]), raw[1])
        return change, _unpack_configuration(raw[2:])
    except CodecError:
        raise
    except (ValueError, TypeError, msgpack.ExtraData) as error:
        raise CodecError(f"malformed config entry: {error}") from None
