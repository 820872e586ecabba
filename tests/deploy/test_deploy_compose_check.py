"""`make compose-check` (scripts/compose_check.sh), checked without running it on an engine.

The check itself needs a Docker engine and minutes; CI has no engine. These tests keep what can
go wrong without one from going wrong: the script parses, runs every step the README's path has,
skips with a message and exit 0 where there is no engine, and stays out of `make test`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compose_check.sh"
# what the issue asks the check to do on a real engine, in this order
STEPS = ["up", "produce/consume", "kill a node", "chaos runner", "spark demo", "down -v"]
# what the script needs before it finds out there is no engine
TOOLS = ["bash", "env", "mktemp", "dirname", "id", "timeout", "rm", "awk", "sort", "flock"]


def steps_of(text: str) -> list[str]:
    return re.findall(r'^step "([^"]+)"', text, flags=re.MULTILINE)


def steps_missing(text: str) -> list[str]:
    """The STEPS not among the script's steps, or out of order."""
    names = steps_of(text)
    positions = []
    missing = []
    for wanted in STEPS:
        found = [i for i, name in enumerate(names) if name.startswith(wanted)]
        if not found:
            missing.append(wanted)
        else:
            positions.append(found[0])
    if positions != sorted(positions):
        missing.append(f"steps out of order: {names}")
    return missing


def test_the_script_parses() -> None:
    checked = subprocess.run(
        ["bash", "-n", str(SCRIPT)], check=False, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stderr
    assert os.access(SCRIPT, os.X_OK)


def test_the_script_runs_every_step_of_the_readmes_path() -> None:
    assert steps_missing(SCRIPT.read_text()) == []


def test_the_step_check_catches_a_dropped_step() -> None:
    text = SCRIPT.read_text()
    dropped = re.sub(r'^step "spark demo"$', "", text, flags=re.MULTILINE)
    assert dropped != text
    assert steps_missing(dropped) == ["spark demo"]


def test_without_an_engine_it_skips_with_a_message_and_exit_0(tmp_path: Path) -> None:
    """CI: no docker command at all."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    run = subprocess.run(
        [str(SCRIPT)],
        check=False,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "compose-check: SKIP: no docker command" in run.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("flotilla-compose-check.")] in (
        [],
        ["flotilla-compose-check.lock"],
    )  # its work directory is gone


def test_make_has_the_target_outside_make_test() -> None:
    makefile = (ROOT / "Makefile").read_text()
    target = re.search(r"^compose-check:.*\n\t(.+)$", makefile, flags=re.MULTILINE)
    assert target is not None and target.group(1) == "scripts/compose_check.sh"
    test_target = re.search(r"^test:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert test_target is not None and "compose" not in test_target.group(1)


# `flotilla consume` follows the tail until told to stop (as kafka-console-consumer): a check
# that reads what it wrote must say where to stop, or it waits until its step's deadline
STOPS = {"-e", "--exit-at-end", "--max", "--idle-timeout"}


def consumes_that_never_end(text: str) -> list[str]:
    """The script's `client consume ...` commands that give no way to stop."""
    commands = re.findall(r"\bclient consume\b[^\n|>]*", text.replace("\\\n", " "))
    return [c.strip() for c in commands if not STOPS & set(c.split())]


def test_every_consume_of_the_check_stops_by_itself() -> None:
    text = SCRIPT.read_text()
    assert re.search(r"\bclient consume\b", text)
    assert consumes_that_never_end(text) == []


def test_the_consume_check_catches_one_that_follows_the_tail() -> None:
    text = 'client consume check --partition "$partition" --from-beginning >"$WORK/read"\n'
    assert consumes_that_never_end(text) == [
        'client consume check --partition "$partition" --from-beginning'
    ]
    assert consumes_that_never_end(text.replace("--from-beginning", "--from-beginning -e")) == []
