"""The entries codec: exact round trips, and `UnknownEntry` (only) for what this version cannot
read — a newer format version or kind, or bytes that are not an entry."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.coordinator import Coordinator, UnknownEntry
from consumers.entries import (
    FORMAT_VERSION,
    Entry,
    GroupDeleted,
    MemberRecord,
    MemberRemoved,
    MemberSet,
    OffsetsCommitted,
    decode,
    encode,
)

names = st.text(min_size=1, max_size=12)
ints = st.integers(min_value=0, max_value=2**63 - 1)
members = st.builds(
    MemberRecord,
    id=names,
    serial=ints,
    instance_id=st.none() | names,
    epoch=ints,
    topics=st.lists(names, max_size=4).map(tuple),
    session_timeout_ms=ints,
    assignment=st.lists(st.tuples(names, ints, ints), max_size=5).map(tuple),
)
entries: st.SearchStrategy[Entry] = st.one_of(
    st.builds(MemberSet, group=names, kind=names, member=members),
    st.builds(MemberRemoved, group=names, member_id=names),
    st.builds(
        OffsetsCommitted,
        group=names,
        offsets=st.lists(st.tuples(names, names, ints, ints), max_size=5).map(tuple),
    ),
    st.builds(GroupDeleted, group=names),
)


@settings(max_examples=300, deadline=None)
@given(entries)
def test_every_entry_round_trips(entry: Entry) -> None:
    assert decode(encode(entry)) == entry


def test_the_format_version_comes_first() -> None:
    assert msgpack.unpackb(encode(GroupDeleted("g")))[0] == FORMAT_VERSION


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            msgpack.packb([FORMAT_VERSION + 1, 0, "g"]),
            "format version 2: this node reads version 1",
        ),
        (msgpack.packb([FORMAT_VERSION, 99, "g"]), "entry kind 99"),
        (msgpack.packb([FORMAT_VERSION, 1, "g"]), "malformed entry of kind 1"),
        (msgpack.packb([FORMAT_VERSION, 1, 5, "m"]), "expected a string"),
        (msgpack.packb([FORMAT_VERSION, 3, "g", "extra"]), "malformed entry of kind 3"),
        (msgpack.packb({"v": 1}), "an entry is an array"),
        (b"", "not a msgpack entry"),
        (b"\xc1", "not a msgpack entry"),
        (encode(GroupDeleted("g"))[:-1], "not a msgpack entry"),
        (encode(GroupDeleted("g")) + b"\x00", "not a msgpack entry"),
    ],
)
def test_what_cannot_be_read_raises_unknown_entry_naming_why(data: bytes, message: str) -> None:
    with pytest.raises(UnknownEntry, match=message):
        decode(data)
    c = Coordinator()
    with pytest.raises(UnknownEntry):
        c.load(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_unknown_entry(data: bytes) -> None:
    try:
        decode(data)
    except UnknownEntry:
        pass
