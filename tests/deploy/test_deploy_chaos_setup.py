"""deploy/chaos_setup.py (the compose `toxiproxy-setup` service) against our Toxiproxy server.

The same script the chaos profile runs, fed the local rendering of the same topology: it must
create one proxy per directed link and only then publish each node's dial map.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import requests
from harness import free_port, wait_until

from chaos.topology import LocalPorts, Topology, render_local
from chaos.toxiproxy.server import ServerThread
from cluster.local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]


def _load_setup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chaos_setup", ROOT / "deploy" / "chaos_setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


chaos_setup = _load_setup()


@pytest.fixture
def toxiproxy() -> Iterator[ServerThread]:
    with ServerThread(seed=1) as server:
        yield server


def _write_inputs(
    tmp_path: Path, topology: Topology
) -> tuple[Path, Path, Path, dict[str, dict[str, str]]]:
    rendering = render_local(topology, LocalPorts.allocate(topology, free_port))
    populate = tmp_path / "toxiproxy.json"
    populate.write_text(json.dumps(rendering.populate()))
    maps = tmp_path / "dial-maps"
    maps.mkdir()
    expected = {}
    for node_id in topology.node_ids:
        expected[f"{node_id}.json"] = rendering.dial_map(node_id)
        (maps / f"{node_id}.json").write_text(json.dumps(rendering.dial_map(node_id)))
    routes = tmp_path / "routes"
    routes.mkdir()
    return populate, maps, routes, expected


def test_setup_creates_every_proxy_then_publishes_the_dial_maps(
    tmp_path: Path, toxiproxy: ServerThread
) -> None:
    topology = Topology(3)
    populate, maps, routes, expected = _write_inputs(tmp_path, topology)
    argv = ["--toxiproxy", toxiproxy.url, "--populate", str(populate)]
    argv += ["--dial-maps", str(maps), "--routes", str(routes)]
    assert chaos_setup.main(argv) == 0
    proxies = requests.get(f"{toxiproxy.url}/proxies", timeout=5).json()
    # a proxy per directed link to each node's gRPC port, and one to its raw Raft port
    names = [link.proxy_name for link in topology.links]
    assert sorted(proxies) == sorted(names + [f"{name}-raft" for name in names])
    body = json.loads(populate.read_text())
    for wanted in body:
        proxy = proxies[wanted["name"]]
        assert (proxy["listen"], proxy["upstream"], proxy["enabled"]) == (
            wanted["listen"], wanted["upstream"], True,
        )  # fmt: skip
        host, _, port = wanted["listen"].rpartition(":")
        with socket.create_connection((host, int(port)), timeout=5):
            pass  # the proxy listens where the dial maps send the nodes
    assert {p.name: json.loads(p.read_text()) for p in routes.iterdir()} == expected
    # a second run (the service restarted) is harmless: same proxies, same maps
    assert chaos_setup.main(argv) == 0
    assert sorted(requests.get(f"{toxiproxy.url}/proxies", timeout=5).json()) == sorted(proxies)


def test_no_dial_map_is_published_when_toxiproxy_never_answers(tmp_path: Path) -> None:
    populate, maps, routes, _ = _write_inputs(tmp_path, Topology(3))
    started = time.monotonic()
    argv = ["--toxiproxy", f"http://127.0.0.1:{free_port()}", "--populate", str(populate)]
    argv += ["--dial-maps", str(maps), "--routes", str(routes), "--wait-s", "0.5"]
    assert chaos_setup.main(argv) == 1
    assert time.monotonic() - started < 5
    assert list(routes.iterdir()) == []


def test_no_dial_map_is_published_when_populate_is_refused(
    tmp_path: Path, toxiproxy: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    populate, maps, routes, _ = _write_inputs(tmp_path, Topology(3))
    body = json.loads(populate.read_text())
    body[1]["listen"] = body[0]["listen"]  # two proxies on one address: Toxiproxy refuses
    populate.write_text(json.dumps(body))
    argv = ["--toxiproxy", toxiproxy.url, "--populate", str(populate)]
    argv += ["--dial-maps", str(maps), "--routes", str(routes)]
    assert chaos_setup.main(argv) == 1
    assert "/populate answered" in capsys.readouterr().err
    assert list(routes.iterdir()) == []


CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"


@pytest.mark.integration
def test_running_nodes_switch_to_the_proxies_once_the_dial_maps_appear(
    tmp_path: Path, toxiproxy: ServerThread
) -> None:
    """The chaos profile's mechanism on real processes: nodes start with --dial-map pointing at a
    file that does not exist yet (they dial each other directly), the setup script publishes the
    maps, and every directed link moves onto its own proxy."""
    topology = Topology(3)
    routes = tmp_path / "routes"
    routes.mkdir()
    with LocalCluster(tmp_path / "cluster", topology.nodes, config_text=CONFIG) as cluster:
        ports = LocalPorts(
            grpc={n: spec.port for n, spec in cluster.nodes.items()},
            control={n: spec.control_port for n, spec in cluster.nodes.items()},
            proxies={link.proxy_name: free_port() for link in topology.links},
            toxiproxy_api=toxiproxy.port,
        )
        rendering = render_local(topology, ports)
        for node_id, spec in cluster.nodes.items():
            spec.extra_args = ["--dial-map", str(routes / f"{node_id}.json")]
        cluster.start()
        populate = tmp_path / "toxiproxy.json"
        populate.write_text(json.dumps(rendering.populate()))
        maps = tmp_path / "dial-maps"
        maps.mkdir()
        for node_id in topology.node_ids:
            (maps / f"{node_id}.json").write_text(json.dumps(rendering.dial_map(node_id)))
        argv = ["--toxiproxy", toxiproxy.url, "--populate", str(populate)]
        assert chaos_setup.main([*argv, "--dial-maps", str(maps), "--routes", str(routes)]) == 0

        def idle_links() -> list[str]:
            async def count() -> list[str]:
                proxies = toxiproxy.server.api.proxies
                return [name for name, proxy in proxies.items() if proxy.open_connections == 0]

            return toxiproxy.call(count)

        wait_until(lambda: not idle_links(), timeout_s=20, what="traffic on every proxy")
        assert sorted(toxiproxy.server.api.proxies) == sorted(
            link.proxy_name for link in topology.links
        )
