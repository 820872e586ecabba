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

Everything but `write_deploy` and `main` is pure. `python -m chaos.topology compose` prints
docker-compose.yml; `write-deploy` writes it with deploy/dial-maps/<id>.json and
deploy/toxiproxy.json (a test checks that the committed files are byte-identical to this output).

Why one module of ~590 lines: the topology is one description (nodes, addresses, dial maps,
proxies) rendered three ways (local runs, compose, deploy files) that must agree byte for byte;
keeping the renderings beside the description is what keeps them in step.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Link", "LocalPorts", "NodeEndpoints", "ProxyEndpoints", "Rendering", "Topology"]
__all__ += ["TopologyError", "compose_document", "compose_yaml", "deploy_files", "to_yaml"]
__all__ += ["add_node_document", "add_node_yaml", "render_compose", "render_local"]

GRPC_PORT_BASE = 7000  # compose: node i serves gRPC on 7000+i
CONTROL_PORT_BASE = 7100  # compose: node i runs the control plane on 7100+i
METRICS_PORT_BASE = 9100  # compose: node i serves metrics on 9100+i (published on host loopback)
PROXY_PORT_BASE = 20000  # compose: the proxy of link i->j listens on 20000 + 100*i + j
RAFT_PORT_BASE = 7200  # compose: node i takes peers' Raft frames on 7200+i (cluster/raft_link.py)
RAFT_PROXY_PORT_BASE = 30000  # compose: the proxy of link i->j's Raft port: 30000 + 100*i + j
TOXIPROXY_API_PORT = 8474
MAX_NODES = 99  # two decimal digits per node number in a proxy port

PROJECT = "flotilla"  # the compose project name the docs use (COMPOSE_PROJECT_NAME=flotilla)
IMAGE = "flotilla:local"
SPARK_IMAGE = "flotilla-spark:local"
TOXIPROXY_IMAGE = "ghcr.io/shopify/toxiproxy:2.4.0"
PROMETHEUS_IMAGE = "prom/prometheus:v3.1.0"
GRAFANA_IMAGE = "grafana/grafana:11.4.0"
# the base of every image built here; `make compose-check` points it at a debootstrap-made image
BASE_IMAGE_ARG = "${FLOTILLA_BASE_IMAGE:-python:3.11-slim}"
MONITORING_DIR = "./deploy/monitoring"  # prometheus.yml and grafana-dashboard.json
GRAFANA_PROVISIONING_DIR = "./deploy/grafana-provisioning"
RUNTIME_UID = 10001  # the image's unprivileged user (Dockerfile), owner of the routes tmpfs
DATA_DIR = "/data"
ROUTES_DIR = "/routes"  # dial maps appear here (tmpfs volume) only while the chaos profile runs
DEPLOY_DIR = "/opt/flotilla/deploy"  # deploy/ as copied into the image
CERTS_DIR = "/certs"  # the `certs` volume: the CA certificate, node and client certificates
CA_DIR = "/ca"  # the `ca` volume: the CA's key too, mounted by the `certs` step alone
CLIENT_CERT = "admin"  # the client certificate the `client` service presents (a superuser)
SECRET = "${FLOTILLA_CLUSTER_SECRET:?set FLOTILLA_CLUSTER_SECRET to a long random string, the same for every node}"
CHAOS_ARGS = ("--nemesis", "partition-random,kill-leader", "--duration", "60", "--seed", "7")


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


