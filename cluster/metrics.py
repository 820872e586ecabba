"""Node metrics in the Prometheus text format (prometheus-client).

Per-partition gauges (commit index, applied offset, lag of each follower seen by a leader) are
read from the replicas at scrape time by a custom collector, so the hot path pays nothing for
them. Produce latency and fsync (group commit) latency are histograms observed as they happen;
leader changes are counted by the MultiRaft driver. `flotilla_replicas_quarantined` counts the
local replicas stopped by an error of their own (`cluster.quarantine`);
`flotilla_replicas_rebuilt_total` those found damaged on open and rebuilt from their peers
(`cluster.opener`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from raft.types import Role

if TYPE_CHECKING:
    from cluster.replica import Replica

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (
    0.0002,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
)


class _PartitionCollector(Collector):
    def __init__(
        self, node_id: str, replicas: Callable[[], list[Replica]], quarantined: Callable[[], int]
    ) -> None:
        self.node_id = node_id
        self.replicas = replicas
        self.quarantined = quarantined

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["node", "partition"]
        commit = GaugeMetricFamily(
            "flotilla_partition_commit_index", "Raft commit index", labels=labels
        )
        high_watermark = GaugeMetricFamily(
            "flotilla_partition_high_watermark",
            "next offset past the last committed record",
            labels=labels,
        )
        leader = GaugeMetricFamily(
            "flotilla_partition_is_leader", "1 if this replica leads", labels=labels
        )
        lag = GaugeMetricFamily(
            "flotilla_partition_follower_lag_entries",
            "entries a follower is behind (leader's view)",
            labels=[*labels, "follower"],
        )
        for replica in self.replicas():
            node = replica.node
            key = [self.node_id, replica.group]
            commit.add_metric(key, node.commit)
            high_watermark.add_metric(key, replica.high_watermark)
            leader.add_metric(key, 1 if node.role is Role.LEADER else 0)
            if node.role is Role.LEADER:
                last = node.log.last_index
                for member in sorted(node.configuration.members - {node.id}):
                    match = node.match_index(member)
                    if match is not None:
                        lag.add_metric([*key, member], last - match)
        quarantined = GaugeMetricFamily(
            "flotilla_replicas_quarantined",
            "local replicas stopped by an error of their own (see Health, `flotilla status`)",
            labels=["node"],
        )
        quarantined.add_metric([self.node_id], self.quarantined())
        yield from (commit, high_watermark, leader, lag, quarantined)


class Metrics:
    def __init__(
        self,
        node_id: str,
        replicas: Callable[[], list[Replica]],
        quarantined: Callable[[], int] = lambda: 0,
    ) -> None:
        self.registry = CollectorRegistry()
        self.node_id = node_id
        self.produce_latency = Histogram(
            "flotilla_produce_latency_seconds", "produce request to acknowledgement", ["node"],
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.fsync_latency = Histogram(
            "flotilla_group_commit_seconds", "one storage round: writes of all groups + group fsync", ["node"],
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.leader_changes = Counter(
            "flotilla_leader_changes_total", "leadership gained or lost by local replicas", ["node"],
            registry=self.registry,
        )  # fmt: skip
        self.replicas_retired = Counter(
            "flotilla_replicas_retired_total", "local replicas deleted after their group removed them", ["node"],
            registry=self.registry,
        )  # fmt: skip
        self.replicas_rebuilt = Counter(
            "flotilla_replicas_rebuilt_total", "local replicas found damaged on open and rebuilt from their peers", ["node"],
            registry=self.registry,
        )  # fmt: skip
        self.registry.register(_PartitionCollector(node_id, replicas, quarantined))
        # the labelled children, looked up once (every produce and disk round observes one)
        self._produce_latency = self.produce_latency.labels(node_id)
        self._fsync_latency = self.fsync_latency.labels(node_id)
        self._server: object | None = None

    def observe_produce(self, group: str, seconds: float) -> None:
        self._produce_latency.observe(seconds)

    def observe_fsync(self, seconds: float) -> None:
        self._fsync_latency.observe(seconds)

    def leader_changed(self) -> None:
        self.leader_changes.labels(self.node_id).inc()

    def replica_rebuilt(self) -> None:
        self.replicas_rebuilt.labels(self.node_id).inc()

    def replica_retired(self) -> None:
        self.replicas_retired.labels(self.node_id).inc()

    def serve(self, host: str, port: int) -> None:
        self._server = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        server = self._server
        if isinstance(server, tuple):
            http_server, thread = server
            http_server.shutdown()
            http_server.server_close()
            thread.join(timeout=5)
