"""The queue's shell face without a server: `--invisible`'s durations (a bad one a usage error
naming it), a delivery's line (text and JSON) and `group describe`'s queue table."""

from __future__ import annotations

import argparse
import json

import pytest

from flotilla.cli_groups import describe_text
from flotilla.cli_queue import delivery_line, duration_ms, invisible
from flotilla.types import (
    Delivery,
    GroupInfo,
    GroupMember,
    GroupPartition,
    QueueOptions,
    QueuePartitionInfo,
    Record,
)


def test_durations_take_units_and_invisible_keeps_to_the_coordinators_range() -> None:
    assert [duration_ms(t) for t in ("30s", "500ms", "2m", "1h", "1500", "1.5s")] == [
        30_000, 500, 120_000, 3_600_000, 1_500, 1_500,
    ]  # fmt: skip
    assert invisible("1s") == 1_000 and invisible("12h") == 43_200_000
    for bad, named in (("soon", "not a duration"), ("999ms", "out of range"), ("13h", "range")):
        with pytest.raises(argparse.ArgumentTypeError, match=named):
            invisible(bad)


def test_a_delivery_line_names_partition_offset_count_key_and_value() -> None:
    record = Record(7, b"k", b"v\xff", (("h", b"1"),), 5, "jobs", 2)
    d = Delivery(record, 3, 1_234)
    assert delivery_line(d, as_json=False) == b"2\t7\t3\tk\tv\xff\n"
    assert delivery_line(Delivery(Record(1, None, b"x", (), 0, "jobs", 0), 1, 0), False) == (
        b"0\t1\t1\t\tx\n"
    )
    line = json.loads(delivery_line(d, as_json=True))
    assert (line["partition"], line["offset"], line["key"]) == (2, 7, "k")
    assert (line["delivery_count"], line["deadline_ms"], line["headers"]) == (
        3,
        1_234,
        [["h", "1"]],
    )
    assert line["value_encoding"] == "base64"


def test_group_describe_shows_a_queue_groups_columns_and_options() -> None:
    state = QueuePartitionInfo(
        acked_floor=4, next_offset=9, in_flight=3, waiting=1, acked=5, dead_lettered=2,
        dead_letters_pending=1,
    )  # fmt: skip
    info = GroupInfo(
        "workers",
        "queue",
        "n1",
        (GroupMember("m1", None, frozenset()),),
        (GroupPartition("jobs", 0, None, 12, 8, None, state),),
        QueueOptions(5, None, "key", (), 0),
    )
    text = describe_text(info)
    assert "KIND            queue" in text and "ORDERING        key" in text
    assert "DEAD-LETTERS    <topic>.workers.dlq" in text
    head, table = text.split("\n\n")
    assert "IN-FLIGHT       3" in head and "DEAD-LETTERED   2" in head
    header, row = table.splitlines()
    assert header.split() == [
        "TOPIC", "PARTITION", "END", "ACKED-FLOOR", "NEXT", "IN-FLIGHT", "WAITING", "ACKED",
        "DEAD-LETTERED", "DLQ-PENDING",
    ]  # fmt: skip
    assert row.split() == ["jobs", "0", "12", "4", "9", "3", "1", "5", "2", "1"]
