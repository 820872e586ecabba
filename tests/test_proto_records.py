"""Record batches: round trips, O(1) header validation, the body check, and malformed input."""

from __future__ import annotations

import msgpack
import pytest
from harness import batch_of_body
from hypothesis import given
from hypothesis import strategies as st

from proto.records import (
    BATCH_HEADER_SIZE,
    CHECK_CHUNK_RECORDS,
    WHOLE_CHECK_RECORDS,
    InvalidBatch,
    check_body,
    decode_batch,
    encode_batch,
    encode_rows,
    read_header,
)

records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=10)), max_size=3),
        st.integers(0, 2**40),
    ),
    min_size=1,
    max_size=40,
)


@given(records, st.integers(0, 2**63 - 1), st.integers(0, 2**40), st.integers(0, 2**50))
def test_batches_round_trip(rows, producer_id, sequence, base_offset) -> None:  # type: ignore[no-untyped-def]
    batch = encode_batch(rows, producer_id=producer_id, base_sequence=sequence)
    header = read_header(batch)
    assert (header.record_count, header.producer_id, header.base_sequence) == (
        len(rows),
        producer_id,
        sequence,
    )
    decoded = decode_batch(batch, base_offset)
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(rows)))
    for record, (key, value, headers, timestamp) in zip(decoded, rows, strict=True):
        assert (record.key, record.value, record.timestamp_ms) == (key, value, timestamp)
        assert record.headers == tuple(headers)


def test_large_batches_use_wide_array_headers() -> None:
    for count in (15, 16, 70_000):
        batch = encode_batch([(None, b"v", None, 0)] * count)
        assert read_header(batch).record_count == count


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:10], "shorter than its 40-byte header"),
        (lambda b: b"\x00" + b[1:], "magic byte is 0x0"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "checksum mismatch"),
        (lambda b: b[:4] + (0).to_bytes(4, "little") + b[8:], "record_count=0"),
        (lambda b: b[:4] + (3).to_bytes(4, "little") + b[8:], "does not hold the 3 records"),
    ],
)
def test_malformed_batches_are_refused_with_the_reason(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    batch = encode_batch([(b"k", b"v", None, 5), (None, b"w", [("h", b"x")], 6)])
    assert len(batch) > BATCH_HEADER_SIZE
    with pytest.raises(InvalidBatch, match=message):
        read_header(mutate(batch))


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(InvalidBatch, match="at least one record"):
        encode_batch([])


ROW = [b"k", b"v", [["h", b"x"]], 5]
MALFORMED_BODIES = [
    (msgpack.packb([[b"k", b"v", []]]), 1, "record 0 is an array of 3"),
    (msgpack.packb([ROW, [b"k", 7, [], 5]]), 2, "record 1: value is int; expected bin"),
    (msgpack.packb([ROW, ["k", b"v", [], 5]]), 2, "record 1: key is str; expected bin or nil"),
    (msgpack.packb([ROW, [None, b"v", [], 5.5]]), 2, "timestamp_delta_ms is float"),
    (msgpack.packb([ROW, [None, b"v", [[b"h", b"x"]], 5]]), 2, r"header 0 is \[bin, bin\]"),
    (msgpack.packb([ROW, [None, b"v", {"h": b"x"}, 5]]), 2, "not valid msgpack"),
    (msgpack.packb([ROW, ROW])[:-3], 2, "ends"),
    (msgpack.packb([ROW, ROW]) + b"\xc0", 2, "1 bytes after its 2 records"),
    (b"\x92" + msgpack.packb(ROW) + b"\xc1", 2, "not valid msgpack"),
    (b"\x92" + msgpack.packb(ROW), 2, "ends after 1 of its 2 records"),
    # what a one-pass typed decoder could let through: a fifth field (array-like structs accept
    # trailing fields unless told not to), a bool for an int, nil for a value, a header name
    # that is not UTF-8, a header of three, a record that is a map
    (msgpack.packb([ROW, [b"k", b"v", [], 5, 6]]), 2, "record 1 is an array of 5"),
    (msgpack.packb([ROW, [b"k", b"v", [], True]]), 2, "timestamp_delta_ms is bool"),
    (msgpack.packb([ROW, [b"k", None, [], 5]]), 2, "record 1: value is nil; expected bin"),
    (b"\x91\x94\xc0\xc4\x01v\x91\x92\xa1\xff\xc4\x00\x05", 1, "UnicodeDecodeError"),
    (msgpack.packb([[b"k", b"v", [["h", b"x", b"y"]], 5]]), 1, "header 0 is an array of 3"),
    (msgpack.packb([{"k": b"v"}]), 1, "not valid msgpack"),
    (msgpack.packb([[b"k", b"v", b"headers", 5]]), 1, "headers is bin"),
]
# both ways `check_body` checks a body: one msgspec pass (the message from the chunked check),
# and the chunked check alone (batches of more than WHOLE_CHECK_RECORDS records)
CHECK_WAYS = {"one-pass": WHOLE_CHECK_RECORDS, "chunked": 0}


@pytest.mark.parametrize("whole_up_to", CHECK_WAYS.values(), ids=CHECK_WAYS.keys())
@pytest.mark.parametrize(
    ("body", "count", "message"), MALFORMED_BODIES, ids=[m for _, _, m in MALFORMED_BODIES]
)
def test_a_malformed_body_is_refused_naming_what_is_wrong(
    body: bytes, count: int, message: str, whole_up_to: int
) -> None:
    batch = batch_of_body(body, count)
    read_header(batch)  # the header, checksum and count are right: only the body is wrong
    with pytest.raises(InvalidBatch, match=message):
        check_body(batch, whole_up_to=whole_up_to)


@given(records)
def test_every_encoded_batch_passes_the_body_check(rows) -> None:  # type: ignore[no-untyped-def]
    batch = encode_batch(rows)
    check_body(batch)
    check_body(batch, whole_up_to=0)


def test_a_record_with_more_headers_than_the_batch_has_records_passes_the_body_check() -> None:
    """A dead letter is one record with its source's headers and five of its own."""
    headers = [(f"h{n}", b"x") for n in range(6)]
    for rows in ([(b"k", b"v", headers, 0)], [(None, b"v", headers * 5, 0), (None, b"w", [], 0)]):
        batch = encode_batch(rows)
        check_body(batch)
        assert [len(r.headers) for r in decode_batch(batch, 0)] == [len(h) for _, _, h, _ in rows]


@pytest.mark.parametrize("whole_up_to", CHECK_WAYS.values(), ids=CHECK_WAYS.keys())
def test_the_body_check_spans_chunks(whole_up_to: int) -> None:
    count = 2 * CHECK_CHUNK_RECORDS + 5
    rows: list[list[object]] = [[None, b"v", [], n] for n in range(count)]
    check_body(batch_of_body(msgpack.packb(rows), count), whole_up_to=whole_up_to)
    rows[CHECK_CHUNK_RECORDS + 3][1] = "text"
    with pytest.raises(InvalidBatch, match=f"record {CHECK_CHUNK_RECORDS + 3}: value is str"):
        check_body(batch_of_body(msgpack.packb(rows), count), whole_up_to=whole_up_to)


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.binary(max_size=8)
    | st.text(max_size=8)
    | st.floats(allow_nan=False),
    lambda children: st.lists(children, max_size=5),
    max_leaves=20,
)


