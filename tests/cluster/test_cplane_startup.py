"""Bad start-up input is one clear line on stderr and a non-zero exit, never a traceback, and
leaves no process behind: a host that does not resolve, a metrics or control-plane address that
clashes with the gRPC one. Each case starts a real `flotilla node` process that must exit by
itself."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.local import free_port

pytestmark = pytest.mark.integration

EXIT_WITHIN_S = 20.0
HOST = "127.0.0.1"


def run_node(args: list[str], tmp_path: Path) -> tuple[int | None, str, str]:
    """(exit code or None if it had to be killed, stdout, stderr) of `flotilla node`."""
    env = {**os.environ, "FLOTILLA_CLUSTER_SECRET": "s3cret"}
    process = subprocess.Popen(
        [sys.executable, "-m", "flotilla", "node", "--data-dir", str(tmp_path / "d"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    code: int | None = None
    try:
        out, err = process.communicate(timeout=EXIT_WITHIN_S)
        code = process.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    return code, out.decode(errors="replace"), err.decode(errors="replace")


def _cases() -> dict[str, tuple[list[str], str]]:
    """case -> (arguments after --data-dir, what the message must name)."""
    port, control, metrics = free_port(HOST), free_port(HOST), free_port(HOST)
    listen = f"{HOST}:{port}"
    mine = f"n1={HOST}:{control}"
    return {
        "listen host does not resolve": (
            ["--id", "n1", "--listen", f"nosuch.invalid:{port}", "--controllers", mine],
            "nosuch.invalid",
        ),
        "metrics host does not resolve": (
            ["--id", "n1", "--listen", listen, "--controllers", mine,
             "--metrics", f"nosuch.invalid:{metrics}"],
            "nosuch.invalid",
        ),
        "metrics is the listen address": (
            ["--id", "n1", "--listen", listen, "--controllers", mine, "--metrics", listen],
            listen,
        ),
        "metrics on the wildcard of the listen port": (
            ["--id", "n1", "--listen", listen, "--controllers", mine,
             "--metrics", f"0.0.0.0:{port}"],
            f"0.0.0.0:{port}",
        ),
        "control plane on the listen address": (
            ["--id", "n1", "--listen", listen, "--controllers", f"n1={listen}"],
            listen,
        ),
        "join without controllers": (
            ["--id", "n2", "--listen", listen, "--join", f"{HOST}:{metrics}"],
            "--controllers",
        ),
        "controller host does not resolve": (
            ["--id", "n1", "--listen", listen, "--controllers", f"n1=nosuch.invalid:{control}"],
            "nosuch.invalid",
        ),
    }  # fmt: skip


@pytest.mark.parametrize("case", sorted(_cases()))
def test_bad_start_up_input_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    args, named = _cases()[case]
    code, out, err = run_node(args, tmp_path)
    assert code is not None, f"still running after {EXIT_WITHIN_S} s; stderr: {err}"
    assert code == 2, (code, err)
    assert "Traceback" not in err + out, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("flotilla: "), err
    assert named in lines[0], err