# -- the compose document ----------------------------------------------------------------------
_BUILD = {"context": ".", "target": "runtime", "args": {"BASE_IMAGE": BASE_IMAGE_ARG}}
_ONE_SHOT = {"healthcheck": {"disable": True}, "restart": "no"}
_HEALTH_TIMING = {"interval": "5s", "timeout": "3s", "start_period": "30s", "retries": 3}


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _node_service(rendering: Rendering, node: NodeEndpoints) -> dict[str, Any]:
    grpc_port, metrics_port = _port(node.listen), _port(node.metrics)
    ports = [f"127.0.0.1:{metrics_port}:{metrics_port}"]
    if node.node_id == rendering.topology.node_ids[0]:  # the one published bootstrap port
        ports.insert(0, f"${{FLOTILLA_PUBLISH_HOST:-127.0.0.1}}:{grpc_port}:{grpc_port}")
    dial_map = f"{ROUTES_DIR}/{node.node_id}.json"
    health = f"CMD python -m cluster.healthcheck 127.0.0.1:{grpc_port}".split()
    return {
        "image": IMAGE,
        "build": dict(_BUILD),
        "hostname": node.node_id,
        "init": True,  # a minimal init as PID 1 forwards SIGTERM and reaps
        "command": rendering.node_args(node.node_id, DATA_DIR, dial_map_path=dial_map),
        "environment": {
            "FLOTILLA_CLUSTER_SECRET": SECRET,
            "FLOTILLA_LOG": "${FLOTILLA_LOG:-info}",
            # `docker compose exec n<i> flotilla topic list` asks the node it runs in
            "FLOTILLA_BOOTSTRAP": node.advertise,
            # TLS on the one port (clients and peers), mutual: the node's own certificate
            **tls_environment(node.node_id),
        },
        "volumes": [
            f"{node.node_id}-data:{DATA_DIR}",
            f"routes:{ROUTES_DIR}:ro",
            f"certs:{CERTS_DIR}:ro",
        ],
        "depends_on": {"certs": {"condition": "service_completed_successfully"}},
        "ports": ports,
        "healthcheck": {"test": health, **_HEALTH_TIMING},
        "stop_signal": "SIGTERM",
        "stop_grace_period": "30s",  # graceful stop: leadership hand-off, then leave
        "restart": "unless-stopped",
    }


def tls_environment(name: str) -> dict[str, str]:
    """The TLS settings of a node (its certificate) or a client (a client certificate): the same
    variables for both, `FLOTILLA_TLS_CA`, `FLOTILLA_TLS_CERT`, `FLOTILLA_TLS_KEY`."""
    return {
        "FLOTILLA_TLS_CA": f"{CERTS_DIR}/ca.pem",
        "FLOTILLA_TLS_CERT": f"{CERTS_DIR}/{name}.pem",
        "FLOTILLA_TLS_KEY": f"{CERTS_DIR}/{name}.key",
    }


def _certs_service(topology: Topology) -> dict[str, Any]:
    """The one-shot step every node waits for: a CA and certificates in the `certs` volume, made
    once (deploy/compose_certs.py keeps what is there), for every node, the one
    deploy/add-node.yml adds too, and the clients' `admin`."""
    nodes = [f"n{number}" for number in range(1, topology.nodes + 2)]
    command = ["--ca-dir", CA_DIR, "--dir", CERTS_DIR, "--node", *nodes]
    return {
        "image": IMAGE,
        "build": dict(_BUILD),
        "entrypoint": ["python", f"{DEPLOY_DIR}/compose_certs.py"],
        "command": [*command, "--client", CLIENT_CERT],
        "volumes": [f"ca:{CA_DIR}", f"certs:{CERTS_DIR}"],
        **_ONE_SHOT,
    }


