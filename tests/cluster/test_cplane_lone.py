"""A cluster smaller than the default replication factor still creates topics: the default
(replication factor 0 on the wire, no `--replication-factor` on the CLI) is lowered to the live
members, with a note. A lone `flotilla node` (no --controllers, no --join) runs its own
single-node control plane, and keeps it across a restart. Real processes throughout."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import wait_until

from cluster.healthcheck import check
from cluster.local import LocalCluster, free_port
from flotilla import Client

pytestmark = pytest.mark.integration

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("one"), 1, config_text=CONFIG) as local:
        local.start()
        yield local


def cli(*args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flotilla", *args, "--bootstrap", bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_topic_create_without_a_replication_factor_works_on_one_node(one: LocalCluster) -> None:
    done = cli("topic", "create", "orders", "--partitions", "3", bootstrap=one.bootstrap)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    with Client(one.addresses(), timeout_s=20) as client:
        info = client.describe_topic("orders")
        assert info.replication_factor == 1 and len(info.partitions) == 3


def test_the_default_replication_factor_lowered_comes_with_a_note(one: LocalCluster) -> None:
    with Client(one.addresses(), timeout_s=20) as client:
        info = client.create_topic("noted", partitions=1, replication_factor=0)
        assert info.replication_factor == 1
        assert "the default, 3, lowered to the 1 live member" in info.note, info.note
        again = client.create_topic("noted", partitions=1, replication_factor=0)
        assert again.replication_factor == 1 and again.note == ""
        explicit = client.create_topic("explicit", partitions=1, replication_factor=1)
        assert explicit.note == ""


def _ports_free(port: int) -> bool:
    for candidate in (port, port + 100):
        with socket.socket() as sock:
            try:
                sock.bind((HOST, candidate))
            except OSError:
                return False
    return True


def _start_lone(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "FLOTILLA_CLUSTER_SECRET"}
    with open(log, "ab") as sink:
        return subprocess.Popen(
            [
                sys.executable, "-m", "flotilla", "node", "--id", "solo",
                "--listen", f"{HOST}:{port}", "--data-dir", str(data_dir), "--config", str(data_dir.parent / "c.toml"),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )  # fmt: skip


def _wait_serving(port: int, log: Path) -> None:
    """Until the node answers Health as serving: the client gives up on an address that refuses
    connections for 2 s, and a loaded machine can take longer than that to start a node."""
    wait_until(
        lambda: check(f"{HOST}:{port}")[0],
        60,
        f"the lone node on {HOST}:{port} to serve",
        detail=lambda: log.read_text()[-2000:],
    )


def _stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def test_a_lone_node_runs_its_own_control_plane_and_keeps_it(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CONFIG)
    port = next(p for p in (free_port(HOST) for _ in range(50)) if p < 65000 and _ports_free(p))
    log = tmp_path / "solo.log"
    process = _start_lone(tmp_path / "solo", port, log)
    try:
        _wait_serving(port, log)
        with Client(f"{HOST}:{port}", timeout_s=20) as client:
            info = client.create_topic("alone", partitions=2, replication_factor=0)
            assert info.replication_factor == 1, log.read_text()
            meta = client.produce("alone", b"kept", partition=1)
        _stop(process)
        assert process.returncode == 0, log.read_text()
        text = log.read_text()
        assert f"single-node control plane on {HOST}:{port + 100}" in text, text
        assert f"--controllers solo={HOST}:{port + 100}" in text, text
        assert "Traceback" not in text, text
        secret = tmp_path / "solo" / "cluster.secret"
        assert secret.stat().st_mode & 0o777 == 0o600
        process = _start_lone(tmp_path / "solo", port, log)
        _wait_serving(port, log)
        with Client(f"{HOST}:{port}", timeout_s=20) as client:
            # a restarted node serves before its control plane has replayed its journal
            wait_until(lambda: "alone" in client.list_topics(), what="the topic after a restart")
            assert [r.value for r in client.read("alone", 1, meta.offset, 1)] == [b"kept"]
    finally:
        _stop(process, signal.SIGKILL)
