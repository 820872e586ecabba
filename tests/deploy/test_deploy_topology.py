"""One source of truth: docker-compose.yml, deploy/* and the local harness agree on the topology.

The committed files must be byte-identical to `python -m chaos.deploy_files write-deploy`. Then the
compose files, the local rendering and `LocalCluster` are each reduced to the same `Shape` by
reading their node command lines, Toxiproxy proxies and dial maps as plain data (not through the
generator), and the shapes must be equal. `shape_of` has its own failing cases.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from compose_files import flags_of
from harness import free_port
from ruamel.yaml import YAML

from chaos.deploy_files import deploy_files, main
from chaos.topology import (
    LocalPorts,
    Topology,
    TopologyError,
    raft_proxy_name,
    render_compose,
    render_local,
)
from cluster.local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_ONLY_FLAGS = {
    "--advertise",
    "--dial-map",
    "--metrics",
    "--metrics-public",
    "--raft-advertise",
}


# -- reading a deployment as plain data ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Shape:
    node_ids: tuple[str, ...]
    controllers: tuple[str, ...]
    joins: Mapping[str, frozenset[str]]  # node -> the ids of the nodes it joins
    routed_links: frozenset[tuple[str, str]]  # (a, b): a reaches b through proxy a->b
    # (a, b): a reaches b's raw Raft port through the proxy a->b-raft
    routed_raft_links: frozenset[tuple[str, str]] = frozenset()


def parse_flags(command: Sequence[str]) -> dict[str, list[str]]:
    """`node --id n1 --join a b --x y` -> {"--id": ["n1"], "--join": ["a", "b"], ...}."""
    assert command[0] == "node", command
    return flags_of(list(command))


def shape_of(
    commands: Mapping[str, Sequence[str]],
    proxies: Sequence[Mapping[str, Any]] = (),
    dial_maps: Mapping[str, Mapping[str, str]] | None = None,
    dial_host: str = "",
) -> tuple[Shape, list[str]]:
    """The topology a deployment describes, and every inconsistency found on the way.

    `commands`: service/node id -> `node ...` arguments; `proxies`: the /populate body;
    `dial_maps`: node id -> its dial map; `dial_host`: where nodes dial Toxiproxy ("" = the
    proxy's own listen address, as on loopback).
    """
    problems: list[str] = []
    flags = {name: parse_flags(command) for name, command in commands.items()}
    ids = tuple(f["--id"][0] for f in flags.values())
    problems += [
        f"service {n} runs node {f['--id'][0]}" for n, f in flags.items() if n != f["--id"][0]
    ]
    advertise = {f["--id"][0]: (f.get("--advertise") or f["--listen"])[0] for f in flags.values()}
    by_address = {address: node_id for node_id, address in advertise.items()}
    controller_args = {"".join(f["--controllers"]) for f in flags.values()}
    if len(controller_args) != 1:
        problems.append(f"nodes disagree on --controllers: {sorted(controller_args)}")
    pairs = [item.split("=", 1) for item in sorted(controller_args)[0].split(",")]
    for controller, control_address in pairs:
        if controller not in advertise:
            problems.append(f"controller {controller} is not a node")
        elif control_address.rpartition(":")[0] != advertise[controller].rpartition(":")[0]:
            problems.append(
                f"controller {controller} control plane {control_address} is not on its host"
            )
    joins: dict[str, frozenset[str]] = {}
    for node_id, f in ((f["--id"][0], f) for f in flags.values()):
        unknown = [seed for seed in f.get("--join", []) if seed not in by_address]
        problems += [f"{node_id} joins unknown address {seed}" for seed in unknown]
        joins[node_id] = frozenset(by_address[s] for s in f.get("--join", []) if s in by_address)
    routed: set[tuple[str, str]] = set()
    routed_raft: set[tuple[str, str]] = set()
    by_name = {proxy["name"]: proxy for proxy in proxies}
    raft_dial = {
        f["--id"][0]: (f.get("--raft-advertise") or f["--raft-listen"])[0]
        for f in flags.values()
        if "--raft-listen" in f
    }
    for source, all_routes in (dial_maps or {}).items():
        routes = {k: v for k, v in all_routes.items() if not k.endswith("/raft")}
        raft_routes = {k[: -len("/raft")]: v for k, v in all_routes.items() if k.endswith("/raft")}
        if set(raft_routes) != set(raft_dial) - {source}:
            problems.append(f"dial map of {source} routes raft ports {sorted(raft_routes)}")
        for target, dialled in raft_routes.items():
            proxy = by_name.get(f"{source}-to-{target}-raft")
            if proxy is None:
                problems.append(f"no proxy for the raft link {source}->{target}")
                continue
            port = proxy["listen"].rpartition(":")[2]
            expected = f"{dial_host}:{port}" if dial_host else proxy["listen"]
            if dialled != expected or proxy["upstream"] != raft_dial.get(target):
                problems.append(f"{source} dials {target}'s raft port at {dialled} via {proxy}")
            else:
                routed_raft.add((source, target))
        if set(routes) != set(ids) - {source}:
            problems.append(f"dial map of {source} covers {sorted(routes)}, not every peer")
        for target, dialled in routes.items():
            proxy = by_name.get(f"{source}-to-{target}")
            if proxy is None:
                problems.append(f"no proxy for the link {source}->{target}")
                continue
            port = proxy["listen"].rpartition(":")[2]
            expected = f"{dial_host}:{port}" if dial_host else proxy["listen"]
            if dialled != expected:
                problems.append(f"{source} dials {target} at {dialled}, not its proxy {expected}")
            elif proxy["upstream"] != advertise.get(target):
                problems.append(
                    f"proxy {proxy['name']} forwards to {proxy['upstream']}, not {target}"
                )
            else:
                routed.add((source, target))
    shape = Shape(ids, tuple(c for c, _ in pairs), joins, frozenset(routed), frozenset(routed_raft))
    return shape, problems


def compose_shape() -> tuple[Shape, list[str], dict[str, list[str]]]:
    """The committed docker-compose.yml and deploy/* read as data."""
    document = YAML(typ="safe", pure=True).load((ROOT / "docker-compose.yml").read_text())
    commands = {
        name: service["command"]
        for name, service in document["services"].items()
        if service.get("command", [None])[0] == "node"
    }
    dial_maps = {}
    for name, command in commands.items():
        path = parse_flags(command)["--dial-map"][0]  # /routes/<id>.json in the container
        dial_maps[name] = json.loads((ROOT / "deploy" / "dial-maps" / Path(path).name).read_text())
    proxies = json.loads((ROOT / "deploy" / "toxiproxy.json").read_text())
    shape, problems = shape_of(commands, proxies, dial_maps, dial_host="toxiproxy")
    return shape, problems, commands


def local_shape(topology: Topology) -> tuple[Shape, list[str], dict[str, list[str]]]:
    rendering = render_local(topology, LocalPorts.allocate(topology, free_port))
    commands = {
        n: rendering.node_args(n, f"/tmp/{n}", dial_map_path=f"/tmp/{n}.json")
        for n in topology.node_ids
    }
    dial_maps = {n: rendering.dial_map(n) for n in topology.node_ids}
    shape, problems = shape_of(commands, rendering.populate(), dial_maps)
    return shape, problems, commands


def all_links(topology: Topology) -> frozenset[tuple[str, str]]:
    return frozenset((link.source, link.target) for link in topology.links)


# -- the topology itself ----------------------------------------------------------------------------
def test_topology_names_nodes_controllers_and_directed_links() -> None:
    topology = Topology(nodes=4, controllers=3)
    assert topology.node_ids == ("n1", "n2", "n3", "n4")
    assert topology.controller_ids == ("n1", "n2", "n3")
    assert len(topology.links) == 4 * 3
    assert [link.name for link in topology.links[:3]] == ["n1->n2", "n1->n3", "n1->n4"]
    assert topology.links[0].proxy_name == "n1-to-n2"
    assert Topology(nodes=2, controllers=3).controller_ids == ("n1", "n2")


@pytest.mark.parametrize(
    ("nodes", "controllers", "message"),
    [(0, 3, "nodes=0 must be in 1..99"), (100, 3, "nodes=100"), (3, 0, "controllers=0")],
)
def test_a_bad_topology_is_refused_with_its_value(
    nodes: int, controllers: int, message: str
) -> None:
    with pytest.raises(TopologyError, match=message):
        Topology(nodes, controllers)


def test_local_rendering_needs_every_port() -> None:
    topology = Topology(3)
    ports = LocalPorts.allocate(topology, lambda host: 1)
    broken = LocalPorts(ports.grpc, {"n1": 2}, ports.proxies, ports.toxiproxy_api)
    with pytest.raises(TopologyError, match=r"control:n2"):
        render_local(topology, broken)


# -- committed files == generator -----------------------------------------------------------------
def test_committed_deploy_files_are_the_generators_output() -> None:
    expected = deploy_files(Topology())
    for relative, text in expected.items():
        assert (ROOT / relative).read_text(encoding="utf-8") == text, (
            f"{relative} is stale: run `python -m chaos.deploy_files write-deploy`"
        )
    committed_maps = {f"deploy/dial-maps/{p.name}" for p in (ROOT / "deploy/dial-maps").iterdir()}
    assert committed_maps == {r for r in expected if r.startswith("deploy/dial-maps/")}


def test_compose_command_prints_the_committed_file() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "chaos.deploy_files", "compose"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        text=True,
        timeout=60,
    ).stdout
    assert printed == (ROOT / "docker-compose.yml").read_text(encoding="utf-8")


def test_write_deploy_writes_every_file_and_drops_stale_dial_maps(tmp_path: Path) -> None:
    assert main(["write-deploy", "--nodes", "4", "--root", str(tmp_path)]) == 0
    assert (tmp_path / "deploy/dial-maps/n4.json").exists()
    assert main(["write-deploy", "--root", str(tmp_path)]) == 0
    assert not (tmp_path / "deploy/dial-maps/n4.json").exists()
    for relative, text in deploy_files(Topology()).items():
        assert (tmp_path / relative).read_text(encoding="utf-8") == text


# -- compose == local == LocalCluster ------------------------------------------------------------
def test_compose_files_describe_a_consistent_cluster_routed_through_every_proxy() -> None:
    shape, problems, _ = compose_shape()
    assert problems == []
    topology = Topology()
    assert shape.node_ids == topology.node_ids
    assert shape.controllers == topology.controller_ids
    assert shape.routed_links == all_links(topology)


def test_compose_and_local_renderings_agree() -> None:
    compose, compose_problems, compose_commands = compose_shape()
    local, local_problems, local_commands = local_shape(Topology())
    assert compose_problems == local_problems == []
    assert compose == local
    for node_id, command in compose_commands.items():
        local_flags = [w for w in local_commands[node_id] if w.startswith("--")]
        compose_flags = [w for w in command if w.startswith("--") and w not in COMPOSE_ONLY_FLAGS]
        assert compose_flags == [f for f in local_flags if f not in COMPOSE_ONLY_FLAGS]


@pytest.mark.parametrize(("nodes", "controllers"), [(3, 3), (4, 3), (2, 3), (5, 1)])
def test_local_cluster_conventions_match_the_topology(
    tmp_path: Path, nodes: int, controllers: int
) -> None:
    cluster = LocalCluster(
        tmp_path, nodes, controllers=controllers
    )  # binds nothing, starts nothing
    topology = Topology(nodes, controllers)
    ports = LocalPorts(
        grpc={n: spec.port for n, spec in cluster.nodes.items()},
        control={n: spec.control_port for n, spec in cluster.nodes.items()},
        proxies={link.proxy_name: 1 for link in topology.links},
        toxiproxy_api=1,
        raft={n: spec.raft_port for n, spec in cluster.nodes.items()},
        raft_proxies={raft_proxy_name(link): 1 for link in topology.links},
    )
    rendering = render_local(topology, ports)
    assert tuple(cluster.nodes) == topology.node_ids
    assert tuple(cluster.controller_ids) == topology.controller_ids
    assert cluster.controllers_arg == rendering.controllers_arg
    assert cluster.bootstrap == rendering.nodes[0].advertise
    for node_id, spec in cluster.nodes.items():
        assert spec.address == rendering.node(node_id).advertise
        command = cluster.command(spec)
        assert command[:3] == [sys.executable, "-m", "flotilla"]
        assert command[3:] == rendering.node_args(node_id, str(spec.data_dir))
    harness, problems = shape_of({n: cluster.command(s)[3:] for n, s in cluster.nodes.items()})
    assert problems == []
    compose_like, _ = shape_of(
        {n: render_compose(topology).node_args(n, "/data") for n in topology.node_ids}
    )
    assert harness == compose_like


# -- the checker catches a miswired deployment ------------------------------------------------------
def _local_parts() -> tuple[dict[str, list[str]], list[dict[str, Any]], dict[str, dict[str, str]]]:
    """A correct local deployment with distinct, fixed ports (no binding needed)."""
    topology = Topology()
    ports = LocalPorts(
        grpc={n: 7000 + i for i, n in enumerate(topology.node_ids, 1)},
        control={n: 7100 + i for i, n in enumerate(topology.node_ids, 1)},
        proxies={link.proxy_name: 20000 + i for i, link in enumerate(topology.links)},
        toxiproxy_api=8474,
    )
    rendering = render_local(topology, ports)
    commands = {n: rendering.node_args(n, "/d") for n in topology.node_ids}
    return commands, rendering.populate(), {n: rendering.dial_map(n) for n in topology.node_ids}


def test_shape_of_accepts_the_correct_local_deployment() -> None:
    shape, problems = shape_of(*_local_parts())
    assert problems == []
    assert shape.routed_links == all_links(Topology())


def test_shape_of_catches_a_dial_map_through_the_wrong_proxy() -> None:
    commands, proxies, dial_maps = _local_parts()
    dial_maps["n1"]["n2"] = dial_maps["n1"]["n3"]  # n1 reaches n2 through the n1->n3 proxy
    shape, problems = shape_of(commands, proxies, dial_maps)
    assert any("n1 dials n2" in p for p in problems), problems
    assert ("n1", "n2") not in shape.routed_links


def test_shape_of_catches_a_proxy_to_the_wrong_node_a_missing_peer_and_bad_controllers() -> None:
    commands, proxies, dial_maps = _local_parts()
    proxies[0] = {**proxies[0], "upstream": proxies[1]["upstream"]}  # n1-to-n2 forwards to n3
    del dial_maps["n3"]["n1"]
    commands["n2"] = [*commands["n2"]]
    index = commands["n2"].index("--controllers") + 1
    commands["n2"][index] = commands["n2"][index].replace("n3=", "n9=")
    _, problems = shape_of(commands, proxies, dial_maps)
    assert any("proxy n1-to-n2 forwards to" in p for p in problems), problems
    assert any("dial map of n3" in p for p in problems), problems
    assert any("disagree on --controllers" in p for p in problems), problems
