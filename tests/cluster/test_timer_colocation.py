"""A topic's timer log is led, partition by partition, by the node that leads the source
partition (`cluster.topic_spec.placement_key`, `cluster.steward`): firing then proposes on the
node itself, and no cut between two nodes leaves the timer leader unable to reach the source
leader (`make chaos`, partition-random with delayed records: due batches 2-3 s late while a
bridge cut the timer leader off the source leader).

Six partitions on three nodes: once settled each timer partition's leader is its source
partition's; after the node leading several is killed, both groups of each partition elect
anew on the two others, independently, and the timer groups follow the source leaders there."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import Client, TopicNotFound
from timers.types import timer_topic

pytestmark = pytest.mark.integration

CONFIG = (
    "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
    "leader_balance_after_s = 2\n"
)
PARTITIONS = 6


def _leaders(client: Client, topic: str) -> list[str]:
    try:
        return [p.leader for p in client.describe_topic(topic).partitions]
    except TopicNotFound:
        return []


def _split(client: Client, source: str, timers: str) -> list[tuple[int, str, str]]:
    """The partitions whose timer leader is not their source leader (or either unknown)."""
    by_source, by_timer = _leaders(client, source), _leaders(client, timers)
    if len(by_source) != PARTITIONS or len(by_timer) != PARTITIONS:
        return [(-1, str(by_source), str(by_timer))]
    return [
        (p, s, t)
        for p, (s, t) in enumerate(zip(by_source, by_timer, strict=True))
        if not s or s != t
    ]


def test_each_timer_partition_is_led_where_its_source_partition_is(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3, controllers=3, config_text=CONFIG) as local:
        local.start()
        with Client(local.addresses(), timeout_s=30) as client:
            client.create_topic("co", PARTITIONS, 3)
            uid = client.describe_topic("co").uid
            for partition in range(PARTITIONS):  # creates the timer log, fires in an hour
                client.produce("co", b"later", partition=partition, delay_ms=3_600_000)
            timers = timer_topic(uid)
            wait_until(
                lambda: not _split(client, "co", timers),
                30,
                "every timer partition led where its source partition is",
                lambda: _split(client, "co", timers),
            )
            victim = max(
                local.nodes, key=lambda n: _leaders(client, "co").count(n)
            )  # leads at least two of the six
            local.kill(victim)
            wait_until(
                lambda: not _split(client, "co", timers) and victim not in _leaders(client, "co"),
                30,
                f"the timer partitions following their source leaders with {victim} down",
                lambda: _split(client, "co", timers),
            )
