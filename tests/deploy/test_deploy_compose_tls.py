"""The compose deployment's certificates and TLS (secure by default): every node and the client
present their own certificate from the certificates volume, mounted read-only, and trust the
cluster's CA; the one-shot `certs` step (deploy/compose_certs.py, tested in
test_deploy_compose_certs.py) issues one for every node service and keeps the CA's key in a
volume no other service mounts, and nodes wait for it. Each rule has a broken document it
catches; the node CLI accepts every node service with the certificates the step made."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from compose_files import ADD_NODE_FILE, ROOT, config_from_cli, flags_of, load_compose, merged

from chaos.deploy_files import CERTS_DIR, CLIENT_CERT, add_node_document, compose_document
from chaos.topology import Topology

Mutation = Callable[[dict[str, Any]], None]


# -- the rules -----------------------------------------------------------------------------------
def tls_problems(document: dict[str, Any]) -> list[str]:
    """What breaks TLS by default in a compose document (empty: nothing)."""
    services: dict[str, Any] = document.get("services") or {}
    problems = []
    for name, service in services.items():
        if service.get("command", [None])[0] != "node":
            continue
        where = f"node service {name}"
        problems += _tls_problems(where, service, name)
        condition = (service.get("depends_on") or {}).get("certs", {}).get("condition")
        if condition != "service_completed_successfully":
            problems.append(f"{where} does not wait for the certs step to complete ({condition})")
    if "client" in services:
        problems += _tls_problems("client", services["client"], CLIENT_CERT)
    return problems + _certs_problems(services)


def _tls_problems(where: str, service: dict[str, Any], name: str) -> list[str]:
    """Secure by default: the node or client presents certificate `name` from the mounted
    certificates volume, read-only, and trusts the cluster's CA."""
    environment = service.get("environment", {})
    mounts = {v.split(":")[1]: v for v in service.get("volumes", [])}
    wanted = {
        "FLOTILLA_TLS_CA": f"{CERTS_DIR}/ca.pem",
        "FLOTILLA_TLS_CERT": f"{CERTS_DIR}/{name}.pem",
        "FLOTILLA_TLS_KEY": f"{CERTS_DIR}/{name}.key",
    }
    problems = [
        f"{where} has {key}={environment.get(key)!r}, not {value!r}"
        for key, value in wanted.items()
        if environment.get(key) != value
    ]
    if mounts.get(CERTS_DIR) != f"certs:{CERTS_DIR}:ro":
        problems.append(f"{where} does not mount the certs volume read-only at {CERTS_DIR}")
    return problems


def _certs_problems(services: dict[str, Any]) -> list[str]:
    """The one-shot `certs` step issues a certificate for every node service (and the client's),
    keeps the CA's key in a volume no other service mounts."""
    certs = services.get("certs")
    if certs is None:
        return ["no `certs` step (the certificates every node needs)"]
    problems = []
    if certs.get("profiles") or not certs.get("healthcheck", {}).get("disable"):
        problems.append("the certs step must be a one-shot in no profile")
    issued = flags_of(["compose_certs", *certs["command"]])
    nodes = [n for n, s in services.items() if s.get("command", [None])[0] == "node"]
    missing = sorted(set(nodes) - set(issued.get("--node", [])))
    if missing:
        problems.append(f"the certs step issues no certificate for node(s) {missing}")
    if CLIENT_CERT not in issued.get("--client", []):
        problems.append(f"the certs step issues no client certificate {CLIENT_CERT!r}")
    ca_volume = issued.get("--ca-dir", ["?"])[0]
    readers = sorted(
        n
        for n, s in services.items()
        if n != "certs" and any(v.split(":")[1] == ca_volume for v in s.get("volumes", []))
    )
    if readers:
        problems.append(f"{readers} mount {ca_volume}, where the CA's key is")
    return problems


# -- the committed files ---------------------------------------------------------------------------
def test_compose_files_and_other_topologies_keep_the_tls_rules() -> None:
    assert tls_problems(load_compose()) == []
    assert tls_problems(merged(load_compose(), load_compose(path=ADD_NODE_FILE))) == []
    for nodes, controllers in [(1, 3), (4, 3), (5, 1)]:
        document = compose_document(Topology(nodes, controllers))
        assert tls_problems(document) == []
        assert tls_problems(merged(document, add_node_document(Topology(nodes, controllers)))) == []


