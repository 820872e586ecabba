"""`flotilla status` shows the control plane (its leader, which controllers answer) and never a
negative or made-up lag: a replica without a lag says why. One real 3-node cluster for the
module; the test that stops a node runs last."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from harness import wait_until
from rich.console import Console

from cluster.local import LocalCluster
from flotilla import Client, tools
from flotilla._status import ClusterStatus, replica_lags

pytestmark = pytest.mark.integration

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("status"), 3, config_text=CONFIG) as local:
        local.start()
        yield local


def _status(client: Client) -> tuple[ClusterStatus, str]:
    out = io.StringIO()
    found = tools.status(client, Console(file=out, width=200))
    return found, out.getvalue()


def test_status_shows_the_control_plane_leader_and_every_controller(
    cluster: LocalCluster,
) -> None:
    with Client(cluster.addresses(), timeout_s=20) as client:
        client.create_topic("st", partitions=2, replication_factor=3)
        for n in range(6):
            client.produce("st", b"v", partition=n % 2)
        wait_until(
            lambda: _status(client)[0].control_plane.leader,
            what="a control-plane leader in status",
            detail=lambda: _status(client)[1],
        )
        found, text = _status(client)
    plane = found.control_plane
    assert plane.leader in cluster.controller_ids, text
    assert [c.id for c in plane.controllers] == cluster.controller_ids, text
    assert all(c.reachable for c in plane.controllers), text
    assert f"control plane: leader {plane.leader}, 3 of 3 controllers reachable" in text, text
    for c in plane.controllers:
        spec = cluster.nodes[c.id]
        assert c.address == f"{spec.host}:{spec.control_port}", text
    assert all(n >= 0 for p in found.partitions for n in p.lag.values()), text
    assert ":-1" not in text, text


def test_status_json_carries_the_control_plane(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(cluster.addresses(), timeout_s=20) as client:
        tools.status(client, Console(file=io.StringIO()), as_json=True)
    shown = json.loads(capsys.readouterr().out)
    plane = shown["control_plane"]
    assert plane["leader"] in cluster.controller_ids, plane
    assert [c["id"] for c in plane["controllers"]] == cluster.controller_ids, plane
    assert all(c["reachable"] for c in plane["controllers"]), plane
    assert all(n >= 0 for p in shown["partitions"] for n in p["lag"].values()), shown


def test_a_follower_seen_ahead_of_its_leader_is_caught_up_not_negative() -> None:
    lags, unknown = replica_lags("n1", ["n1", "n2", "n3"], 10, {"n1": 10, "n2": 11}, ["n1", "n2"])
    assert lags == {"n1": 0, "n2": 0}
    assert unknown == {"n3": "not reachable"}


def test_a_partition_without_a_leader_has_a_reason_per_replica() -> None:
    assert replica_lags("", ["n1", "n2"], 0, {"n1": 4, "n2": 5}, ["n1", "n2"]) == (
        {},
        {"n1": "no leader", "n2": "no leader"},
    )


def test_a_stopped_controller_shows_as_unreachable_and_its_replicas_lag_unknown(
    cluster: LocalCluster,
) -> None:
    with Client(cluster.addresses(), timeout_s=20) as client:
        client.create_topic("st", partitions=2, replication_factor=3)
        cluster.kill("n3")

        def settled() -> bool:
            found = _status(client)[0]
            # the survivors name n3 leader until their control plane's election timeout passes
            return found.control_plane.leader in ("n1", "n2") and not any(
                c.reachable for c in found.control_plane.controllers if c.id == "n3"
            )

        wait_until(
            settled, timeout_s=30, what="status without n3", detail=lambda: _status(client)[1]
        )
        found, text = _status(client)
    assert "2 of 3 controllers reachable" in text, text
    assert found.control_plane.leader in ("n1", "n2"), text
    for p in found.partitions:
        if "n3" in p.replicas and p.leader:
            assert "n3" not in p.lag and p.lag_unknown["n3"] == "not reachable", text
    assert ":-1" not in text and "n3:- (not reachable)" in text, text
