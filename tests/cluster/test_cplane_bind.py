"""Each controller binds its own control-plane address: three controllers on 127.0.0.1/.2/.3
with the same port (what `flotilla dev --nodes 3` and the README's multi-host example do) form
one control plane that creates topics. Real processes throughout."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from cluster.local import LocalCluster, free_port
from flotilla import Client

pytestmark = pytest.mark.integration

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def _port_free_everywhere(port: int) -> bool:
    for host in HOSTS:
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def _shared_base_port() -> int:
    """A port P with P and P+100 free on every host (LocalCluster's base_port layout)."""
    for _ in range(100):
        port = free_port("127.0.0.1")
        if port + 100 < 65536 and _port_free_everywhere(port) and _port_free_everywhere(port + 100):
            return port
    raise AssertionError("no port free on 127.0.0.1-3 with its +100 free too")


def test_three_controllers_on_one_port_of_three_hosts_create_a_topic(tmp_path: Path) -> None:
    base = _shared_base_port()
    with LocalCluster(tmp_path, 3, config_text=CONFIG, base_port=base) as cluster:
        assert {spec.control_port for spec in cluster.nodes.values()} == {base + 100}
        cluster.start()
        with Client(cluster.addresses(), timeout_s=20) as client:
            info = client.create_topic("orders", partitions=3, replication_factor=3)
            assert info.name == "orders" and len(info.partitions) == 3
            meta = client.produce("orders", b"v", partition=2)
            assert [r.value for r in client.read("orders", 2, meta.offset, 1)] == [b"v"]
