"""Node metrics in the Prometheus text format (prometheus-client), named by its conventions:
base units (`_seconds`, `_bytes`), counters end in `_total`, every series has a `node` label.

Cost: the hot path pays per request or per storage round, never per record. Requests: each
produce and fetch observes its duration once and counts its bytes (the batch sizes, already
known) and its gRPC status code. Storage: each round's duration and each group commit's fsync
time (`flotilla_fsync_duration_seconds`, one observation per `sync_logs` call, however many
logs it synced). Everything that is a state rather than an event (per-partition indexes and
lag, leaders, under-replicated and offline partitions, segments, the control-plane leader) is
read from the replicas at scrape time by `_NodeCollector`, so it costs nothing between scrapes.

Renamed (the old names broke the conventions or said the wrong thing):
- `flotilla_produce_latency_seconds` -> `flotilla_produce_request_duration_seconds` (now every
  produce request, whatever its outcome, from arrival to answer)
- `flotilla_group_commit_seconds` -> `flotilla_storage_round_duration_seconds` (a round is the
  writes of all groups plus their group commit; the fsync alone is
  `flotilla_fsync_duration_seconds`)
- the per-partition series' label `partition="t/3"` -> `topic="t", partition="3"`

Consumer groups (`cluster.groups`): `flotilla_group_lag{group,topic,partition}` (records the group
has yet to consume: high watermark minus committed offset, or minus the log start where nothing
is committed) and `flotilla_group_members{group}`, and for queue groups
`flotilla_queue_in_flight{group,topic,partition}` and `flotilla_queue_dead_lettered_total{...}`,
served only by each group's coordinator, from figures it refreshes every few seconds and on
each DescribeGroup (`GroupGauges`), so a scrape costs no request to anyone.

Delayed delivery (`cluster.timers`): `flotilla_pending_timers{topic,partition}` (delayed records
accepted and not yet due), served only by the leader of each partition's timer log.

Peer authentication (`cluster.peer_auth`): `flotilla_peer_auth_rejected_total{kind}` counts Raft
streams, SWIM packets and other calls refused for a missing or wrong proof of membership.
Authorization (`cluster.acl_service`): `flotilla_authz_refused_total{operation,outcome}` counts
clients' calls refused on this node: `unauthenticated` (no or an unknown credential) or `denied`
(no ACL allows the operation: produce, consume, admin; `any` for a call that needs only an
authenticated caller).

Per-partition gauges are per replica on this node: sum `flotilla_under_replicated_partitions`
over nodes (only a partition's leader counts it), take the max of
`flotilla_offline_partitions` (every replica of a leaderless partition counts it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from cluster.histogram import OneWriterHistogram
from raft.types import Role

if TYPE_CHECKING:
    from cluster.replica import Replica

__all__ = ["GroupGauges", "Metrics"]

_LATENCY_BUCKETS = (
    0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
)  # fmt: skip


# the operations `flotilla_authz_refused_total` names (`cluster.authz.Operation`, and `any`)
AUTHZ_OPERATIONS = ("produce", "consume", "admin", "any")


@dataclass(frozen=True, slots=True)
class GroupGauges:
    """The consumer-group figures of the groups a node coordinates, replaced whole when they
    change (the scrape thread reads one snapshot)."""

    lag: Mapping[tuple[str, str, int], int] = field(default_factory=dict)  # (group, topic, p)
    members: Mapping[str, int] = field(default_factory=dict)  # group -> members
    # queue groups, per (group, topic, partition): records leased now, and dead-lettered so far
    in_flight: Mapping[tuple[str, str, int], int] = field(default_factory=dict)
    dead_lettered: Mapping[tuple[str, str, int], int] = field(default_factory=dict)


class _NodeCollector(Collector):
    """Scrape-time gauges, read from the replicas (on the HTTP server's thread: reads only)."""

    def __init__(
        self,
        node_id: str,
        replicas: Callable[[], list[Replica]],
        quarantined: Callable[[], int],
        replication_factor: Callable[[str], int | None],
        controller_leader: Callable[[], bool | None],
        is_live: Callable[[str], bool],
        groups: Callable[[], GroupGauges],
        pending_timers: Callable[[], Mapping[tuple[str, int], int]] = dict,
    ) -> None:
        self.node_id = node_id
        self.pending_timers = pending_timers
        self.is_live = is_live
        self.groups = groups
        self.replicas = replicas
        self.quarantined = quarantined
        self.replication_factor = replication_factor
        self.controller_leader = controller_leader

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["node", "topic", "partition"]
        commit = GaugeMetricFamily(
            "flotilla_partition_commit_index", "Raft commit index", labels=labels
        )
        high_watermark = GaugeMetricFamily(
            "flotilla_partition_high_watermark",
            "next offset past the last committed record",
            labels=labels,
        )
        is_leader = GaugeMetricFamily(
            "flotilla_partition_is_leader", "1 if this replica leads", labels=labels
        )
        lag = GaugeMetricFamily(
            "flotilla_partition_follower_lag_entries",
            "entries a follower is behind its leader (the leader's view)",
            labels=[*labels, "follower"],
        )
        node_only = ["node"]
        hosted = GaugeMetricFamily(
            "flotilla_replicas", "partition replicas hosted on this node", labels=node_only
        )
        leaders = GaugeMetricFamily(
            "flotilla_leader_partitions", "partitions this node leads", labels=node_only
        )
        under = GaugeMetricFamily(
            "flotilla_under_replicated_partitions",
            "partitions led here with fewer voters than their replication factor, a learner "
            "catching up, or a voter the membership does not see alive (sum over nodes)",
            labels=node_only,
        )
        offline = GaugeMetricFamily(
            "flotilla_offline_partitions",
            "replicas here that know of no leader (max over nodes: every replica counts it)",
            labels=node_only,
        )
        segments = GaugeMetricFamily(
            "flotilla_log_segments", "log segment files of the replicas here", labels=node_only
        )
        size = GaugeMetricFamily(
            "flotilla_log_size_bytes", "bytes in the log segments here", labels=node_only
        )
        counts = {"leaders": 0, "under": 0, "offline": 0, "segments": 0, "bytes": 0}
        replicas = self.replicas()
        for replica in replicas:
            node = replica.node
            key = [self.node_id, replica.topic, str(replica.partition)]
            commit.add_metric(key, node.commit)
            high_watermark.add_metric(key, replica.high_watermark)
            leads = node.role is Role.LEADER
            is_leader.add_metric(key, 1 if leads else 0)
            segmented = replica.segmented
            counts["segments"] += segmented.segment_count
            counts["bytes"] += segmented.size_bytes
            if node.leader_id is None:
                counts["offline"] += 1
            if not leads:
                continue
            counts["leaders"] += 1
            last = node.log.last_index
            configuration = node.configuration
            voters = configuration.voters
            for member in sorted(configuration.members - {node.id}):
                match = node.match_index(member)
                if match is not None:
                    lag.add_metric([*key, member], last - match)
            # Kafka's "in-sync" is "caught up within a time"; an instant's match index lags
            # behind every write in flight, so a voter counts as out of sync only while the
            # membership says it is not alive (the lag gauge shows how far behind each is)
            factor = self.replication_factor(replica.topic) or len(voters)
            if (
                len(voters) < factor
                or configuration.learners
                or not all(self.is_live(v) for v in voters if v != node.id)
            ):
                counts["under"] += 1
        hosted.add_metric([self.node_id], len(replicas))
        leaders.add_metric([self.node_id], counts["leaders"])
        under.add_metric([self.node_id], counts["under"])
        offline.add_metric([self.node_id], counts["offline"])
        segments.add_metric([self.node_id], counts["segments"])
        size.add_metric([self.node_id], counts["bytes"])
        quarantined = GaugeMetricFamily(
            "flotilla_replicas_quarantined",
            "local replicas stopped by an error of their own (see Health, `flotilla status`)",
            labels=node_only,
        )
        quarantined.add_metric([self.node_id], self.quarantined())
        controller = GaugeMetricFamily(
            "flotilla_controller_is_leader",
            "1 if this node leads the control plane, 0 if it is a controller that does not "
            "(absent on nodes that are not controllers)",
            labels=node_only,
        )
        leading = self.controller_leader()
        if leading is not None:
            controller.add_metric([self.node_id], 1 if leading else 0)
        yield from (commit, high_watermark, is_leader, lag, hosted, leaders, under, offline)
        yield from (segments, size, quarantined, controller)
        yield from self._groups()
        timers = GaugeMetricFamily(
            "flotilla_pending_timers",
            "delayed records accepted and not yet due in a partition (from the leader of its "
            "timer log)",
            labels=labels,
        )
        for (topic, partition), count in sorted(self.pending_timers().items()):
            timers.add_metric([self.node_id, topic, str(partition)], count)
        yield timers

    def _groups(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        gauges = self.groups()
        group_lag = GaugeMetricFamily(
            "flotilla_group_lag",
            "records a consumer group has yet to consume in a partition: high watermark minus "
            "its committed offset (minus the log start where it committed none); from the "
            "group's coordinator",
            labels=["node", "group", "topic", "partition"],
        )
        for (group, topic, partition), value in sorted(gauges.lag.items()):
            group_lag.add_metric([self.node_id, group, topic, str(partition)], value)
        members = GaugeMetricFamily(
            "flotilla_group_members",
            "members of a consumer group; from the group's coordinator",
            labels=["node", "group"],
        )
        for group, count in sorted(gauges.members.items()):
            members.add_metric([self.node_id, group], count)
        in_flight = GaugeMetricFamily(
            "flotilla_queue_in_flight",
            "records of a queue group's partition leased to its members now; from the group's "
            "coordinator",
            labels=["node", "group", "topic", "partition"],
        )
        for (group, topic, partition), value in sorted(gauges.in_flight.items()):
            in_flight.add_metric([self.node_id, group, topic, str(partition)], value)
        dead_lettered = CounterMetricFamily(
            "flotilla_queue_dead_lettered",
            "records of a queue group's partition copied to its dead-letter topic since the "
            "group began; from the group's coordinator",
            labels=["node", "group", "topic", "partition"],
        )
        for (group, topic, partition), value in sorted(gauges.dead_lettered.items()):
            dead_lettered.add_metric([self.node_id, group, topic, str(partition)], value)
        yield from (group_lag, members, in_flight, dead_lettered)


class Metrics:
    def __init__(
        self,
        node_id: str,
        replicas: Callable[[], list[Replica]],
        quarantined: Callable[[], int] = lambda: 0,
        *,
        replication_factor: Callable[[str], int | None] = lambda topic: None,
        controller_leader: Callable[[], bool | None] = lambda: None,
        is_live: Callable[[str], bool] = lambda member_id: True,
        groups: Callable[[], GroupGauges] = GroupGauges,
        pending_timers: Callable[[], Mapping[tuple[str, int], int]] = dict,
    ) -> None:
        self.registry = registry = CollectorRegistry()
        self.node_id = node_id
        # the client library's process, platform and GC collectors (it registers them on its
        # global registry; a node serves its own)
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        node = ["node"]
        self.produce_requests = Counter(
            "flotilla_produce_requests", "produce requests answered, by gRPC status code",
            ["node", "code"], registry=registry,
        )  # fmt: skip
        self.produce_bytes = Counter(
            "flotilla_produce_bytes", "bytes of the record batches acknowledged",
            node, registry=registry,
        )  # fmt: skip
        # observed per request or per round by one thread: lock-free (`cluster.histogram`)
        series = {"node": node_id}
        self.produce_duration = OneWriterHistogram(
            "flotilla_produce_request_duration_seconds", "produce request arrival to answer",
            series, _LATENCY_BUCKETS,
        )  # fmt: skip
        self.fetch_requests = Counter(
            "flotilla_fetch_requests",
            "fetch requests answered (and subscriptions ended), by method and gRPC status code",
            ["node", "method", "code"], registry=registry,
        )  # fmt: skip
        self.fetch_bytes = Counter(
            "flotilla_fetch_bytes", "record-batch bytes served by fetches and subscriptions",
            node, registry=registry,
        )  # fmt: skip
        self.fetch_duration = Histogram(
            "flotilla_fetch_request_duration_seconds",
            "fetch request arrival to answer (long polls included)",
            node, buckets=_LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self.storage_round = OneWriterHistogram(
            "flotilla_storage_round_duration_seconds",
            "one storage round: the writes of all groups and their group commit",
            series, _LATENCY_BUCKETS,
        )  # fmt: skip
        self.fsync_duration = OneWriterHistogram(
            "flotilla_fsync_duration_seconds",
            "one group commit: the fsyncs of every log a round wrote (in parallel)",
            series, _LATENCY_BUCKETS,
        )  # fmt: skip
        for histogram in (self.produce_duration, self.storage_round, self.fsync_duration):
            registry.register(histogram)
        self.leader_changes = Counter(
            "flotilla_leader_changes", "leadership gained or lost by local replicas", node,
            registry=registry,
        )  # fmt: skip
        self.replicas_retired = Counter(
            "flotilla_replicas_retired", "local replicas deleted after their group removed them",
            node, registry=registry,
        )  # fmt: skip
        self.replicas_rebuilt = Counter(
            "flotilla_replicas_rebuilt",
            "local replicas found damaged on open and rebuilt from their peers", node,
            registry=registry,
        )  # fmt: skip
        # peers' calls and SWIM packets refused for a missing or wrong proof (cluster.peer_auth);
        # every kind is served from the start (at 0), so an alert on its rate has a series
        self.peer_auth_rejections = Counter(
            "flotilla_peer_auth_rejected",
            "peer messages refused: no or a wrong cluster-secret proof, or a certificate not "
            "of the node claimed (kind: raft stream, swim packet, or another call)",
            ["node", "kind"], registry=registry,
        )  # fmt: skip
        self._peer_rejected = {
            kind: self.peer_auth_rejections.labels(node_id, kind)
            for kind in ("raft", "swim", "call")
        }
        # clients' calls refused by authorization; every series served from the start (at 0)
        self.authz_refusals = Counter(
            "flotilla_authz_refused",
            "client calls refused by authorization on this node (outcome: unauthenticated, "
            "no or an unknown credential; denied, no ACL allows the operation)",
            ["node", "operation", "outcome"], registry=registry,
        )  # fmt: skip
        self._authz_refused = {
            (operation, outcome): self.authz_refusals.labels(node_id, operation, outcome)
            for operation in AUTHZ_OPERATIONS
            for outcome in ("unauthenticated", "denied")
        }
        registry.register(
            _NodeCollector(
                node_id,
                replicas,
                quarantined,
                replication_factor,
                controller_leader,
                is_live,
                groups,
                pending_timers,
            )
        )
        # the labelled children, looked up once (every request and disk round observes one)
        self._produce_duration = self.produce_duration
        self._produce_bytes = self.produce_bytes.labels(node_id)
        self._fetch_duration = self.fetch_duration.labels(node_id)
        self._fetch_bytes = self.fetch_bytes.labels(node_id)
        self._storage_round = self.storage_round
        self._fsync_duration = self.fsync_duration  # written by the storage thread alone
        self._produced: dict[str, Counter] = {}
        self._fetched: dict[tuple[str, str], Counter] = {}
        self._server: object | None = None

    def observe_produce(self, code: str, seconds: float) -> None:
        """One produce request answered with `code` (a gRPC status name)."""
        counter = self._produced.get(code)
        if counter is None:
            counter = self._produced[code] = self.produce_requests.labels(self.node_id, code)
        counter.inc()
        self._produce_duration.observe(seconds)

    def produced_bytes(self, size_bytes: int) -> None:
        """An acknowledged batch of `size_bytes`."""
        self._produce_bytes.inc(size_bytes)

    def observe_fetch(self, method: str, code: str, seconds: float | None) -> None:
        """One fetch answered (or one subscription ended, `seconds` None) with `code`."""
        counter = self._fetched.get((method, code))
        if counter is None:
            counter = self.fetch_requests.labels(self.node_id, method, code)
            self._fetched[(method, code)] = counter
        counter.inc()
        if seconds is not None:
            self._fetch_duration.observe(seconds)

    def fetched_bytes(self, size_bytes: int) -> None:
        """Batches of `size_bytes` read for a fetch or a subscription (the reader thread)."""
        if size_bytes:
            self._fetch_bytes.inc(size_bytes)

    def observe_round(self, seconds: float) -> None:
        self._storage_round.observe(seconds)

    def observe_fsync(self, seconds: float) -> None:
        """The storage thread calls it after each group commit (its one writer)."""
        self._fsync_duration.observe(seconds)

    def leader_changed(self) -> None:
        self.leader_changes.labels(self.node_id).inc()

    def replica_rebuilt(self) -> None:
        self.replicas_rebuilt.labels(self.node_id).inc()

    def replica_retired(self) -> None:
        self.replicas_retired.labels(self.node_id).inc()

    def authz_refused(self, operation: str, outcome: str) -> None:
        """A client's call refused by authorization (`AUTHZ_OPERATIONS` x unauthenticated,
        denied)."""
        counter = self._authz_refused.get((operation, outcome))
        if counter is None:
            counter = self._authz_refused[(operation, outcome)] = self.authz_refusals.labels(
                self.node_id, operation, outcome
            )
        counter.inc()

    def peer_auth_rejected(self, kind: str) -> None:
        """A peer message of `kind` ("raft", "swim", "call") refused by `cluster.peer_auth`."""
        counter = self._peer_rejected.get(kind)
        if counter is None:
            counter = self._peer_rejected[kind] = self.peer_auth_rejections.labels(
                self.node_id, kind
            )
        counter.inc()

    def serve(self, host: str, port: int) -> None:
        self._server = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        server = self._server
        if isinstance(server, tuple):
            http_server, thread = server
            http_server.shutdown()
            http_server.server_close()
            thread.join(timeout=5)
