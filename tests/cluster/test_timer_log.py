"""The timer log's batches read per batch (`cluster.timer_log`: timer batches, plans, copies
rolled forward, floors), an index behind its log's start replaced, and the delayed produce's edge
checks (`cluster.delayed`): bounds naming the limit, the header rule, the version gate."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from harness import open_replica

from cluster import timer_log
from cluster.controller import TopicSpec
from cluster.delayed import (
    DelayedProduce,
    DelayRefused,
    check_deliver_at,
    check_deliver_at_header,
)
from cluster.errors import Invalid
from cluster.timer_log import (
    classify,
    copy_batch,
    decode_plan,
    deliver_at_of,
    fired_bytes,
    floor_batch,
    open_index,
    plan_batch,
)
from cluster.timers import fire_producer_id
from cluster.versions import TIMERS_SINCE, VERSION, parse_version, reads_timers
from proto.records import check_body, encode_batch, read_header
from storage.timer_index import INDEX_DIRECTORY
from timers.types import (
    DELIVER_AT_HEADER,
    PLAN_HEADER,
    Floor,
    Plan,
    Rolled,
    TimerBatch,
    TimerConfig,
)

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


def test_a_plan_record_carrying_the_last_plans_batches_round_trips_and_old_ones_load() -> None:
    carried = TimerBatch(NOW, 3, 2)
    plan = Plan(17, (carried, TimerBatch(NOW + 1, 9, 1)), 2, NOW, 1)
    assert classify(plan_batch(plan, NOW), 12, 1) == plan
    # records from before two plans outstanding (4 fields) and before epochs (2) carry none
    rows = [[NOW, 3, 2]]
    for fields in ([17, rows, 2, NOW], [17, rows]):
        decoded = decode_plan(msgpack.packb(fields))
        assert decoded.carried == 0 and decoded.own == decoded.batches
    for bad in ([17, rows, 2, NOW, 2], [17, rows, 2, NOW, -1]):  # more than it lists
        with pytest.raises(ValueError, match=r"carried at most the batches.*1 batches carried"):
            decode_plan(msgpack.packb(bad))


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


def test_a_copy_rolled_forward_and_a_floor_are_classified_and_a_copy_fires_the_original() -> None:
    original = delayed(NOW + 5000, records=3)
    copy = copy_batch(original, 7, NOW + 5000, NOW + 10)
    check_body(copy)
    assert classify(copy, 40, 1) == Rolled(TimerBatch(NOW + 5000, 40, 3), from_offset=7)
    assert fired_bytes(copy) == original and fired_bytes(original) == original
    again = copy_batch(fired_bytes(copy), 40, NOW + 5000, NOW + 20)  # wraps the producer's
    assert fired_bytes(again) == original
    assert classify(floor_batch(41, NOW), 50, 1) == Floor(41)
    assert classify(plan_batch(Plan(3, ()), NOW), 51, 1) == Plan(3, ())


def test_an_index_behind_its_log_start_is_replaced_by_one_folding_from_there(
    tmp_path: Path,
) -> None:
    """A replica reset to its leader's log start (or rebuilt) past what its index folded: the
    index misses what went, so a new one folds the log from its first offset; references below
    it are outside it (a plan's batch there was pending and is fired; a copy of one is live)."""
    directory = str(tmp_path / INDEX_DIRECTORY)
    old = open_index(directory, 3_600_000, 0)
    old.add(TimerBatch(NOW, 0, 1))  # the index of a log that has since moved on without it
    old.flush(1)
    old.close()
    index = open_index(directory, 3_600_000, 100)
    assert (index.start_offset, index.applied_offset, index.pending) == (100, 100, 0)
    index.rolled(Rolled(TimerBatch(NOW + 9, 100, 2), from_offset=40))  # original went: live
    index.add(TimerBatch(NOW + 5, 101, 1))
    index.planned(Plan(8, (TimerBatch(NOW + 1, 60, 1), TimerBatch(NOW + 5, 101, 1))), 102)
    index.planned(Plan(10, ()), 103)  # its done marker
    assert index.pending == 2 and [b.offset for b in index.bucket(NOW // 3_600_000)] == [100]
    assert index.min_pending_offset() == 100
    index.flush(104)
    index.close()
    again = open_index(directory, 3_600_000, 100)  # caught up: kept as it is
    assert (again.start_offset, again.pending, again.last_plan_offset) == (100, 2, 103)
    assert again.last_plan == Plan(10, ()) and again.min_pending_offset() == 100
    again.close()


def test_caught_up_waits_for_the_index_to_open_even_with_nothing_to_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new timer partition's leader loads its book once the follower has caught up with the
    high watermark, offset 0: it returned at once, before the index had opened (off the loop,
    slow on a loaded machine), and the load failed its `index is not None` check (a fresh
    clone's chaos run: a due batch fired a second late, after the retry)."""
    real_open = timer_log.open_index

    def slow_open(*args: Any) -> Any:
        time.sleep(0.2)
        return real_open(*args)

    monkeypatch.setattr(timer_log, "open_index", slow_open)
    replica = open_replica(tmp_path, "__timers.x/0")

    async def scenario() -> None:
        follower = timer_log.Follower(replica, TimerConfig())
        try:
            await asyncio.wait_for(follower.caught_up(replica.high_watermark), 5)
            assert follower.index is not None
        finally:
            follower.close()

    asyncio.run(scenario())
    replica.close()