def compose_document(topology: Topology) -> dict[str, Any]:
    """docker-compose.yml as data: the certificates step and the nodes, plus the `chaos`,
    `spark`, `tools` and `monitoring` profiles."""
    rendering = render_compose(topology)
    bootstrap = rendering.nodes[0].advertise
    toxiproxy_url = f"http://{rendering.toxiproxy_api}"
    nodes_healthy = {n: {"condition": "service_healthy"} for n in topology.node_ids}
    services: dict[str, Any] = {"certs": _certs_service(topology)}
    services.update({n.node_id: _node_service(rendering, n) for n in rendering.nodes})
    client_tls = tls_environment(CLIENT_CERT)
    services["toxiproxy"] = {
        "image": TOXIPROXY_IMAGE,
        "profiles": ["chaos"],
        "command": ["-host=0.0.0.0", f"-port={TOXIPROXY_API_PORT}"],
        "ports": [f"127.0.0.1:{TOXIPROXY_API_PORT}:{TOXIPROXY_API_PORT}"],
        "restart": "unless-stopped",
    }
    services["toxiproxy-setup"] = {
        "image": IMAGE,
        "build": dict(_BUILD),
        "profiles": ["chaos"],
        "entrypoint": ["python", f"{DEPLOY_DIR}/chaos_setup.py"],
        "command": f"--toxiproxy {toxiproxy_url} --populate {DEPLOY_DIR}/toxiproxy.json "
        f"--dial-maps {DEPLOY_DIR}/dial-maps --routes {ROUTES_DIR}".split(),
        "volumes": [f"routes:{ROUTES_DIR}"],
        "depends_on": {"toxiproxy": {"condition": "service_started"}},
        **_ONE_SHOT,
    }
    services["chaos-runner"] = {
        "image": IMAGE,
        "build": dict(_BUILD),
        "profiles": ["chaos"],
        "working_dir": "/home/flotilla",
        "entrypoint": ["python", "-m", "chaos"],
        # a self-contained run: its own node processes and Toxiproxy API inside this container
        "command": ["run", "--nodes", str(topology.nodes), *CHAOS_ARGS],
        "volumes": ["chaos-runs:/home/flotilla/chaos-runs"],
        **_ONE_SHOT,
    }
    services["spark-demo"] = {
        "image": SPARK_IMAGE,
        "build": {
            "context": ".",
            "dockerfile": "deploy/spark.Dockerfile",
            "target": "spark",
            "args": {"BASE_IMAGE": BASE_IMAGE_ARG},
        },
        "profiles": ["spark"],
        "entrypoint": ["python", "-m", "flotilla.spark_demo"],
        "environment": {"FLOTILLA_BOOTSTRAP": bootstrap, **client_tls},
        "volumes": [f"certs:{CERTS_DIR}:ro"],
        "depends_on": nodes_healthy,
        **_ONE_SHOT,
    }
    services["client"] = {
        "image": IMAGE,
        "build": dict(_BUILD),
        "profiles": ["tools"],
        # `docker compose run --rm client topic create orders`: the CLI inside the compose network
        "entrypoint": ["flotilla"],
        "command": ["--help"],
        "environment": {"FLOTILLA_BOOTSTRAP": bootstrap, **client_tls},
        "volumes": [f"certs:{CERTS_DIR}:ro"],
        **_ONE_SHOT,
    }
    services.update(_monitoring_services(rendering))
    tmpfs = f"size=1m,uid={RUNTIME_UID},gid={RUNTIME_UID},mode=0755"
    volumes: dict[str, Any] = {f"{node_id}-data": {} for node_id in topology.node_ids}
    volumes["ca"] = {}  # the CA's key: only the `certs` step mounts it
    volumes["certs"] = {}
    # the routes volume is a tmpfs: dial maps vanish when the stack stops, so nodes dial directly
    volumes["routes"] = {"driver_opts": {"type": "tmpfs", "device": "tmpfs", "o": tmpfs}}
    volumes["chaos-runs"] = {}
    # no top-level `name:`: docker-compose v1 refuses it; the project name comes from
    # COMPOSE_PROJECT_NAME (the docs export it) or the directory's name
    return {"services": services, "volumes": volumes}


def add_node_document(topology: Topology) -> dict[str, Any]:
    """deploy/add-node.yml as data: node n<N+1>, to merge over docker-compose.yml.

    Copied to docker-compose.override.yml (which Compose v1 and v2 merge by themselves), it makes
    the added node a service of the project, so that every later `up`, `ps` and `down -v` sees it:
    `down -v` removes it, its volume and the network. A node started with `docker run` on the
    compose network made `down` fail ("network ... has active endpoints"), and a service in a
    profile is left running by Compose v2's `down` unless that profile is named again. It joins
    through every node with the same controllers; it has no Toxiproxy links (the chaos profile
    routes n1..nN only).
    """
    rendering = render_compose(Topology(topology.nodes + 1, topology.controllers))
    added = rendering.nodes[-1]
    return {
        "services": {added.node_id: _node_service(rendering, added)},
        "volumes": {f"{added.node_id}-data": {}},
    }


