"""The queue entries' codec: exact round trips in the same FORMAT_VERSION, and `UnknownEntry`
(only) for a queue entry this version cannot read."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.coordinator import Coordinator, UnknownEntry
from consumers.entries import (
    FORMAT_VERSION,
    Entry,
    QueueDeadLettered,
    QueueLeased,
    QueueOptionsSet,
    QueueSettled,
    decode,
    encode,
)
from consumers.queue_types import QueueOptions

names = st.text(min_size=1, max_size=12)
ints = st.integers(min_value=0, max_value=2**63 - 1)
hashes = st.none() | st.integers(min_value=0, max_value=2**64 - 1)
options = st.builds(
    QueueOptions,
    max_deliveries=ints,
    dead_letter_topic=st.none() | names,
    ordering=names,
    backoff_ms=st.lists(ints, max_size=4).map(tuple),
    max_in_flight=ints,
)


def tuples(*parts: st.SearchStrategy[object]) -> st.SearchStrategy[tuple[object, ...]]:
    return st.lists(st.tuples(*parts), max_size=4).map(tuple)


entries: st.SearchStrategy[Entry] = st.one_of(
    st.builds(QueueOptionsSet, group=names, options=options),
    st.builds(
        QueueLeased,
        group=names,
        topic=names,
        topic_uid=names,
        partition=ints,
        log_start=ints,
        member_id=names,
        deadline_ms=ints,
        next_offset=ints,
        leases=tuples(ints, ints, hashes),
        skipped=tuples(ints, hashes),
    ),
    st.builds(
        QueueSettled,
        group=names,
        topic=names,
        topic_uid=names,
        partition=ints,
        acked=st.lists(ints, max_size=4).map(tuple),
        waiting=tuples(ints, ints, ints),
        extended=tuples(ints, ints),
        dead=tuples(ints, ints, ints, names, names),
    ),
    st.builds(
        QueueDeadLettered,
        group=names,
        topic=names,
        topic_uid=names,
        partition=ints,
        offsets=st.lists(ints, max_size=4).map(tuple),
        gone=st.lists(ints, max_size=4).map(tuple),
    ),
)


@settings(max_examples=300, deadline=None)
@given(entries)
def test_every_queue_entry_round_trips(entry: Entry) -> None:
    assert decode(encode(entry)) == entry
    assert msgpack.unpackb(encode(entry))[0] == FORMAT_VERSION


GOOD = encode(QueueSettled("g", "t", "u", 0, (1,), ((2, 3, 1),), ((4, 5),), ((6, 0, 1, "r", "d"),)))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (msgpack.packb([FORMAT_VERSION, 8, "g"]), "entry kind 8: this node reads kinds 0..7"),
        (msgpack.packb([FORMAT_VERSION, 4, "g", 5]), "malformed entry of kind 4"),
        (msgpack.packb([FORMAT_VERSION, 4, "g", 5, None, "none", [1, "x"], 9]), "expected an int"),
        (
            msgpack.packb([FORMAT_VERSION, 5, "g", "t", "u", 0, 0, "m", 1, 2, [[1, 2]], []]),
            "kind 5",
        ),
        (
            msgpack.packb([FORMAT_VERSION, 5, "g", "t", "u", 0, 0, "m", 1, 2, [[1, 2, "h"]], []]),
            "expected an integer",
        ),
        (
            msgpack.packb([FORMAT_VERSION, 6, "g", "t", "u", 0, [], [], [], [[1, 2, 3, 4]]]),
            "kind 6",
        ),
        (msgpack.packb([FORMAT_VERSION, 7, "g", "t", "u", 0, "1", []]), "expected an array"),
        (msgpack.packb([FORMAT_VERSION, 7, "g", "t", "u", 0, []]), "malformed entry of kind 7"),
        (msgpack.packb([FORMAT_VERSION + 1, 6, "g"]), "format version 2"),
        (GOOD[:-1], "not a msgpack entry"),
    ],
)
def test_a_bad_queue_entry_raises_unknown_entry_naming_why(data: bytes, message: str) -> None:
    with pytest.raises(UnknownEntry, match=message):
        decode(data)
    with pytest.raises(UnknownEntry):
        Coordinator().load(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(GOOD) - 1), st.integers(0, 255))
def test_a_corrupted_queue_entry_decodes_or_raises_unknown_entry(at: int, byte: int) -> None:
    data = GOOD[:at] + bytes([byte]) + GOOD[at + 1 :]
    try:
        decode(data)
    except UnknownEntry:
        pass