# rows near the stored shape, each field right or arbitrary, and arbitrary values
near_rows = (
    st.tuples(
        st.none() | st.binary(max_size=4) | msgpack_values,
        st.binary(max_size=4) | msgpack_values,
        st.lists(st.tuples(st.text(max_size=3), st.binary(max_size=3)) | msgpack_values, max_size=2)
        | msgpack_values,
        st.integers(-(2**40), 2**40) | msgpack_values,
    ).map(list)
    | st.lists(msgpack_values, min_size=3, max_size=5)
    | msgpack_values
)


@given(st.lists(near_rows, min_size=1, max_size=6))
def test_whatever_the_body_check_accepts_a_consumer_can_decode(rows) -> None:  # type: ignore[no-untyped-def]
    """The check exists so that no consumer ever fails on a committed batch; and it only ever
    answers InvalidBatch (anything else would reach the client as UNKNOWN). Its one pass
    refuses exactly what the chunked check refuses (which names the fault)."""
    batch = batch_of_body(msgpack.packb(rows), len(rows))
    verdicts = []
    for whole_up_to in CHECK_WAYS.values():
        try:
            check_body(batch, whole_up_to=whole_up_to)
            verdicts.append("accepted")
        except InvalidBatch:
            verdicts.append("refused")
    assert verdicts[0] == verdicts[1], f"one pass {verdicts[0]}, chunked {verdicts[1]}"
    if verdicts[0] == "accepted":
        assert len(decode_batch(batch, 0)) == len(rows)


stored_rows = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=300),
        st.binary(max_size=70_000) | st.binary(max_size=40),
        st.lists(st.tuples(st.text(max_size=300), st.binary(max_size=300)), max_size=3).map(
            lambda headers: tuple(map(tuple, headers))
        ),
        st.integers(-(2**63), 2**63 - 1),
    ),
    min_size=1,
    max_size=20,
)


@given(stored_rows)
def test_a_batch_body_is_the_bytes_msgpack_packb_makes(rows) -> None:  # type: ignore[no-untyped-def]
    """The body is encoded by msgspec (a tenth of packb's time for 1 MiB), byte for byte what
    `msgpack.packb(rows, use_bin_type=True)` makes: every int in its smallest form, bytes as
    bin, str as str, tuples as arrays (a batch is the same whichever encoder a client has)."""
    batch = encode_rows(rows, 0)
    assert batch[BATCH_HEADER_SIZE:] == msgpack.packb(rows, use_bin_type=True)
