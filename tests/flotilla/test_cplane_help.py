"""Every option of `flotilla node`, `dev` and `demo` says its default (or that it is required)
in `--help`, and the defaults it states are the ones in force."""

from __future__ import annotations

import argparse
import re

import pytest

from cluster.config import NodeConfig
from flotilla.cli_node import add_server_parsers


def server_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(prog="flotilla")
    sub = parser.add_subparsers(dest="command")
    add_server_parsers(sub)
    return {name: sub.choices[name] for name in ("node", "dev", "demo")}


def options_without_default(parser: argparse.ArgumentParser) -> list[str]:
    """The options whose help names neither a default nor that they are required."""
    missing = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        text = (action.help or "") % {"default": action.default, "prog": parser.prog}
        if action.required and "required" in text:
            continue
        if "default" not in text:
            missing.append(action.option_strings[-1])
    return missing


@pytest.mark.parametrize("command", ["node", "dev", "demo"])
def test_every_server_option_states_its_default(command: str) -> None:
    assert options_without_default(server_parsers()[command]) == []


def test_the_checker_catches_an_option_without_a_default() -> None:
    broken = argparse.ArgumentParser()
    broken.add_argument("--ok", default=1, help="fine (default: 1)")
    broken.add_argument("--needed", required=True, help="must be given (required)")
    broken.add_argument("--bare", help="says nothing of what it is when left out")
    broken.add_argument("--silent")
    assert options_without_default(broken) == ["--bare", "--silent"]


def test_the_stated_defaults_are_the_ones_in_force() -> None:
    parsers = server_parsers()
    help_text = {name: parser.format_help() for name, parser in parsers.items()}
    weight = re.search(r"--weight W\s+.*?default:? ([0-9.]+)", help_text["node"], re.S)
    assert weight is not None and float(weight.group(1)) == NodeConfig().weight, help_text["node"]
    dev = parsers["dev"].parse_args([])
    assert f"default: {dev.nodes}" in help_text["dev"]
    assert f"default: {dev.data_dir}" in help_text["dev"]
    node = parsers["node"].parse_args(["--id", "n1", "--listen", "127.0.0.1:1", "--data-dir", "d"])
    assert f"default: {node.event_loop}" in help_text["node"]
