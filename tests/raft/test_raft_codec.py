"""Every message and configuration entry survives a msgpack round trip, and malformed bytes
raise `CodecError` (never another exception, never a half-built message)."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raft.codec import (
    decode_config_entry,
    decode_configuration,
    decode_message,
    encode_config_entry,
    encode_configuration,
    encode_message,
    encode_message_parts,
)
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

ids = st.text(min_size=1, max_size=8)
naturals = st.integers(min_value=0, max_value=2**63)
configurations = st.builds(
    lambda voters, learners: Configuration(frozenset(voters), frozenset(learners - voters)),
    st.sets(ids, max_size=5),
    st.sets(ids, max_size=3),
)


@st.composite
def append_requests(draw: st.DrawFn) -> AppendRequest:
    prev = draw(st.integers(0, 1000))
    raw = draw(
        st.lists(
            st.tuples(naturals, st.integers(0, 50), st.binary(max_size=40), naturals), max_size=5
        )
    )
    entries = tuple(
        Entry(prev + 1 + i, term, entry_kind(count, len(data)), count, data, ts)
        for i, (term, count, data, ts) in enumerate(raw)
    )
    return AppendRequest(
        draw(naturals), draw(ids), draw(ids), prev, draw(naturals), draw(naturals), entries
    )


messages = st.one_of(
    append_requests(),
    st.builds(AppendResponse, naturals, ids, ids, naturals, st.booleans(), naturals, naturals),
    st.builds(VoteRequest, naturals, ids, ids, naturals, naturals, st.booleans(), st.booleans()),
    st.builds(VoteResponse, naturals, ids, ids, st.booleans(), st.booleans()),
    st.builds(Heartbeat, naturals, ids, ids, naturals, st.booleans(), naturals),
    st.builds(HeartbeatResponse, naturals, ids, ids, naturals),
    st.builds(TimeoutNow, naturals, ids, ids),
    st.builds(Removed, naturals, ids, ids, naturals),
    st.builds(
        LogReset,
        naturals,
        ids,
        ids,
        st.builds(LogBoundary, naturals, naturals, naturals, st.none() | configurations),
        st.binary(max_size=40),  # the host's state; empty: not sent (what older nodes read)
    ),
)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_every_message_round_trips(message: Message) -> None:
    assert decode_message(encode_message(message)) == message


def test_encoding_is_compact() -> None:
    heartbeat = encode_message(Heartbeat(7, "n1", "n2", 1234, False, 99))
    assert len(heartbeat) <= 18
    entry = Entry(101, 7, entry_kind(3, 100), 3, b"x" * 100, 5)
    append = encode_message(AppendRequest(7, "n1", "n2", 100, 7, 99, (entry,)))
    assert len(append) <= 100 + 30  # the batch bytes plus a few bytes of framing


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60))
def test_garbage_raises_codec_error_only(data: bytes) -> None:
    try:
        decode_message(data)
    except CodecError:
        pass


def test_entry_data_are_pieces_of_their_own_never_packed() -> None:
    data = b"batch" * 1000
    entries = (
        Entry(11, 3, entry_kind(2, len(data)), 2, data, 7),
        Entry(12, 3, entry_kind(0, 0), 0, b"", 0),
    )
    request = AppendRequest(3, "n1", "n2", 10, 3, 9, entries)
    parts = encode_message_parts(request)
    assert parts[2] is data  # the very object: the transport's join is the one copy
    assert decode_message(b"".join(parts)) == request
    assert decode_message(memoryview(b"".join(parts))) == request


def _split(head: list[object], tail: bytes = b"", length: int | None = None) -> bytes:
    packed: bytes = msgpack.packb(head)
    size = len(packed) if length is None else length
    return b"\xc1" + size.to_bytes(4, "little") + packed + tail


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1\x05",  # shorter than the prefix
        _split([2, 1, "a", "b", 0, 0, 0, [[1, 1, 3, 0]]], b"abc", length=500),  # head overruns
        _split([2, 1, "a", "b", 0, 0, 0, [[1, 1, 9, 0]]], b"abc"),  # data overruns
        _split([2, 1, "a", "b", 0, 0, 0, [[1, 1, 2, 0]]], b"abc"),  # bytes after the data
        _split([2, 1, "a", "b", 0, 0, 0, []]),  # no entries
        _split([3, 1, "a", "b", 0, 0, 0, [[1, 1, 0, 0]]]),  # not an AppendRequest
        _split([2, 1, "a", "b", 0, 0, 0, [[1, 1, -1, 0]]]),  # negative length
        _split([2, 1, "a", 7, 0, 0, 0, [[1, 1, 0, 0]]]),  # recipient not a string
    ],
)
def test_malformed_split_appends_are_refused(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode_message(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60))
def test_split_garbage_raises_codec_error_only(data: bytes) -> None:
    try:
        decode_message(b"\xc1" + data)
    except CodecError:
        pass


@pytest.mark.parametrize(
    "fields",
    [
        [99, 1, "a", "b"],  # unknown type
        [5, 1, "a"],  # too short
        [5, -1, "a", "b"],  # negative term
        [5, 1, 2, "b"],  # sender not a string
        [4, 1, "a", "b", 5, "yes"],  # quiesce not a boolean
        [2, 1, "a", "b", 0, 0, 0, [[1, 1, "text", 0]]],  # entry data not bytes
        [2, 1, "a", "b", 0, 0, 0, "entries"],
        [6, 1, "a", "b", 0, 0, 0, [["a"], [3]]],  # a member id that is not a string
        [6, 1, "a", "b", 0, 0, 0, [["a"], ["a"]]],  # voter and learner at once
        [6, 1, "a", "b", 0, 0, 0, None, "state"],  # a reset's state not bytes
        [6, 1, "a", "b", 0, 0, 0, None, b"state", 1],  # a reset with a field too many
    ],
)
def test_malformed_messages_are_refused(fields: list[object]) -> None:
    with pytest.raises(CodecError):
        decode_message(msgpack.packb(fields))


@given(configurations, st.sampled_from(list(ConfigChangeOp)), ids)
def test_config_entries_round_trip(config: Configuration, op: ConfigChangeOp, node: str) -> None:
    change = ConfigChange(op, node)
    assert decode_config_entry(encode_config_entry(change, config)) == (change, config)
    assert decode_configuration(encode_configuration(config)) == config


def test_malformed_config_entries_are_refused() -> None:
    for data in (b"", b"\xc1", msgpack.packb([9, "a", [], []]), msgpack.packb([0, 1, [], []])):
        with pytest.raises(CodecError):
            decode_config_entry(data)
    with pytest.raises(CodecError):
        encode_message("not a message")  # type: ignore[arg-type]