# -- broken documents are caught -------------------------------------------------------------------
BROKEN: dict[str, tuple[Mutation, str]] = {
    "node without TLS": (
        lambda d: d["services"]["n2"]["environment"].pop("FLOTILLA_TLS_CERT"),
        "node service n2 has FLOTILLA_TLS_CERT=None",
    ),
    "node with another node's key": (
        lambda d: d["services"]["n2"]["environment"].__setitem__(
            "FLOTILLA_TLS_KEY", "/certs/n1.key"
        ),
        "FLOTILLA_TLS_KEY='/certs/n1.key', not '/certs/n2.key'",
    ),
    "certs writable by a node": (
        lambda d: d["services"]["n3"]["volumes"].__setitem__(2, "certs:/certs"),
        "node service n3 does not mount the certs volume read-only",
    ),
    "node starts before its certificate": (
        lambda d: d["services"]["n1"].pop("depends_on"),
        "does not wait for the certs step",
    ),
    "client without TLS": (
        lambda d: d["services"]["client"]["environment"].pop("FLOTILLA_TLS_CA"),
        "client has FLOTILLA_TLS_CA=None",
    ),
    "no certificate for a node": (
        lambda d: d["services"]["certs"]["command"].remove("n3"),
        "no certificate for node(s) ['n3']",
    ),
    "a node reads the CA key": (
        lambda d: d["services"]["n1"]["volumes"].append("ca:/ca:ro"),
        "['n1'] mount /ca, where the CA's key is",
    ),
    "no certs step": (lambda d: d["services"].pop("certs"), "no `certs` step"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_tls_rules_catch_a_broken_document(case: str) -> None:
    mutate, expected = BROKEN[case]
    document = copy.deepcopy(compose_document(Topology()))
    mutate(document)
    problems = tls_problems(document)
    assert any(expected in problem for problem in problems), problems


# -- the node command line accepts every node service, with its certificate -----------------------
def _with_certificates(
    service: dict[str, Any], certs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service's TLS environment, its /certs paths moved to `certs` (made by the compose
    certs step, as the `certs` service makes them)."""
    for name, value in service["environment"].items():
        if name.startswith("FLOTILLA_TLS_"):
            monkeypatch.setenv(name, str(value).replace(CERTS_DIR, str(certs)))


@pytest.fixture(scope="module")
def compose_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    certs_command = load_compose()["services"]["certs"]["command"]
    root = tmp_path_factory.mktemp("compose-certs")
    command = [str(root / w[1:]) if w in ("/ca", CERTS_DIR) else w for w in certs_command]
    done = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "compose_certs.py"), *command],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root / CERTS_DIR.lstrip("/")


def test_every_node_service_command_is_accepted_by_the_node_cli(
    monkeypatch: pytest.MonkeyPatch, compose_certs: Path
) -> None:
    monkeypatch.setenv("FLOTILLA_CLUSTER_SECRET", "compose-test-secret")
    services = merged(load_compose(), load_compose(path=ADD_NODE_FILE))["services"]
    nodes = {n: s for n, s in services.items() if s.get("command", [None])[0] == "node"}
    assert list(nodes) == ["n1", "n2", "n3", "n4"]
    for name, service in nodes.items():
        _with_certificates(service, compose_certs, monkeypatch)
        config = config_from_cli(service["command"], monkeypatch)
        assert config.tls and not config.insecure
        assert config.tls_cert == str(compose_certs / f"{name}.pem")
        number = int(name[1:])
        assert config.node_id == name
        assert config.advertised == f"{name}:{7000 + number}"
        assert dict(config.controllers) == {"n1": "n1:7101", "n2": "n2:7102", "n3": "n3:7103"}
        assert config.is_controller == (name != "n4")
        assert config.dial_map == f"/routes/{name}.json"
        assert config.metrics == f"0.0.0.0:{9100 + number}"


def _readme_add_node_block() -> str:
    text = (ROOT / "deploy" / "README-deploy.md").read_text()
    section = re.search(r"^### Add a node\n(.*?)^### ", text, re.DOTALL | re.MULTILINE)
    assert section is not None, "the README's add-a-node section"
    block = re.search(r"```sh\n(.*?)```", section.group(1), re.DOTALL)
    assert block is not None, "the README's add-a-node commands"
    return block.group(1)


def test_the_readmes_fourth_node_is_a_service_of_the_project(
    monkeypatch: pytest.MonkeyPatch, compose_certs: Path
) -> None:
    """`docker run ... --network flotilla_default` made `docker compose down -v` fail ("network
    ... has active endpoints"): the added node must be a service of the project in every later
    command, so an override file Compose merges by itself, not a profile (v2's `down` leaves a
    profiled service running unless the profile is named again)."""
    block = _readme_add_node_block()
    assert "cp deploy/add-node.yml docker-compose.override.yml" in block
    assert "docker compose up -d n4" in block
    assert "docker run" not in block
    monkeypatch.setenv("FLOTILLA_CLUSTER_SECRET", "compose-test-secret")  # every node's
    service = load_compose(path=ADD_NODE_FILE)["services"]["n4"]
    assert "profiles" not in service
    _with_certificates(service, compose_certs, monkeypatch)
    config = config_from_cli(service["command"], monkeypatch)
    assert config.tls_cert == str(compose_certs / "n4.pem")
    n1 = flags_of(load_compose()["services"]["n1"]["command"])
    assert config.node_id == "n4"
    assert config.join == ("n1:7001", "n2:7002", "n3:7003")
    assert not config.is_controller
    assert ",".join(f"{k}={v}" for k, v in config.controllers.items()) == n1["--controllers"][0]
