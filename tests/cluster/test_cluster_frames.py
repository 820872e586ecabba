"""The peer Raft frame: what a node writes is the protobuf encoding of RaftFrame, it parses back
to the same messages, and malformed bytes raise FrameError only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.frames import FrameError, encode_frame, parse_frame
from proto import peer_pb2

MESSAGES = [
    (b"orders/0", [b"\xc1head", b"x" * 70_000], 5 + 70_000),
    (b"orders/1", [b"small"], 5),
    ("t\u00e9/2".encode(), [b""], 0),
]


def test_a_frame_is_a_raft_frame_message_and_parses_back() -> None:
    data = encode_frame(42, "n1", "n2", MESSAGES)
    as_protobuf = peer_pb2.RaftFrame.FromString(data)  # any protobuf reader agrees
    assert as_protobuf.SerializeToString() == data
    frame = parse_frame(data)
    assert (frame.sequence, frame.from_node, frame.to_node) == (42, "n1", "n2")
    assert [(g, bytes(p)) for g, p in frame.messages] == [
        (group.decode(), b"".join(parts)) for group, parts, _ in MESSAGES
    ]
    assert all(isinstance(p, memoryview) for _, p in frame.messages)  # sliced, not copied


def test_an_empty_frame_parses() -> None:
    frame = parse_frame(encode_frame(1, "a", "b", []))
    assert frame.messages == []


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "field 1"),
        (b"\x12\x00", "field 1"),  # another field
        (b"\x0a\x05abc", "announces 5 bytes but 3"),
        (b"\x0a\x80", "cut short"),
        (peer_pb2.RaftFrame(frame=b"XX\x01" + bytes(8)).SerializeToString(), "magic"),
        (peer_pb2.RaftFrame(frame=b"FR\x03" + bytes(8)).SerializeToString(), "version 3"),
        (peer_pb2.RaftFrame(frame=b"FR\x01" + bytes(4)).SerializeToString(), "cut short"),
        (encode_frame(1, "a", "b", MESSAGES)[:-3] + b"", "announces"),
    ],
)
def test_malformed_frames_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(FrameError, match=reason):
        parse_frame(data)


def test_a_payload_length_past_the_end_is_refused() -> None:
    body = bytearray(peer_pb2.RaftFrame.FromString(encode_frame(1, "a", "b", MESSAGES[1:2])).frame)
    body[-9:-5] = (10_000).to_bytes(4, "little")  # the payload's length field
    data = peer_pb2.RaftFrame(frame=bytes(body)).SerializeToString()
    with pytest.raises(FrameError, match="overruns"):
        parse_frame(data)


def test_trailing_bytes_are_refused() -> None:
    body = peer_pb2.RaftFrame.FromString(encode_frame(1, "a", "b", MESSAGES[1:2])).frame
    data = peer_pb2.RaftFrame(frame=body + b"!").SerializeToString()
    with pytest.raises(FrameError, match="follow the frame's last message"):
        parse_frame(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_garbage_raises_frame_error_only(body: bytes) -> None:
    try:
        parse_frame(peer_pb2.RaftFrame(frame=b"FR\x01" + body).SerializeToString())
    except FrameError:
        pass


def test_node_ids_longer_than_a_byte_can_count_are_refused() -> None:
    with pytest.raises(FrameError, match="longer than 255"):
        encode_frame(1, "n" * 300, "b", [])


def test_a_version_1_frame_of_an_older_node_is_still_read() -> None:
    body = bytearray(peer_pb2.RaftFrame.FromString(encode_frame(4, "a", "b", MESSAGES)).frame)
    assert body[2] == 2  # what this version writes
    body[2] = 1
    frame = parse_frame(peer_pb2.RaftFrame(frame=bytes(body)).SerializeToString())
    assert (frame.sequence, frame.from_node, frame.to_node) == (4, "a", "b")
    assert [(g, bytes(p)) for g, p in frame.messages] == [
        (g.decode(), b"".join(parts)) for g, parts, _ in MESSAGES
    ]
