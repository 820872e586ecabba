"""What an operator sees of real nodes: the events in their stderr at the default level (logfmt,
and JSON with `--log-format json`), the metrics on /metrics (names, types, labels), and the
monitoring files under deploy/monitoring (every metric the dashboard queries exists on a node;
the Prometheus targets are the compose nodes' metrics addresses).

One three-node cluster serves the whole module: a topic is created, written, read, cut by
retention (a change forwarded by n3, which is no controller) and deleted; then n3 is killed (suspected, declared dead, its replicas replaced) and
n2 stops gracefully (it leaves)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import wait_until
from prometheus_client.parser import text_string_to_metric_families
from ruamel.yaml import YAML

from cluster.local import LocalCluster, free_port
from cluster.logs import parse_logfmt
from flotilla import Client

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "monitoring" / "grafana-dashboard.json"
PROMETHEUS = ROOT / "deploy" / "monitoring" / "prometheus.yml"
CONFIG = (
    "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
    "replace_after_s = 2.0\nretention_check_s = 0.5\nsegment_bytes = 4096\n"
)
PARTITIONS = 3


@dataclass
class Observed:
    events: dict[str, list[dict[str, Any]]]  # node id -> its log's records, parsed
    raw: dict[str, str]  # node id -> its log
    scrapes: dict[str, str]  # node id -> /metrics text (all three alive, after traffic)
    degraded: dict[str, str]  # n1's and n2's /metrics once n3's replicas were removed


def _records(node_id: str, text: str, fmt: str) -> list[dict[str, Any]]:
    records = []
    for line in text.splitlines():
        if line.startswith("flotilla node "):  # the command's own stdout lines
            continue
        records.append(json.loads(line) if fmt == "json" else parse_logfmt(line))
    return records


def _events(records: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("event") == name]


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    root = tmp_path_factory.mktemp("obs")
    # FLOTILLA_LOG empty: the default level (INFO) is what is tested
    # n3 is no controller: a topic change sent to it is forwarded to one
    with LocalCluster(
        root, 3, controllers=2, config_text=CONFIG, env={"FLOTILLA_LOG": ""}
    ) as local:
        ports = {}
        for spec in local.nodes.values():
            ports[spec.node_id] = free_port(spec.host)
            spec.extra_args = ["--metrics", f"{spec.host}:{ports[spec.node_id]}"]
        local.nodes["n2"].extra_args += ["--log-format", "json"]
        local.start()

        def log_of(node_id: str) -> str:
            path = local.nodes[node_id].log_path
            assert path is not None
            return path.read_text(errors="replace")

        with Client(local.addresses(), timeout_s=30) as client:
            client.create_topic("obs", partitions=PARTITIONS, replication_factor=3)
            for partition in range(PARTITIONS):
                batch = [(None, bytes([65 + n % 26]) * 300, None) for n in range(40)]
                for key, value, _ in batch:
                    client.produce("obs", value, key=key, partition=partition)
                assert len(client.read("obs", partition, 0, 100)) == 40
            for spec in local.nodes.values():  # every replica serves a read
                client.read("obs", 0, 0, 10, replica=spec.node_id)
            with Client(local.nodes["n3"].address, timeout_s=30) as via_n3:
                via_n3.alter_topic("obs", retention_bytes=1)
            wait_until(
                lambda: all("event=retention_cut" in log_of(n) for n in ("n1", "n3")),
                30,
                "retention cuts logged",
            )

            def scrape(node_id: str) -> str:
                url = f"http://{local.nodes[node_id].host}:{ports[node_id]}/metrics"
                with urllib.request.urlopen(url, timeout=10) as response:
                    return str(response.read().decode())

            scrapes = {node_id: scrape(node_id) for node_id in ports}
            local.kill("n3")

            def n3_removed() -> set[int]:
                """The partitions whose leader removed n3."""
                removed = set()
                for node_id, fmt in (("n1", "logfmt"), ("n2", "json")):
                    try:
                        records = _records(node_id, log_of(node_id), fmt)
                    except ValueError:  # a line being written
                        continue
                    for r in _events(records, "replica_removed"):
                        if r["replica"] == "n3":
                            removed.add(int(r["partition"]))
                return removed

            wait_until(
                lambda: n3_removed() == set(range(PARTITIONS)), 60, "n3 removed everywhere",
                detail=n3_removed,
            )  # fmt: skip
            degraded = {node_id: scrape(node_id) for node_id in ("n1", "n2")}
            client.delete_topic("obs")
        local.stop("n2")
        wait_until(lambda: "event=member_left member=n2" in log_of("n1"), 30, "n2's leave seen")
        raw = {node_id: log_of(node_id) for node_id in local.nodes}
    events = {
        node_id: _records(node_id, text, "json" if node_id == "n2" else "logfmt")
        for node_id, text in raw.items()
    }
    yield Observed(events, raw, scrapes, degraded)


# -- logs ----------------------------------------------------------------------------------------
def test_a_node_logs_the_events_an_operator_needs_at_the_default_level(
    observed: Observed,
) -> None:
    n1 = observed.events["n1"]
    everyone = [record for records in observed.events.values() for record in records]
    assert all(r["node"] == "n1" and r["ts"].endswith("Z") for r in n1), n1[:3]
    assert not [r for r in n1 if r["level"] == "debug"]  # INFO is the default
    (started,) = _events(n1, "node_started")
    assert started["listen"].startswith("127.0.0.1:") and started["controller"] == "true"
    assert started["controllers"].count("=") == 2 and started["fsync"] == "always"
    joined = {r["member"] for r in _events(n1, "member_joined")}
    assert joined == {"n1", "n2", "n3"}, joined
    (created,) = _events(everyone, "topic_created")
    assert created["topic"] == "obs" and int(created["partitions"]) == PARTITIONS
    assert str(created["client"]).startswith("ipv4:127.0.0.1:"), created  # the gRPC peer
    # n3 got the change and forwarded it: the controller's line names the client, and n3
    (altered, forwarded) = sorted(_events(everyone, "topic_altered"), key=lambda r: "via" in r)
    assert altered["node"] == "n3" and int(altered["retention_bytes"]) == 1
    assert altered["client"].startswith("ipv4:127.0.0.1:"), altered
    assert forwarded["node"] in ("n1", "n2") and forwarded["client"] == altered["client"]
    assert forwarded["via"] != altered["client"], forwarded
    won = _events(everyone, "election_won")
    assert {int(r["partition"]) for r in won if r["topic"] == "obs"} == set(range(PARTITIONS))
    assert all(int(r["term"]) >= 1 for r in won)
    cuts = [r for r in _events(n1, "retention_cut") if r["topic"] == "obs"]
    assert cuts and all(int(r["log_start"]) > int(r["log_start_before"]) for r in cuts), cuts
    assert any(r["member"] == "n3" for r in _events(n1, "member_suspected")), observed.raw["n1"]
    (dead,) = [r for r in _events(n1, "member_dead") if r["member"] == "n3"]
    assert dead["level"] == "warning" and dead["address"].startswith("127.0.0.3:")
    removed = [r for r in _events(everyone, "replica_removed") if r["replica"] == "n3"]
    assert removed and all("n3" not in r["voters"] for r in removed), removed
    (deleted,) = _events(everyone, "topic_deleted")
    assert deleted["topic"] == "obs" and deleted["client"].startswith("ipv4:")
    assert any(r["member"] == "n2" for r in _events(n1, "member_left"))


def test_json_format_writes_one_object_per_line(observed: Observed) -> None:
    n2 = observed.events["n2"]  # parsed with json.loads line by line by the fixture
    assert n2 and all(r["node"] == "n2" for r in n2)
    (started,) = _events(n2, "node_started")
    assert started["controller"] is True and isinstance(started["segment_bytes"], int)
    (stopping,) = _events(n2, "node_stopping")
    assert stopping["graceful"] is True
    assert _events(n2, "node_stopped") and _events(n2, "member_joined")


def test_chatty_libraries_stay_quiet_at_info(observed: Observed) -> None:
    for node_id, records in observed.events.items():
        loud = [r for r in records if r["logger"].startswith(("grpc", "pysyncobj"))]
        assert not [r for r in loud if r["level"] in ("debug", "info")], (node_id, loud)


# -- metrics ---------------------------------------------------------------------------------------
NODE = {"node"}
PARTITION = {"node", "topic", "partition"}
EXPECTED: dict[str, tuple[str, set[str]]] = {
    "flotilla_produce_requests": ("counter", {"node", "code"}),
    "flotilla_produce_bytes": ("counter", NODE),
    "flotilla_produce_request_duration_seconds": ("histogram", NODE),
    "flotilla_fetch_requests": ("counter", {"node", "method", "code"}),
    "flotilla_fetch_bytes": ("counter", NODE),
    "flotilla_fetch_request_duration_seconds": ("histogram", NODE),
    "flotilla_storage_round_duration_seconds": ("histogram", NODE),
    "flotilla_fsync_duration_seconds": ("histogram", NODE),
    "flotilla_leader_changes": ("counter", NODE),
    "flotilla_partition_commit_index": ("gauge", PARTITION),
    "flotilla_partition_high_watermark": ("gauge", PARTITION),
    "flotilla_partition_is_leader": ("gauge", PARTITION),
    "flotilla_partition_follower_lag_entries": ("gauge", PARTITION | {"follower"}),
    "flotilla_replicas": ("gauge", NODE),
    "flotilla_leader_partitions": ("gauge", NODE),
    "flotilla_under_replicated_partitions": ("gauge", NODE),
    "flotilla_offline_partitions": ("gauge", NODE),
    "flotilla_log_segments": ("gauge", NODE),
    "flotilla_log_size_bytes": ("gauge", NODE),
    "flotilla_replicas_quarantined": ("gauge", NODE),
    "flotilla_controller_is_leader": ("gauge", NODE),
    "process_cpu_seconds": ("counter", set()),
    "process_resident_memory_bytes": ("gauge", set()),
    "python_gc_collections": ("counter", {"generation"}),
}


def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_a_node_serves_its_metrics_with_their_types_and_labels(observed: Observed) -> None:
    merged: dict[str, tuple[str, set[str]]] = {}
    values: dict[str, float] = {}
    for text in observed.scrapes.values():
        for name, family in _families(text).items():
            labels = set().union(*(set(s.labels) - {"le"} for s in family.samples))
            kind, seen = merged.get(name, (family.type, set()))
            merged[name] = (kind, seen | labels)
            for sample in family.samples:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    for name, (kind, labels) in EXPECTED.items():
        assert name in merged, f"{name} missing from /metrics"
        assert merged[name] == (kind, labels), (name, merged[name])
    leaders = sum(
        s.value
        for text in observed.scrapes.values()
        for s in _families(text)["flotilla_leader_partitions"].samples
    )
    assert leaders == PARTITIONS  # each partition led by exactly one node
    assert values["flotilla_produce_bytes_total"] > 3 * 40 * 300
    assert values["flotilla_fsync_duration_seconds_count"] > 0
    assert values["flotilla_controller_is_leader"] == 1  # exactly one control-plane leader
    assert values["flotilla_under_replicated_partitions"] == 0  # all three alive
    assert values["flotilla_log_segments"] >= 3 * PARTITIONS


def _total(scrapes: dict[str, str], name: str) -> float:
    return sum(
        sample.value
        for text in scrapes.values()
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def test_partitions_short_of_their_replication_factor_count_as_under_replicated(
    observed: Observed,
) -> None:
    """n3 died and its replicas were removed: every partition (RF 3) has two voters left."""
    assert _total(observed.scrapes, "flotilla_under_replicated_partitions") == 0
    assert _total(observed.degraded, "flotilla_under_replicated_partitions") == PARTITIONS
    assert _total(observed.degraded, "flotilla_offline_partitions") == 0  # all have leaders
    assert _total(observed.degraded, "flotilla_leader_partitions") == PARTITIONS


# -- monitoring files ------------------------------------------------------------------------------
def dashboard_metrics(dashboard: dict[str, Any]) -> set[str]:
    """The series names the dashboard's queries read."""
    names = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            names |= set(re.findall(r"\b(?:flotilla|process|python)_[a-z0-9_]+", target["expr"]))
    return names


