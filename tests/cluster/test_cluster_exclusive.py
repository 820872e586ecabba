"""One node's data and ports belong to one process: a second node on the same data directory, or
on an address already in use (gRPC, control plane, metrics), is refused at start with an error
naming what it collided with, and the first node keeps serving. Real processes throughout."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.local import LocalCluster, free_port
from flotilla import Client

pytestmark = pytest.mark.integration

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
EXIT_WITHIN_S = 20.0


@pytest.fixture
def single(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 1, controllers=1, config_text=CONFIG) as local:
        spec = local.nodes["n1"]
        spec.extra_args = ["--metrics", f"{spec.host}:{free_port(spec.host)}"]
        local.start()
        yield local


def _run_second(
    cluster: LocalCluster,
    tmp_path: Path,
    *,
    node_id: str,
    listen: str,
    control: str,
    data_dir: Path,
    metrics: str,
) -> tuple[int | None, str]:
    """Starts a second node process and waits for it to exit; (exit code or None if it was
    still running after EXIT_WITHIN_S and had to be killed, what it wrote)."""
    assert cluster.config_path is not None
    output = tmp_path / f"second-{node_id}.log"
    argv = [
        sys.executable, "-m", "flotilla", "node", "--id", node_id, "--listen", listen,
        "--data-dir", str(data_dir), "--controllers", f"{node_id}={control}",
        "--config", str(cluster.config_path), "--metrics", metrics,
    ]  # fmt: skip
    with open(output, "wb") as sink:
        process = subprocess.Popen(
            argv,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=cluster.env,
            start_new_session=True,
        )
    code: int | None
    try:
        code = process.wait(timeout=EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    return code, output.read_text(errors="replace")


def _first_still_serves(cluster: LocalCluster, value: bytes) -> None:
    with Client(cluster.addresses(), timeout_s=30) as client:
        if "solo" not in client.list_topics():
            client.create_topic("solo", partitions=1, replication_factor=1)
        meta = client.produce("solo", value, partition=0)
        records = client.read("solo", 0, meta.offset, 1)
        assert [r.value for r in records] == [value]


def test_a_second_node_on_the_same_data_dir_is_refused(
    single: LocalCluster, tmp_path: Path
) -> None:
    first = single.nodes["n1"]
    assert first.process is not None
    _first_still_serves(single, b"before")
    code, output = _run_second(
        single,
        tmp_path,
        node_id="n1",
        listen=f"{first.host}:{free_port(first.host)}",
        control=f"{first.host}:{free_port(first.host)}",
        data_dir=first.data_dir,
        metrics=f"{first.host}:{free_port(first.host)}",
    )
    assert code is not None, f"the second node was still running after {EXIT_WITHIN_S} s"
    assert code != 0, output
    assert "lock" in output and f"pid {first.process.pid}" in output, output
    assert "Traceback" not in output, output
    assert single.is_running("n1")
    _first_still_serves(single, b"after")


@pytest.mark.parametrize("taken", ["listen", "control", "metrics"])
def test_a_second_node_on_an_address_in_use_is_refused(
    single: LocalCluster, tmp_path: Path, taken: str
) -> None:
    first = single.nodes["n1"]
    host = first.host
    fresh = {
        "listen": f"{host}:{free_port(host)}",
        "control": f"{host}:{free_port(host)}",
        "metrics": f"{host}:{free_port(host)}",
    }
    in_use = {
        "listen": first.address,
        "control": f"{host}:{first.control_port}",
        "metrics": first.extra_args[1],
    }[taken]
    fresh[taken] = in_use
    code, output = _run_second(single, tmp_path, node_id="n9", data_dir=tmp_path / "n9", **fresh)
    assert code is not None, f"the second node was still running after {EXIT_WITHIN_S} s"
    assert code != 0, output
    assert in_use in output and "in use" in output, output
    assert "Traceback" not in output, output
    assert single.is_running("n1")
    _first_still_serves(single, taken.encode())
