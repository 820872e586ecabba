"""A local cluster of real node processes on loopback, for `flotilla dev`, tests, demos and chaos.

Node i listens on 127.0.0.i (its own address, so per-node links can be told apart) on a free
port; the first `controllers` nodes (at most 3) run the control plane. Every node runs in its own
process group; `stop`, `kill`, `pause` and `resume` act on that group by pid, never by name, and
`close` leaves no process behind.

TLS (`tls=True`): a CA in `<root>/certs`, a node certificate per node (also naming its
127.0.0.i address) and an `admin` client certificate (`admin` is a superuser by default);
`cluster.tls` holds the paths a client needs (`ca`, `cert`, `key`) and `cluster.tls_dir` the
directory (issue more with `cluster.certs.issue_client(cluster.tls_dir, name)`). The cluster's
own health and status calls use the admin certificate.

Raft between the nodes: each node also listens for peers' Raft frames on a raw TCP port of its
own (`--raft-listen`, `cluster.raft_link`; base_port + 200 with a `base_port`, else a free
port). `FLOTILLA_RAFT_TRANSPORT=grpc` in the environment (or `raft_link=False`) starts the nodes
without it: Raft then rides the gRPC port, as before raft ports existed (benchmarks compare the
two in one run).
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import grpc

from cluster.certs import CertPaths, init_ca, issue_client, issue_node
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

__all__ = ["LocalCluster", "NodeSpec"]
# a client's security settings (flotilla.client reads them): never inherited by a local node
CLIENT_ENV = frozenset(
    ("FLOTILLA_TLS_CA", "FLOTILLA_TLS_CERT", "FLOTILLA_TLS_KEY", "FLOTILLA_TOKEN",
     "FLOTILLA_TLS_SERVER_NAME")
)  # fmt: skip


_PORTS_BELOW_EPHEMERAL = (20_000, 32_768)  # Linux hands out 32768-60999 to outgoing sockets
# FLOTILLA_LOCAL_PORTS="LOW-HIGH" narrows the range (LOW inclusive, HIGH exclusive): processes
# that start clusters side by side (the suite's parallel workers, tests/conftest.py) each take
# a range of their own, since the ports handed out below are remembered per process only
PORTS_ENV = "FLOTILLA_LOCAL_PORTS"
# "grpc": local nodes get no raft port (Raft over the gRPC stream); unset or "tcp": they do
RAFT_TRANSPORT_ENV = "FLOTILLA_RAFT_TRANSPORT"
RAFT_PORT_OFFSET = 200  # with a base port: a node's raft port (its control plane's is + 100)
# ports handed out on any host: a port is handed out once per process, whatever the host. Each
# server binds its own host:port (controllers too, since pysyncobj is given its bind address), so
# once per host would do; once overall is as cheap and leaves no port to two servers of one host
_handed_out: set[int] = set()


def free_port(host: str) -> int:
    """A port free on `host` now, for a server started a moment later. It is drawn below the
    ephemeral range: a port from the kernel's own pick (bind to 0) can be taken by an outgoing
    connection of any process before the server binds it."""
    rng = random.Random()
    low, high = _port_range()
    for _ in range(200):
        port = rng.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as sock:  # a crowded range: let the kernel pick
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_range() -> tuple[int, int]:
    """The range `free_port` draws from: FLOTILLA_LOCAL_PORTS if set (it must lie within
    20000-32768), else all of 20000-32768."""
    text = os.environ.get(PORTS_ENV, "")
    if not text:
        return _PORTS_BELOW_EPHEMERAL
    low_text, _, high_text = text.partition("-")
    try:
        low, high = int(low_text), int(high_text)
    except ValueError:
        low = high = 0
    if not _PORTS_BELOW_EPHEMERAL[0] <= low < high <= _PORTS_BELOW_EPHEMERAL[1]:
        raise ValueError(
            f"{PORTS_ENV}={text!r}: use LOW-HIGH with "
            f"{_PORTS_BELOW_EPHEMERAL[0]} <= LOW < HIGH <= {_PORTS_BELOW_EPHEMERAL[1]}"
        )
    return low, high


@dataclass(slots=True)
class NodeSpec:
    node_id: str
    host: str
    port: int
    control_port: int
    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    raft_port: int = 0  # the raw Raft listener's (0: none)
    env: dict[str, str] = field(default_factory=dict)  # over the cluster's (e.g. another secret)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def raft_address(self) -> str:
        return f"{self.host}:{self.raft_port}" if self.raft_port else ""


class LocalCluster:
    def __init__(
        self,
        root: str | Path,
        nodes: int = 3,
        *,
        controllers: int = 3,
        env: dict[str, str] | None = None,
        node_args: list[str] | None = None,
        config_text: str = "",
        base_port: int = 0,
        tls: bool = False,
        raft_link: bool | None = None,
    ) -> None:
        """`base_port`: 0 picks free ports; otherwise node i listens on 127.0.0.i:base_port and
        its control plane on 127.0.0.i:base_port+100 (each node has its own address).
        `tls`: nodes run with TLS (mutual), certificates made under `<root>/certs`.
        `raft_link`: nodes take Raft on a raw TCP port (default: unless
        FLOTILLA_RAFT_TRANSPORT=grpc)."""
        self.base_port = base_port
        if raft_link is None:
            raft_link = os.environ.get(RAFT_TRANSPORT_ENV, "tcp") != "grpc"
        self.raft_link = raft_link
        self.tls_dir: Path | None = None
        self.tls: CertPaths | None = None  # the admin client's: what a client connects with
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.secret = secrets.token_hex(16)
        # a client's settings exported in the calling shell (FLOTILLA_TLS_CERT is the client's
        # certificate to a client, the node's own to a node) are not inherited by the nodes;
        # `env` may still give them
        inherited = {k: v for k, v in os.environ.items() if k not in CLIENT_ENV}
        self.env = {**inherited, "FLOTILLA_CLUSTER_SECRET": self.secret, **(env or {})}
        self.node_args = node_args or []
        self.config_path: Path | None = None
        if config_text:
            self.config_path = self.root / "node.toml"
            self.config_path.write_text(config_text)
        self.nodes: dict[str, NodeSpec] = {}
        if tls:
            self.tls_dir = self.root / "certs"
            if not (self.tls_dir / "ca.pem").exists():
                init_ca(self.tls_dir)
            self.tls = issue_client(self.tls_dir, "admin")
        for number in range(1, nodes + 1):
            self.add_spec(number)
        self.controller_ids = list(self.nodes)[: min(controllers, nodes)]
        self._previous_sigterm: signal._HANDLER = None

    def add_spec(self, number: int) -> NodeSpec:
        host = f"127.0.0.{number}"
        if self.base_port:
            ports = (self.base_port, self.base_port + 100)
        else:
            ports = (free_port(host), free_port(host))
        spec = NodeSpec(f"n{number}", host, *ports, self.root / f"n{number}")
        if self.raft_link:
            spec.raft_port = (
                self.base_port + RAFT_PORT_OFFSET if self.base_port else free_port(host)
            )
        self.nodes[spec.node_id] = spec
        if self.tls_dir is not None:
            issue_node(self.tls_dir, spec.node_id, hosts=(host,))
        return spec

    def node_tls(self, node_id: str) -> CertPaths | None:
        """Node `node_id`'s certificate files (None without TLS)."""
        if self.tls_dir is None:
            return None
        return CertPaths(
            self.tls_dir / "ca.pem",
            self.tls_dir / f"{node_id}.pem",
            self.tls_dir / f"{node_id}.key",
        )

    def channel(self, address: str) -> grpc.Channel:
        """A blocking channel to `address` as the admin client (TLS when the cluster has it)."""
        if self.tls is None:
            return grpc.insecure_channel(address)
        credentials = grpc.ssl_channel_credentials(
            self.tls.ca.read_bytes(), self.tls.key.read_bytes(), self.tls.cert.read_bytes()
        )
        return grpc.secure_channel(address, credentials)

    @property
    def controllers_arg(self) -> str:
        return ",".join(
            f"{n}={self.nodes[n].host}:{self.nodes[n].control_port}" for n in self.controller_ids
        )

    @property
    def bootstrap(self) -> str:
        return self.nodes[self.controller_ids[0]].address

    def addresses(self) -> list[str]:
        return [spec.address for spec in self.nodes.values()]

    # -- processes ------------------------------------------------------------------------------
    def command(self, spec: NodeSpec) -> list[str]:
        args = [
            sys.executable, "-m", "flotilla", "node",
            "--id", spec.node_id, "--listen", spec.address, "--data-dir", str(spec.data_dir),
            "--controllers", self.controllers_arg,
        ]  # fmt: skip
        seeds = [s.address for s in self.nodes.values() if s is not spec]
        if seeds:
            args += ["--join", *seeds]
        if spec.raft_port:
            args += ["--raft-listen", spec.raft_address]
        if self.config_path is not None:
            args += ["--config", str(self.config_path)]
        paths = self.node_tls(spec.node_id)
        if paths is not None:
            args += ["--tls-ca", str(paths.ca), "--tls-cert", str(paths.cert)]
            args += ["--tls-key", str(paths.key)]
        return args + self.node_args + spec.extra_args

    def start(self, node_id: str | None = None, *, wait: bool = True) -> None:
        targets = [self.nodes[node_id]] if node_id else list(self.nodes.values())
        for spec in targets:
            if spec.process is not None and spec.process.poll() is None:
                continue
            spec.data_dir.mkdir(parents=True, exist_ok=True)
            spec.log_path = self.root / f"{spec.node_id}.log"
            with open(spec.log_path, "ab") as log_file:
                spec.process = subprocess.Popen(
                    self.command(spec),
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**self.env, **spec.env},
                    start_new_session=True,
                )
        if wait:
            for spec in targets:
                self.wait_serving(spec.node_id)
            self.wait_converged()

    def wait_converged(self, timeout_s: float = 30.0) -> None:
        """Until every running node sees every running node alive."""
        running = [n for n in self.nodes if self.is_running(n)]
        deadline = time.monotonic() + timeout_s
        for node_id in running:
            with self.channel(self.nodes[node_id].address) as channel:
                stub = flotilla_pb2_grpc.FlotillaStub(channel)
                while True:
                    try:
                        if stub.Health(pb.HealthRequest(), timeout=1).members_alive >= len(running):
                            break
                    except grpc.RpcError:
                        pass
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"membership did not converge on {node_id} within {timeout_s} s"
                        )
                    time.sleep(0.05)

    def add_node(self, *, wait: bool = True) -> str:
        spec = self.add_spec(len(self.nodes) + 1)
        self.start(spec.node_id, wait=wait)
        return spec.node_id

    def wait_serving(self, node_id: str, timeout_s: float = 30.0) -> None:
        spec = self.nodes[node_id]
        deadline = time.monotonic() + timeout_s
        with self.channel(spec.address) as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)
            while True:
                if spec.process is not None and spec.process.poll() is not None:
                    said = _last_line(spec.log_path)
                    raise RuntimeError(
                        f"node {node_id} exited with {spec.process.returncode}"
                        + (f" ({said})" if said else "")
                        + f"; see {spec.log_path}"
                    )
                try:
                    if stub.Health(pb.HealthRequest(), timeout=1).serving:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"node {node_id} not serving after {timeout_s} s; see {spec.log_path}"
                    )
                time.sleep(0.05)

    def _signal(self, node_id: str, signum: signal.Signals) -> subprocess.Popen[bytes] | None:
        process = self.nodes[node_id].process
        if process is None or process.poll() is not None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        return process

    def kill(self, node_id: str) -> None:
        """SIGKILL: loses everything the node had not made durable."""
        process = self._signal(node_id, signal.SIGKILL)
        if process is not None:
            process.wait(timeout=30)

    def stop(self, node_id: str, timeout_s: float = 30.0) -> int | None:
        """SIGTERM: a graceful stop; SIGKILL if it takes longer than `timeout_s`."""
        process = self._signal(node_id, signal.SIGTERM)
        if process is None:
            return None
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(node_id)
            return None

    def pause(self, node_id: str) -> None:
        self._signal(node_id, signal.SIGSTOP)

    def resume(self, node_id: str) -> None:
        self._signal(node_id, signal.SIGCONT)

    def is_running(self, node_id: str) -> bool:
        process = self.nodes[node_id].process
        return process is not None and process.poll() is None

    def close(self) -> None:
        """Kills every node process that is still running (resuming paused ones first)."""
        for node_id in self.nodes:
            self._signal(node_id, signal.SIGCONT)
            self.kill(node_id)

    def __enter__(self) -> LocalCluster:
        # SIGTERM to the process that owns the cluster (e.g. `timeout`) would skip `close()`
        # and leave nodes running: turn it into SystemExit so every `finally` runs.
        self._previous_sigterm = None
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        finally:
            if self._previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self._previous_sigterm)


def _last_line(path: Path | None) -> str:
    """The last line a node wrote (its reason for exiting), or ""."""
    if path is None:
        return ""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].removeprefix("flotilla: ") if lines else ""


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
