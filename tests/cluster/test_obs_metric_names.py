"""Every metric a node serves follows the Prometheus naming conventions (a lint over the
registry, so a new metric with a bad name fails here), and the lint itself catches bad names."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from harness import open_replica
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.metrics_core import Metric

from cluster.metrics import Metrics

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# the client library's default collectors; everything else is ours
FOREIGN_PREFIXES = ("process_", "python_")
# units that are not base units (Prometheus: seconds, bytes, ...), as a name's last words
NON_BASE_UNITS = re.compile(
    r"_(ms|msec|millis|milliseconds|us|usec|micros|microseconds|ns|nanoseconds|minutes|hours|"
    r"days|kb|kib|mb|mib|gb|gib|kilobytes|megabytes|gigabytes|percent|pct)(_total)?$"
)
# ("_timers" counts timers, not a time)
TIME_WORDS = re.compile(r"(latency|duration|_time(?!rs?(_|$))|delay|elapsed|_age)")
SIZE_WORDS = re.compile(r"(_size|_bytes)")
RESERVED_SUFFIXES = ("_count", "_sum", "_bucket", "_created")


def naming_problems(families: Iterable[Metric]) -> list[str]:
    """What breaks the conventions, one message per problem (empty: none)."""
    problems = []
    for family in families:
        name, kind = family.name, family.type
        # a counter's family name is given without `_total`; its samples carry it
        full = f"{name}_total" if kind == "counter" else name
        where = f"{full} ({kind})"
        if not NAME.match(name):
            problems.append(f"{where}: not snake_case [a-z0-9_]")
        if not name.startswith("flotilla_") and not name.startswith(FOREIGN_PREFIXES):
            problems.append(f"{where}: our metrics start with flotilla_")
        if not family.documentation.strip():
            problems.append(f"{where}: no help text")
        if NON_BASE_UNITS.search(full):
            problems.append(f"{where}: not in base units (seconds, bytes)")
        if kind != "counter" and name.endswith("_total"):
            problems.append(f"{where}: only counters end in _total")
        if kind in ("gauge", "untyped") and name.endswith(RESERVED_SUFFIXES):
            problems.append(f"{where}: ends in a suffix reserved for histograms and summaries")
        if kind in ("histogram", "summary") and not name.endswith(("_seconds", "_bytes")):
            problems.append(f"{where}: a distribution names its unit (_seconds or _bytes)")
        if TIME_WORDS.search(name) and not re.search(r"_seconds$", name):
            problems.append(f"{where}: a time is in _seconds")
        if SIZE_WORDS.search(name) and not re.search(r"_bytes$", name):
            problems.append(f"{where}: a size is in _bytes")
        for sample in family.samples:
            for label in sample.labels:
                if not NAME.match(label) or label.startswith("__"):
                    problems.append(f"{where}: label {label!r} is not snake_case")
    return problems


def test_every_metric_of_a_node_follows_the_conventions(tmp_path: Path) -> None:
    replica = open_replica(tmp_path)  # a real replica, so the per-partition series have samples
    try:
        metrics = Metrics(
            "n1",
            lambda: [replica],
            replication_factor=lambda topic: 3,
            controller_leader=lambda: True,
        )
        metrics.observe_produce("OK", 0.01)
        metrics.observe_produce("UNAVAILABLE", 0.02)
        metrics.produced_bytes(100)
        metrics.observe_fetch("fetch", "OK", 0.01)
        metrics.observe_fetch("subscribe", "CANCELLED", None)
        metrics.fetched_bytes(10)
        metrics.observe_fsync(0.001)
        metrics.observe_round(0.002)
        metrics.leader_changed()
        metrics.replica_rebuilt()
        metrics.replica_retired()
        families = list(metrics.registry.collect())
    finally:
        replica.close()
    names = {family.name for family in families}
    # the lint saw them all: ours, and the client library's process/platform/GC collectors
    assert {"flotilla_partition_commit_index", "flotilla_fsync_duration_seconds"} <= names
    assert {"process_cpu_seconds", "python_info", "python_gc_collections"} <= names
    assert naming_problems(families) == []


def test_the_lint_catches_bad_names() -> None:
    registry = CollectorRegistry()
    Gauge("flotilla_requests_total", "a gauge named like a counter", registry=registry)
    Histogram("flotilla_produce_latency_ms", "milliseconds", registry=registry)
    Histogram("flotilla_produce_latency", "no unit", registry=registry)
    Gauge("flotilla_log_size", "a size without _bytes", registry=registry)
    Gauge("flotilla_fsync_time_us", "microseconds", registry=registry)
    Gauge("flotillaLagEntries", "camel case", registry=registry)
    Counter("produce_requests", "no flotilla_ prefix", registry=registry)
    Summary("flotilla_batch_records", "a summary without a unit", registry=registry)
    Gauge("flotilla_partitions_count", "a reserved suffix", registry=registry)
    problems = naming_problems(registry.collect())
    expected = {
        "flotilla_requests_total (gauge): only counters end in _total",
        "flotilla_produce_latency_ms (histogram): not in base units (seconds, bytes)",
        "flotilla_produce_latency_ms (histogram): a time is in _seconds",
        "flotilla_produce_latency (histogram): a distribution names its unit (_seconds or _bytes)",
        "flotilla_log_size (gauge): a size is in _bytes",
        "flotilla_fsync_time_us (gauge): not in base units (seconds, bytes)",
        "flotillaLagEntries (gauge): not snake_case [a-z0-9_]",
        "flotillaLagEntries (gauge): our metrics start with flotilla_",
        "produce_requests_total (counter): our metrics start with flotilla_",
        "flotilla_batch_records (summary): a distribution names its unit (_seconds or _bytes)",
        "flotilla_partitions_count (gauge): ends in a suffix reserved for histograms and summaries",
    }
    assert expected <= set(problems), sorted(set(problems) ^ expected)
