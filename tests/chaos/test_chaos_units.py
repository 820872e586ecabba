"""Unit tests of the pieces under the proxy: channels, slicing, Go-style JSON, toxic parsing."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.toxiproxy.channel import Channel, Chunk
from chaos.toxiproxy.errors import ApiError
from chaos.toxiproxy.gojson import decode_body, encode, float32_text, to_float32
from chaos.toxiproxy.proxy import check_listen_address
from chaos.toxiproxy.toxic_spec import Stream, ToxicType, parse_toxic_create, parse_toxic_update
from chaos.toxiproxy.toxics import slice_bounds


def _chunk(text: str) -> Chunk:
    return Chunk(text.encode(), 0.0)


def test_channel_keeps_order_and_end_of_stream_is_sticky() -> None:
    async def scenario() -> list[bytes | None]:
        channel = Channel(64)
        for text in ("a", "b", "c"):
            await channel.put(_chunk(text))
        channel.close()
        got = [await channel.get() for _ in range(5)]
        return [None if chunk is None else chunk.data for chunk in got]

    assert asyncio.run(scenario()) == [b"a", b"b", b"c", None, None]


def test_channel_put_waits_at_capacity_and_cancelled_waits_change_nothing() -> None:
    async def scenario() -> tuple[bool, bool, list[bytes]]:
        channel = Channel(1)
        await channel.put(_chunk("first"))
        blocked_put = asyncio.create_task(channel.put(_chunk("never")))
        await asyncio.sleep(0)
        put_was_blocked = not blocked_put.done()
        blocked_put.cancel()
        await asyncio.gather(blocked_put, return_exceptions=True)
        empty = Channel(1)
        blocked_get = asyncio.create_task(empty.get())
        await asyncio.sleep(0)
        blocked_get.cancel()
        await asyncio.gather(blocked_get, return_exceptions=True)
        empty.put_force(_chunk("kept"))
        channel.put_force(_chunk("forced"))
        taken = [chunk.data for chunk in channel.take_all()]
        kept = await empty.get()
        assert kept is not None
        return put_was_blocked, blocked_get.cancelled(), [*taken, kept.data]

    assert asyncio.run(scenario()) == (True, True, [b"first", b"forced", b"kept"])


@settings(derandomize=True, max_examples=200)
@given(
    length=st.integers(min_value=0, max_value=20_000),
    average_size=st.integers(min_value=1, max_value=3000),
    size_variation=st.integers(min_value=0, max_value=2000),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_slices_cover_the_data_in_order(
    length: int, average_size: int, size_variation: int, seed: int
) -> None:
    bounds = slice_bounds(length, average_size, size_variation, random.Random(seed))
    assert bounds[0][0] == 0
    assert bounds[-1][1] == length
    for (_, end), (start, _) in itertools.pairwise(bounds):
        assert end == start
    for start, end in bounds:
        assert end - start <= average_size + size_variation
        assert end > start or length == 0


def test_go_style_json() -> None:
    assert encode({"toxicity": 1.0, "x": [0.5, to_float32(0.1)], "s": "<&>"}) == (
        b'{"toxicity":1,"x":[0.5,0.1],"s":"\\u003c\\u0026\\u003e"}'
    )
    assert float32_text(to_float32(0.123456789)) == "0.12345679"
    assert decode_body(b' {"a": 1} and trailing bytes') == {"a": 1}
    with pytest.raises(ApiError, match="bad request body: EOF"):
        decode_body(b"  ")


def test_toxic_parsing_defaults_checks_and_updates() -> None:
    spec = parse_toxic_create({"type": "latency", "stream": "UpStream"}, set())
    assert (spec.name, spec.stream, spec.stream_text, spec.toxicity) == (
        "latency_UpStream",
        Stream.UPSTREAM,
        "UpStream",
        1.0,
    )
    assert spec.type is ToxicType.LATENCY
    assert spec.to_json()["attributes"] == {"latency": 0, "jitter": 0}
    with pytest.raises(ApiError, match="stream was invalid"):
        parse_toxic_create({"type": "nosuch", "stream": "sideways"}, set())
    with pytest.raises(ApiError, match="invalid toxic type"):
        parse_toxic_create({"type": "nosuch", "name": "taken"}, {"taken"})
    with pytest.raises(ApiError, match="toxic already exists"):
        parse_toxic_create({"type": "latency", "name": "taken"}, {"taken"})
    with pytest.raises(ApiError, match=r"cannot unmarshal number 1\.5 into .*latency"):
        parse_toxic_create({"type": "latency", "attributes": {"latency": 1.5}}, set())
    updated = parse_toxic_update({"attributes": {"JITTER": 3}}, spec)
    assert updated.to_json()["attributes"] == {"latency": 0, "jitter": 3}
    assert parse_toxic_update({"toxicity": 0.5}, updated).toxicity == 0.5


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("127.8.9.10:8080", ("127.8.9.10", 8080)),
        ("localhost:80", ("127.0.0.1", 80)),
        ("[::1]:5", ("::1", 5)),
    ],
)
def test_loopback_listen_addresses_are_accepted(address: str, expected: tuple[str, int]) -> None:
    assert check_listen_address(address) == expected


@pytest.mark.parametrize(
    ("address", "status"),
    [("0.0.0.0:1", 400), (":1", 400), ("10.0.0.1:1", 400), ("example.com:1", 400)],
)
def test_other_listen_addresses_are_refused(address: str, status: int) -> None:
    with pytest.raises(ApiError) as raised:
        check_listen_address(address)
    assert raised.value.status == status
    assert address in raised.value.message


def test_malformed_listen_address_is_the_real_servers_500() -> None:
    with pytest.raises(ApiError) as raised:
        check_listen_address("local373")
    assert (raised.value.status, raised.value.message) == (
        500,
        "listen tcp: address local373: missing port in address",
    )
