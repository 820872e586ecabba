"""A node's event loop: uvloop by default where installed, asyncio's own on request, and
nodes on either loop replicate to each other."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import Client
from flotilla.cli_node import _event_loop

CONFIG = 'tick_ms = 20\nelection_ticks = 10\nheartbeat_ticks = 2\nfsync = "always"\n'


def test_auto_takes_uvloop_when_installed_and_asyncio_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvloop  # noqa: F401 (a dependency on every platform but Windows)

    assert _event_loop("auto") == "uvloop"
    assert _event_loop("uvloop") == "uvloop"
    assert _event_loop("asyncio") == "asyncio"
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if it were not installed
    assert _event_loop("auto") == "asyncio"
    assert _event_loop("asyncio") == "asyncio"
    with pytest.raises(ImportError, match="uvloop is not installed"):
        _event_loop("uvloop")


def test_nodes_on_either_loop_replicate_to_each_other(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3, config_text=CONFIG) as cluster:
        cluster.nodes["n3"].extra_args = ["--event-loop", "asyncio"]
        cluster.start()
        logs = {n: spec.log_path for n, spec in cluster.nodes.items()}
        for node_id, expected in (("n1", "uvloop"), ("n2", "uvloop"), ("n3", "asyncio")):
            path = logs[node_id]
            assert path is not None
            assert f"serving on {cluster.nodes[node_id].address} (event loop: {expected})" in (
                path.read_text()
            ), node_id
        with Client(cluster.addresses(), timeout_s=30) as client:
            client.create_topic("loops", partitions=1, replication_factor=3)
            written = [client.produce("loops", f"v{i}".encode(), partition=0) for i in range(50)]
            assert [m.offset for m in written] == list(range(50))
            for node_id in cluster.nodes:

                def replica_has_all(node_id: str = node_id) -> bool:
                    records = client.read("loops", 0, 0, max_records=100, replica=node_id)
                    return [r.value for r in records] == [f"v{i}".encode() for i in range(50)]

                wait_until(replica_has_all, timeout_s=30, what=f"{node_id} holds every record")