def _monitoring_services(rendering: Rendering) -> dict[str, Any]:
    """The `monitoring` profile: Prometheus scraping every node, Grafana showing the dashboard."""
    provisioning = GRAFANA_PROVISIONING_DIR
    return {
        "prometheus": {
            "image": PROMETHEUS_IMAGE,
            "profiles": ["monitoring"],
            "volumes": [f"{MONITORING_DIR}/prometheus.yml:/etc/prometheus/prometheus.yml:ro"],
            "ports": ["127.0.0.1:9090:9090"],
            "depends_on": [node.node_id for node in rendering.nodes],
            "restart": "unless-stopped",
        },
        "grafana": {
            "image": GRAFANA_IMAGE,
            "profiles": ["monitoring"],
            "environment": {
                "GF_AUTH_ANONYMOUS_ENABLED": "true",
                "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
            },
            "volumes": [
                f"{provisioning}:/etc/grafana/provisioning:ro",
                f"{MONITORING_DIR}/grafana-dashboard.json:"
                "/var/lib/grafana/dashboards/flotilla.json:ro",
            ],
            "ports": ["127.0.0.1:3000:3000"],
            "depends_on": ["prometheus"],
            "restart": "unless-stopped",
        },
    }


_HEADER = """\
# GENERATED by `python -m chaos.topology write-deploy` from chaos/topology.py: do not edit by hand
# (tests/deploy checks that this file, deploy/toxiproxy.json and deploy/dial-maps/ match it).
# Works with `docker compose` (v2) and `docker-compose` (v1.29); deploy/README-deploy.md explains.
#
#   export FLOTILLA_CLUSTER_SECRET=$(openssl rand -hex 24) COMPOSE_PROJECT_NAME={project}
#   docker compose up -d                        nodes n1..n{nodes} (controllers {controllers}); bootstrap 127.0.0.1:{port}
#   docker compose run --rm client topic list   the CLI inside the compose network (profile tools)
#   docker compose --profile chaos up -d        + Toxiproxy on every node-to-node link, chaos runner
#   docker compose --profile spark up           + the demo Spark job reading the cluster
#   docker compose --profile monitoring up -d   + Prometheus (127.0.0.1:9090), Grafana (:3000)
#   add a node: cp deploy/add-node.yml docker-compose.override.yml; docker compose up -d n{added}
#
# FLOTILLA_CLUSTER_SECRET must be set: it authenticates and encrypts the control plane and
# proves a peer's calls and gossip. TLS is on: the one-shot `certs` service makes a CA, a
# certificate per node and the client certificate `admin` in the `certs` volume once (kept after
# that; the CA's key stays in the `ca` volume, which no node mounts); every connection is
# mutual TLS. `client` and `spark-demo` present `admin`.
# FLOTILLA_BASE_IMAGE replaces python:3.11-slim as the base of the images built here.
# Metrics: curl http://127.0.0.1:9101/metrics (n1; 9102 for n2, ...).
# `toxiproxy-setup` creates one proxy per directed link and then copies the dial maps into the
# `routes` tmpfs volume; the nodes re-read them and dial each other through the proxies.
# `chaos-runner` runs `python -m chaos run` self-contained: it starts its own node processes and
# Toxiproxy API inside its container (driving the compose nodes' containers is not built yet).
# `spark-demo` runs `python -m flotilla.spark_demo` (deploy/spark.Dockerfile): a Spark job
# reading the compose cluster.
"""


def compose_yaml(topology: Topology) -> str:
    controllers = ",".join(topology.controller_ids)
    header = _HEADER.format(
        nodes=topology.nodes,
        controllers=controllers,
        port=GRPC_PORT_BASE + 1,
        project=PROJECT,
        added=topology.nodes + 1,
    )
    return header + "\n".join(to_yaml(compose_document(topology))) + "\n"


