"""The msgpack codec: exact round trips, compactness, and CodecError (only) for bad bytes."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from membership import (
    Ack,
    Alive,
    CodecError,
    Dead,
    Gossip,
    Leave,
    Member,
    MemberRecord,
    MemberState,
    Nack,
    Ping,
    PingReq,
    PushPullRequest,
    PushPullResponse,
    Suspect,
)
from membership.codec import WIRE_VERSION, decode, encode, encoded_update_size
from membership.errors import InvalidMember
from membership.types import RAFT_ADDRESS_MARK

names = st.text(min_size=1, max_size=12)
incarnations = st.integers(min_value=0, max_value=2**63 - 1)
members = st.builds(
    Member,
    id=names,
    address=names,
    weight=st.one_of(
        st.integers(min_value=1, max_value=1000),
        st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False),
    ),
    rack=st.text(max_size=8),
    version=st.text(max_size=8).filter(lambda text: RAFT_ADDRESS_MARK not in text),
    raft_address=st.text(max_size=8),
)
updates = st.one_of(
    st.builds(Alive, members, incarnations),
    st.builds(Suspect, names, incarnations, names),
    st.builds(Dead, names, incarnations, names),
    st.builds(Leave, names, incarnations),
)
update_lists = st.lists(updates, max_size=5).map(tuple)
records = st.lists(
    st.builds(MemberRecord, members, st.sampled_from(list(MemberState)), incarnations), max_size=5
).map(tuple)
seq_nos = st.integers(min_value=0, max_value=2**32)
messages = st.one_of(
    st.builds(Ping, names, names, seq_nos, names, update_lists),
    st.builds(Ack, names, names, seq_nos, update_lists),
    st.builds(PingReq, names, names, seq_nos, names, names, update_lists),
    st.builds(Nack, names, names, seq_nos, update_lists),
    st.builds(Gossip, names, names, update_lists),
    st.builds(PushPullRequest, members, records, st.booleans()),
    st.builds(PushPullResponse, members, records),
)


@given(messages)
@settings(max_examples=300, deadline=None)
def test_every_message_round_trips_exactly(message: object) -> None:
    data = encode(message)  # type: ignore[arg-type]
    assert isinstance(data, bytes)
    assert decode(data) == message


@given(updates)
def test_encoded_update_size_is_what_it_adds_to_a_message(update: object) -> None:
    empty = len(encode(Gossip("a", "b", ())))
    one = len(encode(Gossip("a", "b", (update,))))  # type: ignore[arg-type]
    assert one - empty == encoded_update_size(update)  # type: ignore[arg-type]


def test_probe_messages_are_compact() -> None:
    ping = Ping("node-17", "10.0.0.17:7946", 123456, "node-42")
    assert len(encode(ping)) <= 40
    alive = Alive(Member("node-42", "10.0.0.42:7946", 1.0, "rack-a", "0.1.0"), 7)
    assert encoded_update_size(alive) <= 50


@given(st.binary(max_size=64))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_raise_only_codec_error(data: bytes) -> None:
    try:
        decode(data)
    except CodecError:
        pass


plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=20,
)


@given(st.lists(plain, max_size=8))
@settings(max_examples=300, deadline=None)
def test_well_formed_msgpack_of_the_wrong_shape_raises_codec_error(value: list[object]) -> None:
    for candidate in ([WIRE_VERSION, *value], value):
        data = msgpack.packb(candidate)
        try:
            decode(data)
        except CodecError:
            pass


@pytest.mark.parametrize(
    "value, fragment",
    [
        ([2, 0, "a", "b", 1, "c", []], "wire version 2"),
        ([WIRE_VERSION, 9, "a"], "unknown message kind 9"),
        ([WIRE_VERSION, 0, "a", "b", -1, "c", []], "seq_no"),
        ([WIRE_VERSION, 4, "a", "b", [[7, "x", 1]]], "unknown update tag 7"),
        ([WIRE_VERSION, 6, ["a", "b", 0, "", ""], []], "weight"),
        ([WIRE_VERSION, 6, ["a", "b", 1, "", ""], [[["a", "b", 1, "", ""], 9, 1]]], "state 9"),
    ],
)
def test_bad_fields_are_named(value: list[object], fragment: str) -> None:
    with pytest.raises(CodecError, match=fragment):
        decode(msgpack.packb(value))


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(CodecError):
        decode(encode(Gossip("a", "b", ())) + b"\x00")


def test_a_raft_address_rides_in_the_version_field_an_earlier_release_reads() -> None:
    """A node of the release before raft ports decodes exactly five fields per member: the raft
    address must not add a sixth, and a member without one encodes as before."""
    member = Member("n1", "127.0.0.1:7001", 1.0, "r1", "0.4.0", raft_address="127.0.0.1:7201")
    wire = msgpack.unpackb(encode(Gossip("n1", "127.0.0.1:7001", (Alive(member, 3),))))
    assert wire[4][0][1] == ["n1", "127.0.0.1:7001", 1.0, "r1", "0.4.0+raft=127.0.0.1:7201"]
    assert decode(encode(Gossip("n1", "a", (Alive(member, 3),)))) == Gossip(
        "n1", "a", (Alive(member, 3),)
    )
    plain = Member("n2", "127.0.0.2:7001", 1.0, "", "0.3.0")
    assert msgpack.unpackb(encode(Gossip("n2", "a", (Alive(plain, 1),))))[4][0][1][4] == "0.3.0"
    with pytest.raises(InvalidMember, match=r"\+raft="):
        Member("n3", "a", version="0.4.0+raft=x")