def missing_metrics(dashboard: dict[str, Any], scrapes: dict[str, str]) -> set[str]:
    """What the dashboard queries that no node serves (a sample name: `x_bucket`, `y_total`)."""
    served = {
        sample.name
        for text in scrapes.values()
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return dashboard_metrics(dashboard) - served


def test_every_metric_the_dashboard_queries_exists_on_a_node(observed: Observed) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queried = dashboard_metrics(dashboard)
    for wanted in (
        "flotilla_produce_requests_total",
        "flotilla_produce_request_duration_seconds_bucket",
        "flotilla_under_replicated_partitions",
        "flotilla_offline_partitions",
        "flotilla_leader_partitions",
        "flotilla_partition_follower_lag_entries",
        "flotilla_fsync_duration_seconds_bucket",
    ):
        assert wanted in queried, wanted  # the panels the issue asks for
    assert missing_metrics(dashboard, observed.scrapes) == set()
    # and the check catches a query of a metric that does not exist (renamed, say)
    panel = dashboard["panels"][1]
    panel["targets"][0]["expr"] = panel["targets"][0]["expr"].replace(
        "flotilla_produce_request_duration_seconds", "flotilla_produce_latency_seconds"
    )
    assert missing_metrics(dashboard, observed.scrapes) == {
        "flotilla_produce_latency_seconds_bucket"
    }


def test_prometheus_scrapes_the_compose_nodes_metrics_addresses() -> None:
    yaml = YAML(typ="safe", pure=True)
    compose = yaml.load((ROOT / "docker-compose.yml").read_text())
    expected = set()
    for name, service in compose["services"].items():
        command = [str(part) for part in service.get("command", [])]
        if "--metrics" in command:
            port = command[command.index("--metrics") + 1].rsplit(":", 1)[1]
            expected.add(f"{name}:{port}")
    assert expected == {"n1:9101", "n2:9102", "n3:9103"}
    config = yaml.load(PROMETHEUS.read_text())
    targets = {
        target
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    assert targets == expected
