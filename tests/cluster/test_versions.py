"""The version a node advertises in gossip is the package's version (pyproject.toml), so the
rolling-upgrade gate (`cluster.versions`) compares what operators install."""

from __future__ import annotations

import tomllib
from pathlib import Path

from cluster.versions import GROUP_ENTRIES_SINCE, VERSION, parse_version


def test_the_advertised_version_is_the_package_version() -> None:
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert declared == VERSION


def test_this_version_reads_group_entries() -> None:
    parsed = parse_version(VERSION)
    assert parsed is not None and parsed[: len(GROUP_ENTRIES_SINCE)] >= GROUP_ENTRIES_SINCE
