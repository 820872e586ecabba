"""Imports flow one way (DESIGN §1): a backward arrow between our packages fails this test."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS = {"proto", "storage", "raft", "membership", "cluster", "flotilla", "chaos", "bench"}

# package -> the packages of ours it may import
ALLOWED: dict[str, set[str]] = {
    "proto": set(),
    "storage": set(),
    "membership": set(),
    "raft": {"storage"},
    "cluster": {"proto", "storage", "raft", "membership"},
    "flotilla": {"proto", "cluster"},  # the CLI may start a node through cluster/
    "chaos": {"proto", "flotilla", "cluster", "storage", "raft", "membership"},
    "bench": OURS - {"bench"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & OURS


def violations(root: Path) -> list[str]:
    problems = []
    for package, allowed in ALLOWED.items():
        for path in sorted((root / package).rglob("*.py")):
            for target in imported_packages(path) - allowed - {package}:
                problems.append(f"{path.relative_to(root)} imports {target}")
    return problems


def test_imports_flow_one_way() -> None:
    assert violations(ROOT) == []


def test_a_backward_import_is_caught(tmp_path: Path) -> None:
    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "bad.py").write_text("from raft.core import RaftNode\n")
    (tmp_path / "raft").mkdir()
    (tmp_path / "raft" / "ok.py").write_text("import storage\n")
    assert violations(tmp_path) == ["storage/bad.py imports raft"]