_ADD_NODE_HEADER = """\
# GENERATED by `python -m chaos.topology write-deploy` from chaos/topology.py: do not edit by hand.
# Node {node} for docker-compose.yml (deploy/README-deploy.md, "Add a node"):
#
#   cp deploy/add-node.yml docker-compose.override.yml   # Compose merges the override by itself
#   docker compose up -d {node}
#
# As a service of the project, {node} is stopped and removed (with -v, its volume too) by
# `docker compose down` like n1..n{nodes}.
"""


def add_node_yaml(topology: Topology) -> str:
    header = _ADD_NODE_HEADER.format(node=f"n{topology.nodes + 1}", nodes=topology.nodes)
    return header + "\n".join(to_yaml(add_node_document(topology))) + "\n"


def deploy_files(topology: Topology) -> dict[str, str]:
    """Repository-relative path -> exact text of every generated deployment file."""
    rendering = render_compose(topology)
    files = {
        "docker-compose.yml": compose_yaml(topology),
        "deploy/add-node.yml": add_node_yaml(topology),
        "deploy/toxiproxy.json": json.dumps(rendering.populate(), indent=2) + "\n",
    }
    for node_id in topology.node_ids:
        files[f"deploy/dial-maps/{node_id}.json"] = (
            json.dumps(rendering.dial_map(node_id), indent=2) + "\n"
        )
    return files


# -- a small deterministic YAML emitter (block style; the compose document needs no more) --------
_PLAIN = re.compile(r"(?:--?)?[A-Za-z/][\w./=,@+:-]*", re.ASCII)
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}  # YAML 1.1 booleans


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        plain = _PLAIN.fullmatch(value) and value.lower() not in _RESERVED
        # a JSON string is a valid YAML double-quoted scalar
        return value if plain and not value.endswith(":") else json.dumps(value)
    raise TopologyError(f"cannot emit {value!r} ({type(value).__name__}) as YAML")


def _inline(value: object) -> str | None:
    if isinstance(value, Mapping):
        return None if value else "{}"
    if isinstance(value, (list, tuple)):
        return None if value else "[]"
    return _scalar(value)


def to_yaml(value: object, indent: int = 0) -> list[str]:
    """Lines of block-style YAML for dicts, lists, str, int, bool and None (insertion order)."""
    pad = " " * indent
    lines: list[str] = []
    items: Sequence[tuple[str | None, object]]
    if isinstance(value, Mapping):
        items = [(_scalar(str(key)), item) for key, item in value.items()]
    elif isinstance(value, (list, tuple)):
        items = [(None, item) for item in value]
    else:
        return [pad + _scalar(value)]
    for key, item in items:
        inline = _inline(item)
        if key is None and inline is None:
            nested = to_yaml(item, indent + 2)
            lines += [f"{pad}- {nested[0].lstrip()}", *nested[1:]]
        elif key is None:
            lines.append(f"{pad}- {inline}")
        elif inline is None:
            lines += [f"{pad}{key}:", *to_yaml(item, indent + 2)]
        else:
            lines.append(f"{pad}{key}: {inline}")
    return lines


# -- command line: the only I/O -----------------------------------------------------------------
def write_deploy(topology: Topology, root: Path) -> list[Path]:
    """Writes every generated file under `root`; removes dial maps of nodes no longer there."""
    files = deploy_files(topology)
    dial_maps = root / "deploy" / "dial-maps"
    dial_maps.mkdir(parents=True, exist_ok=True)
    for stale in sorted(dial_maps.glob("*.json")):
        if f"deploy/dial-maps/{stale.name}" not in files:
            stale.unlink()
    written = []
    for relative, text in files.items():
        path = root / relative
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.topology", description="Render the cluster topology."
    )
    parser.add_argument("command", choices=["compose", "write-deploy"])
    parser.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    parser.add_argument("--controllers", type=int, default=3, help="controllers (default 3)")
    parser.add_argument("--root", type=Path, default=Path(), help="write-deploy: repository root")
    args = parser.parse_args(argv)
    try:
        topology = Topology(args.nodes, args.controllers)
    except TopologyError as error:
        parser.error(str(error))
    if args.command == "compose":
        sys.stdout.write(compose_yaml(topology))
    else:
        for path in write_deploy(topology, args.root):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
