"""docker-compose.yml is valid: the Compose schema, our structural rules, and the node CLI accept it.

Schema: the Compose Specification's JSON schema as shipped inside the `check-jsonschema` wheel
(PyPI), checked in-process with `jsonschema` and once through the `check-jsonschema` command.
Where `docker compose` (v2) or `docker-compose` (v1) is installed, its `config -q` runs as well
with every profile (neither is on CI's machines; v1 refuses a top-level `name:`, which the schema
allows, so `compose_problems` refuses it too). The schema says nothing about references between
services, volumes, profiles and Dockerfiles, nor about our own rules (one published bootstrap
port, the secret required, health and stop settings, a client service, the monitoring profile
on obs's files), so `compose_problems` checks those; each rule has a broken document it catches.
Certificates and TLS by default have their own rules and module (test_deploy_compose_tls.py).
`make compose-check` (scripts/compose_check.sh) runs the file on a real engine.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from compose_files import (
    ADD_NODE_FILE,
    COMPOSE_FILE,
    ROOT,
    config_from_cli,
    flags_of,
    load_compose,
    merged,
)

from chaos.deploy_files import DEPLOY_DIR, add_node_document, compose_document
from chaos.topology import Topology
from cluster import healthcheck
from flotilla import cli

TOP_LEVEL = {"services", "volumes", "networks", "configs", "secrets"}  # no `name`: v1 refuses it
PROFILES = ["chaos", "spark", "tools", "monitoring"]
MONITORING_FILES = {
    "prometheus": "./deploy/monitoring/prometheus.yml",
    "grafana": "./deploy/monitoring/grafana-dashboard.json",
}
PORT = re.compile(r"(?:(?:\$\{[A-Z_]+:-[0-9.]+\}|[0-9.]+):)?(\d{1,5}):(\d{1,5})")
REQUIRED_SECRET = re.compile(r"\$\{FLOTILLA_CLUSTER_SECRET:\?[^}]+\}")
SCHEMA = json.loads(
    (resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text()
)


def dockerfile_stages(dockerfile: str = "Dockerfile") -> set[str]:
    path = ROOT / dockerfile
    if not path.is_file():
        return set()
    return set(
        re.findall(
            r"^FROM\s+\S+\s+AS\s+(\S+)\s*$", path.read_text(), flags=re.MULTILINE | re.IGNORECASE
        )
    )


def schema_errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(document)
    ]


# -- our structural rules ----------------------------------------------------------------------------
def _node_problems(name: str, service: dict[str, Any]) -> list[str]:
    flags = flags_of(service["command"])
    where = f"node service {name}"
    problems = []
    if flags.get("--id") != [name]:
        problems.append(f"{where} runs --id {flags.get('--id')}")
    if service.get("profiles"):
        problems.append(
            f"{where} is in profiles {service['profiles']}: nodes belong to every profile"
        )
    secret = service.get("environment", {}).get("FLOTILLA_CLUSTER_SECRET", "")
    if not REQUIRED_SECRET.fullmatch(str(secret)):  # every node signs its peer calls with it
        problems.append(
            f"{where}: FLOTILLA_CLUSTER_SECRET={secret!r} is not required (${{VAR:?message}})"
        )
    if service.get("stop_signal") != "SIGTERM" or not service.get("stop_grace_period"):
        problems.append(f"{where} lacks stop_signal SIGTERM and a stop_grace_period")
    listen_port = flags["--listen"][0].rpartition(":")[2]
    test = service.get("healthcheck", {}).get("test", [])
    if "cluster.healthcheck" not in test or not str(test[-1]).endswith(f":{listen_port}"):
        problems.append(f"{where} healthcheck {test} does not call Health on port {listen_port}")
    timeout = re.fullmatch(r"(\d+)s", str(service.get("healthcheck", {}).get("timeout", "")))
    if not timeout or int(timeout.group(1)) <= healthcheck.TIMEOUT_S:
        problems.append(
            f"{where} healthcheck timeout must exceed the RPC's {healthcheck.TIMEOUT_S} s"
        )
    mounts = {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}
    data_dir = flags["--data-dir"][0]
    if mounts.get(data_dir) != f"{name}-data":
        problems.append(
            f"{where} keeps {data_dir} on {mounts.get(data_dir)!r}, not volume {name}-data"
        )
    dial_map_dir = str(Path(flags.get("--dial-map", ["/"])[0]).parent)
    if dial_map_dir not in mounts:
        problems.append(f"{where} reads its dial map from {dial_map_dir}, which is not mounted")
    return problems


def compose_problems(document: dict[str, Any], stages: set[str] | None = None) -> list[str]:
    problems = [
        f"unknown top-level key {k!r}" + (" (docker-compose v1 refuses it)" if k == "name" else "")
        for k in document
        if k not in TOP_LEVEL and not k.startswith("x-")
    ]
    services: dict[str, Any] = document.get("services") or {}
    declared = set(document.get("volumes") or {})
    used: set[str] = set()
    host_ports: list[str] = []
    published_grpc = 0
    for name, service in services.items():
        where = f"service {name}"
        if "image" not in service and "build" not in service:
            problems.append(f"{where} has neither image nor build")
        build = service.get("build")
        if isinstance(build, dict):
            dockerfile = build.get("dockerfile", "Dockerfile")
            known = (
                dockerfile_stages(dockerfile)
                if stages is None or dockerfile != "Dockerfile"
                else stages
            )
            if not (ROOT / dockerfile).is_file():
                problems.append(f"{where} builds {dockerfile}, which does not exist")
            elif "target" in build and build["target"] not in known:
                problems.append(
                    f"{where} builds target {build['target']!r}, not a stage of {dockerfile} {sorted(known)}"
                )
            if "BASE_IMAGE" not in build.get("args", {}):
                problems.append(f"{where} builds without the BASE_IMAGE argument")
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith(("/", ".", "~")):
                used.add(source)
                if source not in declared:
                    problems.append(f"{where} mounts undeclared volume {source!r}")
        depends = service.get("depends_on", {})
        for target in depends:
            condition = depends[target].get("condition") if isinstance(depends, dict) else None
            if target not in services:
                problems.append(f"{where} depends on missing service {target!r}")
                continue
            if not service.get("profiles") and services[target].get("profiles"):
                problems.append(
                    f"{where} (no profile) depends on {target} of profiles {services[target]['profiles']}"
                )
            health = services[target].get("healthcheck", {})
            if condition == "service_healthy" and (not health or health.get("disable")):
                problems.append(
                    f"{where} waits for {target} to be healthy, but it has no healthcheck"
                )
        listen_port = ""
        if service.get("command", [None])[0] == "node":
            problems += _node_problems(name, service)
            listen_port = flags_of(service["command"])["--listen"][0].rpartition(":")[2]
        for port in service.get("ports", []):
            match = PORT.fullmatch(str(port))
            if match is None or not all(0 < int(p) < 65536 for p in match.groups()):
                problems.append(f"{where} has malformed port {port!r}")
                continue
            host_ports.append(match.group(1))
            published_grpc += match.group(2) == listen_port
    problems += [f"volume {v!r} is declared but unused" for v in sorted(declared - used)]
    problems += [
        f"host port {p} is published twice"
        for p in sorted({p for p in host_ports if host_ports.count(p) > 1})
    ]
    if published_grpc != 1:
        problems.append(
            f"{published_grpc} published gRPC ports: publish exactly one bootstrap port"
        )
    chaos_images = [
        s.get("image", "") for s in services.values() if "chaos" in s.get("profiles", [])
    ]
    if not any(image.startswith("ghcr.io/shopify/toxiproxy:") for image in chaos_images):
        problems.append("the chaos profile has no Toxiproxy service")
    if not any("spark" in s.get("profiles", []) for s in services.values()):
        problems.append("no service in the spark profile")
    problems += _client_problems(services)
    problems += _monitoring_problems(services)
    return problems


def _client_problems(services: dict[str, Any]) -> list[str]:
    """`docker compose run --rm client ...`: the CLI, bootstrapped on a node, no health check."""
    client = services.get("client")
    if client is None:
        return ["no `client` service (the CLI inside the compose network)"]
    problems = []
    advertised = {
        flags_of(s["command"])["--advertise"][0]
        for s in services.values()
        if s.get("command", [None])[0] == "node"
    }
    bootstrap = client.get("environment", {}).get("FLOTILLA_BOOTSTRAP")
    if bootstrap not in advertised:
        problems.append(
            f"client FLOTILLA_BOOTSTRAP={bootstrap!r} is not a node's {sorted(advertised)}"
        )
    if client.get("entrypoint") != ["flotilla"] or not client.get("profiles"):
        problems.append("client must run `flotilla` in a profile of its own")
    if not client.get("healthcheck", {}).get("disable"):
        problems.append("client has a health check: a client serves nothing")
    return problems


def _monitoring_problems(services: dict[str, Any]) -> list[str]:
    problems = []
    for name, path in MONITORING_FILES.items():
        service = services.get(name, {})
        if "monitoring" not in service.get("profiles", []):
            problems.append(f"no {name} service in the monitoring profile")
        elif not any(v.split(":")[0] == path for v in service.get("volumes", [])):
            problems.append(f"{name} does not mount {path}")
    return problems


# -- the committed file ------------------------------------------------------------------------------
def test_compose_file_parses_to_the_generated_document_in_yaml_1_1_and_1_2() -> None:
    expected = compose_document(Topology())
    assert load_compose((1, 2)) == expected
    assert load_compose((1, 1)) == expected  # no "yes"/"no"/sexagesimal surprises in old parsers


def test_compose_file_follows_the_compose_schema() -> None:
    assert schema_errors(load_compose()) == []
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            str(COMPOSE_FILE),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _compose_plugin() -> bool:
    try:
        return (
            subprocess.run(
                ["docker", "compose", "version"], check=False, capture_output=True, timeout=30
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _compose_v1() -> bool:
    try:
        return (
            subprocess.run(
                ["docker-compose", "version"], check=False, capture_output=True, timeout=30
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def compose_config_errors(command: list[str], compose_file: Path) -> list[str]:
    """`config -q` with no profile, with each profile, and merged with deploy/add-node.yml; the
    outputs of the failed ones."""
    env = {**os.environ, "FLOTILLA_CLUSTER_SECRET": "test-secret"}
    errors = []
    files = ["-f", str(compose_file)]
    variants = [files, *([*files, "--profile", p] for p in PROFILES)]
    for arguments in [*variants, [*files, "-f", str(ADD_NODE_FILE)]]:
        config = subprocess.run(
            [*command, *arguments, "config", "-q"],
            check=False, capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        if config.returncode != 0:
            errors.append(f"{arguments[2:]}: {config.stderr.strip()}")
    env.pop("FLOTILLA_CLUSTER_SECRET")
    unset = subprocess.run(
        [*command, "-f", str(compose_file), "config", "-q"],
        check=False, capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    if unset.returncode == 0 or "set FLOTILLA_CLUSTER_SECRET" not in unset.stderr:
        errors.append(f"config accepted an unset FLOTILLA_CLUSTER_SECRET: {unset.stderr!r}")
    return errors


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_docker_compose_config_where_installed(version: str) -> None:
    """`docker compose config` (v2) / `docker-compose config` (v1) where they exist; the schema
    and rules above run everywhere (CI has neither)."""
    command = ["docker", "compose"] if version == "v2" else ["docker-compose"]
    if not (_compose_plugin() if version == "v2" else _compose_v1()):
        assert schema_errors(load_compose()) == []  # what stands in for it on this machine
        return
    assert compose_config_errors(command, COMPOSE_FILE) == []


def test_compose_v1_check_catches_a_top_level_name(tmp_path: Path) -> None:
    """The file once had `name: flotilla`; docker-compose v1 refused it."""
    named = tmp_path / "docker-compose.yml"
    named.write_text("name: flotilla\n" + COMPOSE_FILE.read_text())
    document = load_compose()
    assert "unknown top-level key 'name' (docker-compose v1 refuses it)" in compose_problems(
        {"name": "flotilla", **document}
    )
    if _compose_v1():
        errors = compose_config_errors(["docker-compose"], named)
        assert errors and "'name' does not match any of the regexes" in errors[0]


def test_compose_file_keeps_our_structural_rules() -> None:
    assert dockerfile_stages() >= {"runtime"}
    assert dockerfile_stages("deploy/spark.Dockerfile") >= {"spark"}
    assert compose_problems(load_compose()) == []
    with_added_node = merged(load_compose(), load_compose(path=ADD_NODE_FILE))
    assert with_added_node == merged(compose_document(Topology()), add_node_document(Topology()))
    assert schema_errors(with_added_node) == []
    assert compose_problems(with_added_node) == []


@pytest.mark.parametrize(("nodes", "controllers"), [(1, 3), (4, 3), (5, 1)])
def test_other_topologies_render_valid_compose_documents(nodes: int, controllers: int) -> None:
    document = compose_document(Topology(nodes, controllers))
    assert schema_errors(document) == []
    assert compose_problems(document) == []
    assert [n for n, s in document["services"].items() if not s.get("profiles")] == [
        "certs",
        *(f"n{i}" for i in range(1, nodes + 1)),
    ]
    added = add_node_document(Topology(nodes, controllers))
    assert list(added["services"]) == [f"n{nodes + 1}"]
    assert compose_problems(merged(document, added)) == []


def test_chaos_setup_reads_deploy_files_the_image_carries() -> None:
    service = load_compose()["services"]["toxiproxy-setup"]
    paths = [w for w in [*service["entrypoint"], *service["command"]] if w.startswith(DEPLOY_DIR)]
    assert len(paths) == 3
    for path in paths:
        assert (ROOT / "deploy" / Path(path).relative_to(DEPLOY_DIR)).exists(), path
    assert re.search(
        rf"^COPY deploy {re.escape(DEPLOY_DIR)}$", (ROOT / "Dockerfile").read_text(), re.MULTILINE
    )


# -- broken documents are caught -------------------------------------------------------------------
Mutation = Callable[[dict[str, Any]], None]


def _set_env_secret(value: str) -> Mutation:
    return lambda d: d["services"]["n2"]["environment"].__setitem__(
        "FLOTILLA_CLUSTER_SECRET", value
    )


BROKEN: dict[str, tuple[Mutation, str]] = {
    "depends on a missing service": (
        lambda d: d["services"]["spark-demo"]["depends_on"].__setitem__(
            "n9", {"condition": "service_healthy"}
        ),
        "depends on missing service 'n9'",
    ),
    "undeclared volume": (
        lambda d: d["volumes"].pop("n2-data"),
        "mounts undeclared volume 'n2-data'",
    ),
    "unused volume": (
        lambda d: d["volumes"].__setitem__("spare", {}),
        "'spare' is declared but unused",
    ),
    "malformed port": (
        lambda d: d["services"]["n1"]["ports"].__setitem__(1, "9101:91o1"),
        "malformed port",
    ),
    "port out of range": (
        lambda d: d["services"]["n1"]["ports"].__setitem__(1, "99101:9101"),
        "malformed port",
    ),
    "secret with a default": (
        _set_env_secret("${FLOTILLA_CLUSTER_SECRET:-changeme}"),
        "is not required",
    ),
    "secret in clear": (_set_env_secret("hunter2"), "is not required"),
    "no image nor build": (
        lambda d: d["services"]["toxiproxy"].pop("image") and None,
        "neither image nor build",
    ),
    "unknown build target": (
        lambda d: d["services"]["n3"]["build"].__setitem__("target", "debug"),
        "builds target 'debug'",
    ),
    "node in a profile": (
        lambda d: d["services"]["n2"].__setitem__("profiles", ["chaos"]),
        "nodes belong to every profile",
    ),
    "two bootstrap ports": (
        lambda d: d["services"]["n2"]["ports"].append("7002:7002"),
        "2 published gRPC ports",
    ),
    "same host port twice": (
        lambda d: d["services"]["n2"]["ports"].append("127.0.0.1:9101:9102"),
        "host port 9101 is published twice",
    ),
    "health on the wrong port": (
        lambda d: d["services"]["n3"]["healthcheck"]["test"].__setitem__(-1, "127.0.0.1:7001"),
        "does not call Health on port 7003",
    ),
    "no graceful stop": (
        lambda d: d["services"]["n1"].pop("stop_grace_period"),
        "stop_grace_period",
    ),
    "waits on a service without health": (
        lambda d: d["services"]["spark-demo"]["depends_on"].__setitem__(
            "toxiproxy-setup", {"condition": "service_healthy"}
        ),
        "has no healthcheck",
    ),
    "default service needs a profiled one": (
        lambda d: d["services"]["n1"].__setitem__(
            "depends_on", {"toxiproxy": {"condition": "service_started"}}
        ),
        "(no profile) depends on toxiproxy",
    ),
    "data on the wrong volume": (
        lambda d: d["services"]["n2"]["volumes"].__setitem__(0, "n1-data:/data"),
        "not volume n2-data",
    ),
    "dial map not mounted": (
        lambda d: d["services"]["n1"]["volumes"].pop(1),
        "which is not mounted",
    ),
    "no toxiproxy": (lambda d: d["services"].pop("toxiproxy"), "no Toxiproxy service"),
    "top-level name": (lambda d: d.__setitem__("name", "flotilla"), "v1 refuses it"),
    "spark target in the node Dockerfile": (
        lambda d: d["services"]["spark-demo"]["build"].pop("dockerfile"),
        "not a stage of Dockerfile",
    ),
    "missing Dockerfile": (
        lambda d: d["services"]["spark-demo"]["build"].__setitem__("dockerfile", "Spark.df"),
        "Spark.df, which does not exist",
    ),
    "no base image argument": (
        lambda d: d["services"]["n2"]["build"].pop("args"),
        "without the BASE_IMAGE argument",
    ),
    "tight health timeout": (
        lambda d: d["services"]["n2"]["healthcheck"].__setitem__("timeout", "2s"),
        "timeout must exceed",
    ),
    "no client": (lambda d: d["services"].pop("client"), "no `client` service"),
    "client bootstrap on localhost": (
        lambda d: d["services"]["client"]["environment"].__setitem__(
            "FLOTILLA_BOOTSTRAP", "127.0.0.1:7001"
        ),
        "is not a node's",
    ),
    "client with a health check": (
        lambda d: d["services"]["client"].pop("healthcheck"),
        "a client serves nothing",
    ),
    "no grafana": (lambda d: d["services"].pop("grafana"), "no grafana service"),
    "prometheus config elsewhere": (
        lambda d: d["services"]["prometheus"]["volumes"].__setitem__(
            0, "./prometheus.yml:/etc/prometheus/prometheus.yml:ro"
        ),
        "does not mount ./deploy/monitoring/prometheus.yml",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_structural_rules_catch_a_broken_document(case: str) -> None:
    mutate, expected = BROKEN[case]
    document = copy.deepcopy(compose_document(Topology()))
    mutate(document)
    problems = compose_problems(document)
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["services"]["n1"].__setitem__("imagee", "x"), "imagee"),
        (lambda d: d["services"]["n1"].__setitem__("restart", ["always"]), "restart"),
        (lambda d: d["services"]["n1"].__setitem__("ports", {"7001": 7001}), "ports"),
        (lambda d: d.__setitem__("service", {}), "service"),
    ],
)
def test_the_schema_catches_a_malformed_document(mutate: Mutation, expected: str) -> None:
    document = copy.deepcopy(compose_document(Topology()))
    mutate(document)
    errors = schema_errors(document)
    assert errors and any(expected in error for error in errors), errors


# -- the node command line ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["n1", "n4"])
def test_a_node_without_the_secret_fails_clearly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """A controller (n1) and a data node alike: every node signs its peer calls with it."""
    monkeypatch.delenv("FLOTILLA_CLUSTER_SECRET", raising=False)
    services = merged(load_compose(), load_compose(path=ADD_NODE_FILE))["services"]
    assert cli.main(services[name]["command"]) == 2
    assert "FLOTILLA_CLUSTER_SECRET" in capsys.readouterr().err


def test_the_images_default_command_is_a_valid_single_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOTILLA_CLUSTER_SECRET", "image-test-secret")
    line = re.search(
        r"^CMD (\[.*?\])$",
        (ROOT / "Dockerfile").read_text().replace("\\\n", ""),
        re.MULTILINE | re.DOTALL,
    )
    assert line is not None
    config = config_from_cli(json.loads(line.group(1)), monkeypatch)
    assert (config.node_id, config.data_dir, config.listen) == ("n1", "/data", "0.0.0.0:7001")
    assert config.is_controller and config.join == ()
    assert config.insecure and not config.tls  # plaintext only by saying so (it warns)
