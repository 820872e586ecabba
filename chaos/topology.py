"""Cluster topology: the one description that the local chaos harness and docker-compose share.

A `Topology` is abstract: node ids `n1..nN` (node `n<i>` has number i), the controllers (the first
`controllers` nodes, as `cluster.local.LocalCluster` picks them), and one directed link per ordered
pair of distinct nodes. A `Rendering` puts it on concrete addresses:

- `render_local(topology, ports)`: node i on 127.0.0.i with ports the caller found free (the
  harness's convention), Toxiproxy (ours or the real one) and its proxies on 127.0.0.1;
- `render_compose(topology)`: node i is compose service `n<i>` with gRPC port 7000+i, control plane
  7100+i, raw Raft port 7200+i and metrics 9100+i; the Toxiproxy service is `toxiproxy`, the proxy
  of link i->j listens on port 20000+100*i+j, and that of its Raft port on 30000+100*i+j.

Every rendering keeps these equations (tests/deploy checks them on both):

    proxy(a->b).upstream == node(b).advertise
    dial_map(a)[b]       == proxy(a->b).dial                         for every b != a
    raft_proxy(a->b).upstream == node(b).raft_dial, dial_map(a)[b/raft] == raft_proxy(a->b).dial
                                                          for every b != a with a raft port
    controllers_arg      == ",".join(f"{c}={node(c).control}" for c in controller_ids)
    node_args(a)         == the flags LocalCluster passes (--id --listen --data-dir --controllers
                            --join), plus --advertise/--dial-map/--metrics where the rendering has
                            them (and --metrics-public for metrics off loopback); TLS comes from
                            the environment in compose (`tls_environment`), from LocalCluster's
                            --tls-* flags locally

Only the data plane (gRPC: Raft, SWIM, client calls) follows the dial map and so the proxies. The
control plane (pysyncobj on the control addresses) identifies peers by address and is dialled
directly: a Toxiproxy partition does not cut it.

Everything here is pure. The deploy files (docker-compose.yml, deploy/add-node.yml, the dial
maps and deploy/toxiproxy.json) are written from `render_compose` by `chaos.deploy_files`
(`python -m chaos.deploy_files write-deploy`).

Why the renderings live beside the description: the topology is one description (nodes,
addresses, dial maps, proxies) rendered for local runs and for compose, and the renderings must
agree byte for byte; keeping them in one module is what keeps them in step.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Link", "LocalPorts", "NodeEndpoints", "ProxyEndpoints", "Rendering", "Topology"]
__all__ += ["TopologyError", "raft_proxy_name", "render_compose", "render_local"]

GRPC_PORT_BASE = 7000  # compose: node i serves gRPC on 7000+i
CONTROL_PORT_BASE = 7100  # compose: node i runs the control plane on 7100+i
METRICS_PORT_BASE = 9100  # compose: node i serves metrics on 9100+i (published on host loopback)
PROXY_PORT_BASE = 20000  # compose: the proxy of link i->j listens on 20000 + 100*i + j
RAFT_PORT_BASE = 7200  # compose: node i takes peers' Raft frames on 7200+i (cluster/raft_link.py)
RAFT_PROXY_PORT_BASE = 30000  # compose: the proxy of link i->j's Raft port: 30000 + 100*i + j
TOXIPROXY_API_PORT = 8474
MAX_NODES = 99  # two decimal digits per node number in a proxy port


def raft_proxy_name(link: Link) -> str:
    """The name of the proxy of `link` to its target's raw Raft port."""
    return f"{link.proxy_name}-raft"


class TopologyError(ValueError):
    """A topology or rendering request is invalid; the message names the value and what is valid."""


@dataclass(frozen=True, slots=True)
class Link:
    """The directed link `source -> target`: what `source` dials to reach `target`."""

    source: str
    target: str

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def proxy_name(self) -> str:
        """The Toxiproxy proxy's name: like `name`, but safe in a URL path."""
        return f"{self.source}-to-{self.target}"


@dataclass(frozen=True, slots=True)
class Topology:
    nodes: int = 3
    controllers: int = 3  # the first min(controllers, nodes) nodes run the control plane

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= MAX_NODES:
            raise TopologyError(f"nodes={self.nodes} must be in 1..{MAX_NODES}")
        if self.controllers < 1:
            raise TopologyError(f"controllers={self.controllers} must be >= 1")

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(f"n{number}" for number in range(1, self.nodes + 1))

    @property
    def controller_ids(self) -> tuple[str, ...]:
        return self.node_ids[: min(self.controllers, self.nodes)]

    @property
    def links(self) -> tuple[Link, ...]:
        ids = self.node_ids
        return tuple(Link(a, b) for a in ids for b in ids if a != b)

    def number(self, node_id: str) -> int:
        if node_id not in self.node_ids:
            raise TopologyError(f"unknown node {node_id!r}; nodes are {list(self.node_ids)}")
        return int(node_id[1:])


