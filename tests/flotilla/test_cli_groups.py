"""The group commands' parsing and output, without a cluster: `--to`'s values, the consume
options a group decides (refused with --group, exit 2, before anything is sent) and
`group describe`'s table."""

from __future__ import annotations

import argparse

import pytest

from flotilla import GroupInfo, GroupMember, GroupPartition, cli
from flotilla.cli_groups import describe_text, reset_target


def test_reset_to_takes_earliest_latest_or_an_offset() -> None:
    assert reset_target("earliest") == "earliest"
    assert reset_target("latest") == "latest"
    assert reset_target("42") == 42
    for bad in ("-1", "soon", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="earliest, latest or an offset"):
            reset_target(bad)


@pytest.mark.parametrize(
    "extra", [["--partition", "0"], ["--offset", "0"], ["--last", "3"], ["-e"], ["--replica", "n1"]]
)
def test_consume_with_a_group_refuses_what_the_group_decides(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # nothing listens at port 1: the refusal comes before any call
    status = cli.main(["consume", "t", "--group", "g", "--bootstrap", "127.0.0.1:1", *extra])
    assert status == 2
    assert "cannot be used with --group" in capsys.readouterr().err


def test_group_describe_shows_each_partition_with_its_owner() -> None:
    info = GroupInfo(
        "billing",
        "stream",
        "n2",
        (GroupMember("m-1", "host-7", frozenset({("orders", 1)}), 2),),
        (
            GroupPartition("orders", 1, 4, 9, 5, "m-1"),
            GroupPartition("orders", 0, None, 9, 9, None),
        ),
    )
    text = describe_text(info)
    assert "GROUP        billing" in text and "TOTAL-LAG    14" in text
    rows = [line.split() for line in text.splitlines()[6:]]
    assert rows == [
        ["TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MEMBER", "INSTANCE"],
        ["orders", "0", "-", "9", "9", "-", "-"],
        ["orders", "1", "4", "9", "5", "m-1", "host-7"],
    ]
