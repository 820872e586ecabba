"""The timer log's batches read per batch (`cluster.timer_log`), and the delayed produce's edge
checks (`cluster.delayed`): bounds naming the limit, the header rule, the version gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import open_replica

from cluster.controller import TopicSpec
from cluster.delayed import (
    DelayedProduce,
    DelayRefused,
    check_deliver_at,
    check_deliver_at_header,
)
from cluster.errors import Invalid
from cluster.timer_log import classify, decode_plan, deliver_at_of, plan_batch
from cluster.timers import fire_producer_id
from cluster.versions import TIMERS_SINCE, VERSION, parse_version, reads_timers
from proto.records import check_body, encode_batch, read_header
from timers.types import DELIVER_AT_HEADER, PLAN_HEADER, Plan, TimerBatch

NOW = 1_800_000_000_000


def delayed(due: int, records: int = 3, *, header: str = DELIVER_AT_HEADER) -> bytes:
    return encode_batch(
        [
            (b"k", b"v%d" % i, [("x", b"1"), (header, str(due).encode())], NOW)
            for i in range(records)
        ]
    )


def test_a_timer_batch_is_classified_by_its_first_records_header() -> None:
    batch = delayed(NOW + 5000)
    assert deliver_at_of(batch) == NOW + 5000
    assert classify(batch, 40, 3) == TimerBatch(NOW + 5000, 40, 3)
    plain = encode_batch([(None, b"v", [], NOW)])
    assert deliver_at_of(plain) is None and classify(plain, 0, 1) is None
    bad = encode_batch([(None, b"v", [(DELIVER_AT_HEADER, b"soon")], NOW)])
    assert deliver_at_of(bad) is None


def test_a_plan_record_round_trips() -> None:
    plan = Plan(17, (TimerBatch(NOW, 3, 2), TimerBatch(NOW + 1, 9, 1)))
    batch = plan_batch(plan, NOW)
    check_body(batch)
    assert read_header(batch).record_count == 1
    assert classify(batch, 12, 1) == plan
    assert classify(plan_batch(Plan(19, ()), NOW), 13, 1) == Plan(19, ())
    with pytest.raises(ValueError, match="plan record"):
        decode_plan(b"\x01")
    assert PLAN_HEADER.startswith("flotilla-")


def test_the_bounds_name_the_limit() -> None:
    spec = TopicSpec("t", 1, 1, max_delay_ms=60_000)
    check_deliver_at(NOW - 999, NOW, spec)  # past by less than a second: due at once
    check_deliver_at(NOW + 60_000, NOW, spec)
    with pytest.raises(Invalid, match="1001 ms in the past"):
        check_deliver_at(NOW - 1001, NOW, spec)
    with pytest.raises(Invalid, match="max_delay_ms=60000"):
        check_deliver_at(NOW + 60_001, NOW, spec)


def test_the_header_must_match_deliver_at_ms() -> None:
    check_deliver_at_header(delayed(NOW), NOW)
    with pytest.raises(Invalid, match=f"{DELIVER_AT_HEADER}={NOW}, not deliver_at_ms={NOW + 1}"):
        check_deliver_at_header(delayed(NOW), NOW + 1)
    with pytest.raises(Invalid, match=f"{DELIVER_AT_HEADER}=none"):
        check_deliver_at_header(delayed(NOW, header="other"), NOW)


def test_the_version_gate() -> None:
    parsed = parse_version(VERSION)
    assert parsed is not None and parsed[: len(TIMERS_SINCE)] >= TIMERS_SINCE
    assert reads_timers("0.3.0") is False and reads_timers("0.4.0") and reads_timers("1.0")
    assert reads_timers(None) is None and reads_timers("dev") is None


def test_the_fire_producer_is_the_same_everywhere_and_never_zero() -> None:
    assert fire_producer_id("u", 0) == fire_producer_id("u", 0)
    assert fire_producer_id("u", 0) != fire_producer_id("u", 1) != fire_producer_id("v", 1)
    assert all(0 < fire_producer_id("u", p) < 1 << 63 for p in range(100))


def test_a_delayed_produce_waits_for_the_rolling_upgrade(tmp_path: Path) -> None:
    replica = open_replica(tmp_path, "t/0")
    versions = {"a": "0.4.0", "b": "0.4.0", "c": "0.3.0"}
    delayed_produce = DelayedProduce(
        node_id="b", topics=dict, create_topic=_never, grow_topic=_never, refresh_topics=_never,
        replica=lambda group: replica if group == "t/0" else None,
        member_version=versions.get, stub=lambda member: None, leader_of=_never,
    )  # fmt: skip
    try:
        with pytest.raises(DelayRefused, match=r"c runs 0\.3\.0; delayed delivery needs 0\.4"):
            delayed_produce.check_versions("t/0")
        versions["c"] = "0.4.1"
        delayed_produce.check_versions("t/0")
        del versions["c"]  # not known: does not hold it up
        delayed_produce.check_versions("t/0")
    finally:
        replica.close()


async def _never(*args: object) -> Any:
    raise AssertionError("not called")
