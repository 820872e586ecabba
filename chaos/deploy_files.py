"""The deploy files written from the compose rendering of the topology (`chaos.topology`):
docker-compose.yml, deploy/add-node.yml, deploy/toxiproxy.json and deploy/dial-maps/<id>.json.

`compose_document` / `add_node_document` build the compose services (nodes, the one-shot `certs`
step, Toxiproxy and its setup, the chaos runner, the CLI client, the Spark demo, monitoring) as
plain data; `to_yaml` writes them as YAML (a small writer of our own: the output must be
byte-stable and no YAML library is a dependency); `deploy_files` maps each repository-relative
path to its exact text. Everything but `write_deploy` and `main` is pure.

    python -m chaos.deploy_files compose        prints docker-compose.yml
    python -m chaos.deploy_files write-deploy   writes every file (--nodes, --controllers)

tests/deploy checks that the committed files are byte-identical to this output.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chaos.topology import (
    GRPC_PORT_BASE,
    TOXIPROXY_API_PORT,
    NodeEndpoints,
    Rendering,
    Topology,
    TopologyError,
    render_compose,
)

__all__ = ["add_node_document", "add_node_yaml", "compose_document", "compose_yaml"]
__all__ += ["deploy_files", "main", "tls_environment", "to_yaml", "write_deploy"]

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
# GENERATED by `python -m chaos.deploy_files write-deploy` from chaos/deploy_files.py: do not edit by hand
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
# GENERATED by `python -m chaos.deploy_files write-deploy` from chaos/deploy_files.py: do not edit by hand.
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
        prog="python -m chaos.deploy_files",
        description="Print docker-compose.yml, or write every deploy file.",
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
