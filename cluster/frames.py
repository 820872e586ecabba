"""The frame of the peer Raft stream: the messages of many groups for one destination.

Layout (proto/peer.proto, message RaftFrame; integers little-endian):

    0x0A | varint n      the protobuf encoding of RaftFrame's field 1 (bytes, n long), then
    "FR" | u8 version | u64 sequence | u8 len + from_node | u8 len + to_node | u32 count
    count x (u16 len + group | u32 len + payload)

`encode_frame` builds the whole message, protobuf prefix included, with one `b"".join` over the
pieces it is given (a message's payload may be several pieces: an AppendRequest's entry data are
pieces of their own, see `raft.codec.encode_message_parts`), so a batch's bytes are copied once
on the way out. `parse_frame` slices the received bytes: every payload is a memoryview into
them. Malformed input raises `FrameError`, never another exception.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from cluster.errors import ClusterError

__all__ = ["FORMAT_VERSION", "Frame", "FrameError", "encode_frame", "parse_frame"]

# 2: a group may end in `@tag`, the topic incarnation's (`cluster.replica.Replica.wire_group`).
# Frames of version 1 (untagged groups) are still read; a node older than version 2 refuses the
# newer frames, with a FrameError naming the version, rather than dropping their messages.
FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_MAGIC = b"FR"
_TAG = 0x0A  # field 1, wire type 2 (length-delimited)
_HEAD = struct.Struct("<2sBQ")
_COUNT = struct.Struct("<I")
_GROUP = struct.Struct("<H")
_PAYLOAD = struct.Struct("<I")


class FrameError(ClusterError, ValueError):
    """A peer sent bytes that are not a well-formed frame."""


@dataclass(frozen=True, slots=True)
class Frame:
    sequence: int
    from_node: str
    to_node: str
    messages: list[tuple[str, bytes | memoryview]]  # payloads: views into the frame


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _short_string(text: str, what: str) -> bytes:
    data = text.encode()
    if len(data) > 255:
        raise FrameError(f"{what} {text!r} is longer than 255 bytes")
    return bytes((len(data),)) + data


def encode_frame(
    sequence: int,
    from_node: str,
    to_node: str,
    messages: Sequence[tuple[bytes, Sequence[bytes], int]],
) -> bytes:
    """The whole gRPC message of one frame. `messages`: (group as UTF-8, payload pieces,
    payload length) each."""
    pieces: list[bytes] = [
        _HEAD.pack(_MAGIC, FORMAT_VERSION, sequence),
        _short_string(from_node, "from_node"),
        _short_string(to_node, "to_node"),
        _COUNT.pack(len(messages)),
    ]
    for group, parts, size in messages:
        pieces.append(_GROUP.pack(len(group)))
        pieces.append(group)
        pieces.append(_PAYLOAD.pack(size))
        pieces.extend(parts)
    body_length = sum(len(piece) for piece in pieces)
    return b"".join([bytes((_TAG,)), _varint(body_length), *pieces])


def parse_frame(data: bytes | memoryview) -> Frame:
    """The frame in one received gRPC message (see the module docstring)."""
    view = memoryview(data)
    if not view or view[0] != _TAG:
        raise FrameError("a RaftFrame message must hold field 1 (frame) alone")
    length, at = 0, 1
    for shift in range(0, 64, 7):
        if at >= len(view):
            raise FrameError("the frame's length prefix is cut short")
        byte = view[at]
        at += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
    else:
        raise FrameError("the frame's length prefix is longer than 10 bytes")
    if length != len(view) - at:
        raise FrameError(f"the frame announces {length} bytes but {len(view) - at} follow")
    try:
        magic, version, sequence = _HEAD.unpack_from(view, at)
        if magic != _MAGIC or version not in _READABLE_VERSIONS:
            raise FrameError(
                f"frame magic {bytes(magic)!r} version {version}: expected {_MAGIC!r} "
                f"version {' or '.join(map(str, _READABLE_VERSIONS))}"
            )
        at += _HEAD.size
        from_node, at = _read_short(view, at)
        to_node, at = _read_short(view, at)
        (count,) = _COUNT.unpack_from(view, at)
        at += _COUNT.size
        messages: list[tuple[str, bytes | memoryview]] = []
        for _ in range(count):
            (group_length,) = _GROUP.unpack_from(view, at)
            at += _GROUP.size
            group = _text(view, at, group_length)
            at += group_length
            (size,) = _PAYLOAD.unpack_from(view, at)
            at += _PAYLOAD.size
            if at + size > len(view):
                raise FrameError(f"a payload of {size} bytes for {group} overruns the frame")
            messages.append((group, view[at : at + size]))
            at += size
    except struct.error as error:
        raise FrameError(f"the frame is cut short: {error}") from None
    if at != len(view):
        raise FrameError(f"{len(view) - at} bytes follow the frame's last message")
    return Frame(sequence, from_node, to_node, messages)


def _read_short(view: memoryview, at: int) -> tuple[str, int]:
    if at >= len(view):
        raise FrameError("the frame is cut short in a node id")
    length = view[at]
    return _text(view, at + 1, length), at + 1 + length


def _text(view: memoryview, at: int, length: int) -> str:
    if at + length > len(view):
        raise FrameError("the frame is cut short in a name")
    try:
        return str(view[at : at + length], "utf-8")
    except UnicodeDecodeError:
        raise FrameError("a name in the frame is not UTF-8") from None
