"""`flotilla dev` end to end, as the README uses it: the real command in its own process group
(a 3-node cluster with TLS: create a topic of 3 partitions, produce to each, consume each back,
status, every command with the client settings it printed), its 1-node form with the hint it
prints (again after a restart, with the same CA), and the README's block that starts three nodes
by hand. Every process started here is stopped by pid or process group, also when a test fails."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import wait_until

from cluster.local import free_port
from cluster.ownership import LOCK_FILE
from flotilla import Client
from proto import flotilla_pb2 as pb

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FLOTILLA = f"{shlex.quote(sys.executable)} -m flotilla"
UP_WITHIN_S = 90.0


def _free_everywhere(port: int, hosts: int) -> bool:
    for number in range(1, hosts + 1):
        for candidate in (port, port + 100, port + 200):
            with socket.socket() as sock:
                try:
                    sock.bind((f"127.0.0.{number}", candidate))
                except OSError:
                    return False
    return True


def base_port(hosts: int) -> int:
    """A port P with P, P+100 and P+200 free on 127.0.0.1..hosts (the dev cluster's layout)."""
    for _ in range(100):
        port = free_port("127.0.0.1")
        if port + 200 < 65536 and _free_everywhere(port, hosts):
            return port
    raise AssertionError("no port free on every loopback host")


def flotilla(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flotilla", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def exported(line: str) -> dict[str, str]:
    """The variables of an `export A=x B=y` line (shell-quoted values)."""
    words = shlex.split(line.strip())
    assert words[0] == "export", line
    return dict(word.split("=", 1) for word in words[1:])


def _stop_group(process: subprocess.Popen[str] | subprocess.Popen[bytes], data_dir: Path) -> None:
    """SIGTERM to the process group, SIGKILL if it lingers; then any node still holding a
    lock under `data_dir` (a node runs in a session of its own) is killed by its pid."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    for lock in data_dir.rglob(LOCK_FILE):
        text = lock.read_text().strip()
        if not text.isdigit():
            continue
        pid = int(text)
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if str(data_dir).encode() in cmdline:  # ours, not a pid reused by someone else
                os.kill(pid, signal.SIGKILL)


class Dev:
    """`flotilla dev` running; its stdout collected line by line."""

    def __init__(
        self,
        nodes: int,
        port: int,
        data_dir: Path,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = data_dir
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "flotilla", "dev", "--nodes", str(nodes),
             "--base-port", str(port), "--data-dir", str(data_dir), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, start_new_session=True, cwd=ROOT, env={**os.environ, **(env or {})},
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_up(self) -> None:
        wait_until(
            # the banner's last line: the lines before it (settings, the hint) are all there
            lambda: (
                any("press Ctrl-C" in line for line in self.lines)
                or self.process.poll() is not None
            ),
            timeout_s=UP_WITHIN_S,
            what="flotilla dev to say it is up and print its banner",
            detail=lambda: self.lines,
        )
        assert self.process.poll() is None, self.lines

    @property
    def client_env(self) -> dict[str, str]:
        """The client settings it printed (`export FLOTILLA_TLS_CA=... ...`)."""
        line = next(line for line in self.lines if line.strip().startswith("export "))
        return exported(line)

    def stop(self) -> int | None:
        _stop_group(self.process, self.data_dir)
        self._reader.join(timeout=10)
        return self.process.returncode


# a shell where the client settings of an earlier `flotilla dev` were exported, and a token:
# none of it may reach the nodes (a node given FLOTILLA_TLS_CERT would present it as its own)
STALE_CLIENT_ENV = {
    "FLOTILLA_TLS_CA": "/nonexistent/ca.pem",
    "FLOTILLA_TLS_CERT": "/nonexistent/admin.pem",
    "FLOTILLA_TLS_KEY": "/nonexistent/admin.key",
    "FLOTILLA_TOKEN": "flt_not-a-token",
}


@pytest.fixture
def dev3(tmp_path: Path) -> Iterator[tuple[Dev, str]]:
    port = base_port(3)
    dev = Dev(3, port, tmp_path / "dev", env=STALE_CLIENT_ENV)
    try:
        dev.wait_up()
        yield dev, f"127.0.0.1:{port}"
    finally:
        dev.stop()


def test_flotilla_dev_three_nodes_end_to_end(dev3: tuple[Dev, str]) -> None:
    dev, bootstrap = dev3
    assert any(f"bootstrap {bootstrap}" in line for line in dev.lines), dev.lines
    assert any("is up (mutual TLS)" in line for line in dev.lines), dev.lines
    settings = dev.client_env
    assert set(settings) == {"FLOTILLA_TLS_CA", "FLOTILLA_TLS_CERT", "FLOTILLA_TLS_KEY"}
    assert exported((dev.data_dir / "client.env").read_text()) == settings
    plain = flotilla("topic", "list", "--bootstrap", bootstrap, env={"FLOTILLA_TLS_CA": ""})
    assert plain.returncode != 0 and "Traceback" not in plain.stderr  # plaintext gets nowhere
    made = flotilla(
        "topic", "create", "orders", "--partitions", "3", "--bootstrap", bootstrap, env=settings
    )
    assert made.returncode == 0, made.stderr
    security = {
        "tls_ca": settings["FLOTILLA_TLS_CA"],
        "tls_cert": settings["FLOTILLA_TLS_CERT"],
        "tls_key": settings["FLOTILLA_TLS_KEY"],
    }
    with Client(bootstrap, timeout_s=20, **security) as client:
        info = client.describe_topic("orders")
        assert info.replication_factor == 3 and len(info.partitions) == 3
    for partition in range(3):
        lines = "".join(f"p{partition}-{n}\n" for n in range(4))
        sent = flotilla(
            "produce", "orders", "--partition", str(partition), "--bootstrap", bootstrap,
            stdin=lines, env=settings,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
    for partition in range(3):
        got = flotilla(
            "consume", "orders", "--partition", str(partition), "--from-beginning", "--max", "4",
            "--bootstrap", bootstrap, env=settings,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr
        assert got.stdout.split() == [f"p{partition}-{n}" for n in range(4)], got.stdout
    shown = flotilla("status", "--bootstrap", bootstrap, env=settings)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"control plane: leader n[123], 3 of 3 controllers reachable", shown.stdout)
    assert ":-1" not in shown.stdout, shown.stdout
    assert shown.stdout.count("orders") == 3, shown.stdout
    assert dev.stop() == 0, dev.lines
    assert dev.lines[-1] == "stopping ...", dev.lines


def test_flotilla_dev_one_node_hint_works_and_a_restart_keeps_the_ca(tmp_path: Path) -> None:
    """The hint it prints runs as printed (it sources the client settings), and a second start
    on the same data directory keeps the CA, so what a client holds still works."""
    port, data_dir = base_port(1), tmp_path / "dev"
    for start in ("first", "second"):
        dev = Dev(1, port, data_dir)
        try:
            dev.wait_up()
            if start == "first":
                ca = (data_dir / "certs" / "ca.pem").read_bytes()
            hint = next(line for line in dev.lines if "try:" in line).split("try:", 1)[1]
            done = subprocess.run(
                ["bash", "-c", hint.replace("flotilla ", f"{FLOTILLA} ")],
                capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
                env={k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_TLS")},
            )  # fmt: skip
            assert done.returncode == 0, (start, hint, done.stderr)
            assert "Traceback" not in done.stderr
        finally:
            assert dev.stop() == 0, dev.lines
    assert (data_dir / "certs" / "ca.pem").read_bytes() == ca


def _readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("Nodes started one by one")
    block = text[start:].split("```sh\n", 1)[1].split("```", 1)[0]
    assert block.count("flotilla node") == 3, block
    return block


def test_the_readme_three_node_block_makes_a_working_cluster(tmp_path: Path) -> None:
    port = base_port(3)
    script = (
        _readme_block()
        .replace(":7001", f":{port}")
        .replace(":7101", f":{port + 100}")
        .replace(" data/", f" {tmp_path}/data/")
        .replace("flotilla node", f"{FLOTILLA} node")
    )
    env = {k: v for k, v in os.environ.items() if k != "FLOTILLA_CLUSTER_SECRET"}
    log = tmp_path / "nodes.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            ["bash", "-c", script + "\nwait\n"],
            stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, cwd=tmp_path,
        )  # fmt: skip
    try:
        addresses = [f"127.0.0.{n}:{port}" for n in (1, 2, 3)]
        with Client(addresses, timeout_s=30) as client:

            def all_alive() -> bool:
                """Every node sees three live members (the controller that takes the create
                counts live members in its own node's view)."""
                for address in addresses:
                    with contextlib.suppress(Exception), Client(address, timeout_s=2) as one:
                        members = one.metadata().members
                        if sum(1 for m in members if m.state == pb.ALIVE) == 3:
                            continue
                    return False
                return True

            wait_until(
                all_alive, timeout_s=UP_WITHIN_S, what="3 live members", detail=log.read_text
            )
            info = client.create_topic("readme", partitions=3, replication_factor=3)
            assert len(info.partitions) == 3
            meta = client.produce("readme", b"from the README", partition=1)
            assert [r.value for r in client.read("readme", 1, meta.offset, 1)] == [
                b"from the README"
            ]
        assert "Traceback" not in log.read_text()
    finally:
        _stop_group(process, tmp_path / "data")


def test_flotilla_dev_insecure_runs_plaintext_whatever_the_shell_exported(tmp_path: Path) -> None:
    """`--insecure`: no certificates, and the client settings an earlier `flotilla dev` had the
    shell export do not become the nodes' own TLS settings (FLOTILLA_TLS_CERT means a node's
    certificate to a node; these name no file, so a node given them would not start)."""
    port = base_port(1)
    dev = Dev(1, port, tmp_path / "dev", env=STALE_CLIENT_ENV, args=("--insecure",))
    try:
        dev.wait_up()
        assert any("is up (plaintext (--insecure))" in line for line in dev.lines), dev.lines
        assert not any(line.strip().startswith("export ") for line in dev.lines), dev.lines
        assert not (tmp_path / "dev" / "certs").exists()
        with Client(f"127.0.0.1:{port}", timeout_s=20) as client:
            client.create_topic("plain", partitions=1, replication_factor=1)
    finally:
        assert dev.stop() == 0, dev.lines