@dataclass(frozen=True, slots=True)
class NodeEndpoints:
    node_id: str
    listen: str  # HOST:PORT the gRPC server binds
    advertise: str  # HOST:PORT where peers, clients and proxy upstreams reach it
    control: str  # control-plane HOST:PORT (pysyncobj binds it and peers dial it)
    metrics: str  # HOST:PORT of the Prometheus endpoint; "" = off
    raft: str = ""  # HOST:PORT of the raw Raft listener (cluster/raft_link.py); "" = none
    raft_advertise: str = ""  # HOST:PORT where peers and proxies reach it; "" = `raft`

    @property
    def raft_dial(self) -> str:
        return self.raft_advertise or self.raft


@dataclass(frozen=True, slots=True)
class ProxyEndpoints:
    link: Link
    listen: str  # HOST:PORT Toxiproxy binds for this proxy
    dial: str  # HOST:PORT the link's source dials to reach it
    upstream: str  # the target's advertised gRPC address (raft: its raft address)
    raft: bool = False  # the proxy of the target's raw Raft port, not of its gRPC port

    @property
    def name(self) -> str:
        """The Toxiproxy proxy's name: `n1-to-n2`, and `n1-to-n2-raft` for the Raft port's."""
        return raft_proxy_name(self.link) if self.raft else self.link.proxy_name


@dataclass(frozen=True, slots=True)
class Rendering:
    topology: Topology
    nodes: tuple[NodeEndpoints, ...]
    proxies: tuple[ProxyEndpoints, ...]
    toxiproxy_api: str  # HOST:PORT of the Toxiproxy HTTP API

    def node(self, node_id: str) -> NodeEndpoints:
        self.topology.number(node_id)  # raises on an unknown id
        return next(n for n in self.nodes if n.node_id == node_id)

    def proxy(self, source: str, target: str) -> ProxyEndpoints:
        found = [p for p in self.proxies if p.link == Link(source, target) and not p.raft]
        if not found:
            raise TopologyError(f"no link {source}->{target} in {list(self.topology.node_ids)}")
        return found[0]

    @property
    def controllers_arg(self) -> str:
        return ",".join(f"{c}={self.node(c).control}" for c in self.topology.controller_ids)

    def seeds(self, node_id: str) -> tuple[str, ...]:
        """Every other node's address, as LocalCluster passes them to --join."""
        return tuple(n.advertise for n in self.nodes if n.node_id != node_id)

    def dial_map(self, node_id: str) -> dict[str, str]:
        """peer id -> the proxy of the link from `node_id` to that peer (cluster/dialmap.py),
        and `<peer id>/raft` -> the proxy of the link to its raw Raft port, where it has one."""
        routes = {
            peer: self.proxy(node_id, peer).dial
            for peer in self.topology.node_ids
            if peer != node_id
        }
        for proxy in self.proxies:
            if proxy.raft and proxy.link.source == node_id:
                routes[f"{proxy.link.target}/raft"] = proxy.dial
        return routes

    def populate(self) -> list[dict[str, Any]]:
        """The body of Toxiproxy's `POST /populate`: one enabled proxy per directed link."""
        return [
            {"name": p.name, "listen": p.listen, "upstream": p.upstream, "enabled": True}
            for p in self.proxies
        ]

    def node_args(self, node_id: str, data_dir: str, *, dial_map_path: str = "") -> list[str]:
        """`flotilla node ...` arguments, in LocalCluster's order, without the program name."""
        node = self.node(node_id)
        args = ["node", "--id", node_id, "--listen", node.listen]
        if node.advertise != node.listen:
            args += ["--advertise", node.advertise]
        args += ["--data-dir", data_dir, "--controllers", self.controllers_arg]
        seeds = self.seeds(node_id)
        if seeds:
            args += ["--join", *seeds]
        if node.raft:
            args += ["--raft-listen", node.raft]
            if node.raft_dial != node.raft:
                args += ["--raft-advertise", node.raft_dial]
        if dial_map_path:
            args += ["--dial-map", dial_map_path]
        if node.metrics:
            args += ["--metrics", node.metrics]
            if not _loopback(node.metrics):  # Prometheus scrapes it from the compose network
                args.append("--metrics-public")
        return args


