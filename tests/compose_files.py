"""The compose files as the deploy tests read them: docker-compose.yml and deploy/add-node.yml
parsed (YAML 1.1 or 1.2), merged as Compose merges an override that only adds, a service
command's flags, and the node configuration the node CLI builds from a command (its `Node`
stopped before it starts). Shared by tests/deploy/test_deploy_compose.py (structure) and
test_deploy_compose_tls.py (certificates and TLS)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

import cluster.node
from flotilla import cli

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ADD_NODE_FILE = ROOT / "deploy" / "add-node.yml"


def load_compose(version: tuple[int, int] = (1, 2), path: Path = COMPOSE_FILE) -> dict[str, Any]:
    yaml = YAML(typ="safe", pure=True)
    yaml.version = version
    document: dict[str, Any] = yaml.load(path.read_text())
    return document


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Compose's merge where the override only adds services and volumes (deploy/add-node.yml)."""
    assert not set(base["services"]) & set(override["services"])
    return {
        **base,
        "services": {**base["services"], **override["services"]},
        "volumes": {**base["volumes"], **override["volumes"]},
    }


def flags_of(command: list[str]) -> dict[str, list[str]]:
    """`node --id n1 --join a b` -> {"--id": ["n1"], "--join": ["a", "b"]} (the program name
    first, then each flag and the words after it)."""
    flags: dict[str, list[str]] = {}
    current = ""
    for word in command[1:]:
        if word.startswith("--"):
            current = word
            flags[current] = []
        else:
            flags[current].append(word)
    return flags


class _Captured(Exception):
    pass


def config_from_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The `NodeConfig` the node CLI builds from `argv` (the node itself is never built)."""

    def capture(config: Any) -> None:
        raise _Captured(config)

    monkeypatch.setattr(cluster.node, "Node", capture)
    with pytest.raises(_Captured) as caught:
        cli.main(argv)
    return caught.value.args[0]