@dataclass(frozen=True, slots=True)
class LocalPorts:
    """Free ports for a local rendering, found by the caller (binding is I/O; this module is not)."""

    grpc: Mapping[str, int]  # node id -> gRPC port
    control: Mapping[str, int]  # node id -> control-plane port
    proxies: Mapping[str, int]  # Link.proxy_name -> proxy port
    toxiproxy_api: int
    metrics: Mapping[str, int] = field(default_factory=dict)  # node id -> port; absent: off
    raft: Mapping[str, int] = field(default_factory=dict)  # node id -> raw Raft port; absent: none
    # raft_proxy_name(link) -> proxy port, for each link whose target has a raft port
    raft_proxies: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def allocate(cls, topology: Topology, free_port: Callable[[str], int]) -> LocalPorts:
        """Asks `free_port(host)` for every port, on the host that will bind it."""
        hosts = {node_id: local_host(topology.number(node_id)) for node_id in topology.node_ids}
        return cls(
            grpc={node_id: free_port(host) for node_id, host in hosts.items()},
            control={node_id: free_port(host) for node_id, host in hosts.items()},
            proxies={link.proxy_name: free_port("127.0.0.1") for link in topology.links},
            toxiproxy_api=free_port("127.0.0.1"),
            raft={node_id: free_port(host) for node_id, host in hosts.items()},
            raft_proxies={raft_proxy_name(k): free_port("127.0.0.1") for k in topology.links},
        )


def _loopback(address: str) -> bool:
    host = address.rpartition(":")[0]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def local_host(number: int) -> str:
    """Node number i's own loopback address, so that its links can be told apart."""
    return f"127.0.0.{number}"


def render_local(topology: Topology, ports: LocalPorts) -> Rendering:
    missing = [f"grpc:{n}" for n in topology.node_ids if n not in ports.grpc]
    missing += [f"control:{n}" for n in topology.node_ids if n not in ports.control]
    missing += [
        f"proxies:{k.proxy_name}" for k in topology.links if k.proxy_name not in ports.proxies
    ]
    if missing:
        raise TopologyError(f"LocalPorts lacks ports for {missing}")
    nodes = []
    for node_id in topology.node_ids:
        host = local_host(topology.number(node_id))
        address = f"{host}:{ports.grpc[node_id]}"
        metrics = f"{host}:{ports.metrics[node_id]}" if node_id in ports.metrics else ""
        raft = f"{host}:{ports.raft[node_id]}" if node_id in ports.raft else ""
        control = f"{host}:{ports.control[node_id]}"
        nodes.append(NodeEndpoints(node_id, address, address, control, metrics, raft))
    by_id = {node.node_id: node for node in nodes}
    proxies = [
        ProxyEndpoints(link, address, address, by_id[link.target].advertise)
        for link in topology.links
        for address in [f"127.0.0.1:{ports.proxies[link.proxy_name]}"]
    ]
    for link in topology.links:  # a raft port's links get proxies of their own
        if by_id[link.target].raft:
            port = ports.raft_proxies.get(raft_proxy_name(link))
            if port is None:
                raise TopologyError(f"LocalPorts lacks raft_proxies:{raft_proxy_name(link)}")
            address = f"127.0.0.1:{port}"
            upstream = by_id[link.target].raft_dial
            proxies.append(ProxyEndpoints(link, address, address, upstream, True))
    return Rendering(topology, tuple(nodes), tuple(proxies), f"127.0.0.1:{ports.toxiproxy_api}")


def render_compose(topology: Topology) -> Rendering:
    nodes = tuple(
        NodeEndpoints(
            node_id=node_id,
            listen=f"0.0.0.0:{GRPC_PORT_BASE + number}",
            advertise=f"{node_id}:{GRPC_PORT_BASE + number}",
            control=f"{node_id}:{CONTROL_PORT_BASE + number}",
            metrics=f"0.0.0.0:{METRICS_PORT_BASE + number}",
            raft=f"0.0.0.0:{RAFT_PORT_BASE + number}",
            raft_advertise=f"{node_id}:{RAFT_PORT_BASE + number}",
        )
        for node_id in topology.node_ids
        for number in [topology.number(node_id)]
    )
    by_id = {node.node_id: node for node in nodes}
    proxies = []
    for link in topology.links:
        port = PROXY_PORT_BASE + 100 * topology.number(link.source) + topology.number(link.target)
        proxies.append(
            ProxyEndpoints(
                link, f"0.0.0.0:{port}", f"toxiproxy:{port}", by_id[link.target].advertise
            )
        )
    for link in topology.links:
        number = 100 * topology.number(link.source) + topology.number(link.target)
        port = RAFT_PROXY_PORT_BASE + number
        upstream = by_id[link.target].raft_dial
        proxies.append(ProxyEndpoints(link, f"0.0.0.0:{port}", f"toxiproxy:{port}", upstream, True))
    return Rendering(topology, nodes, tuple(proxies), f"toxiproxy:{TOXIPROXY_API_PORT}")
