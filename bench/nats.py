"""NATS JetStream as a baseline: a 3-server R3 cluster on this machine, and a publisher of our
own that speaks the client protocol over a socket.

Why our own publisher rather than nats-py: the part of the protocol a JetStream publish needs is
five lines of text (CONNECT, SUB to an inbox, PUB with a reply subject, the MSG carrying the
JSON ack, PING/PONG), so the baseline needs no extra dependency and no event loop, and it costs
the client about what our synchronous client costs: a Python process on both sides of the ratio.

`NatsCluster` starts `nats-server` three times (127.0.0.1-3, one JetStream file store each,
routes between them), each in a session of its own, stopped by pid (SIGTERM, then SIGKILL after
a bound) when the context ends. `JetStreamPublisher` publishes to a subject a stream captures:
`publish_sync` waits for each ack (one in flight); `publish_window` keeps up to `window`
publishes in flight, writing PUBs in groups and reading acks as they come.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from cluster.local import free_port

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class NatsError(Exception):
    """The NATS baseline could not run: the server refused, errored or did not come up."""


def nats_server() -> str | None:
    """The `nats-server` on PATH, or None (the baseline is skipped)."""
    return shutil.which("nats-server")


class JetStreamPublisher:
    """One client connection. Every publish carries a reply subject under this connection's
    inbox; JetStream answers there with `{"stream": ..., "seq": n}` once the message is stored
    on a quorum of the stream's replicas."""

    def __init__(self, host: str, port: int, timeout_s: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""
        self.inbox = f"_INBOX.{os.getpid()}.{port}"
        self.acks = 0  # acks read so far
        info = self._line()
        if not info.startswith(b"INFO "):
            raise NatsError(f"expected INFO from 127.0.0.1:{port}, got {info[:80]!r}")
        connect = {"verbose": False, "pedantic": False, "lang": "python", "version": "bench",
                   "protocol": 1, "headers": False, "no_responders": False}  # fmt: skip
        self.sock.sendall(
            b"CONNECT " + json.dumps(connect).encode() + b"\r\n"
            b"SUB " + self.inbox.encode() + b".* 1\r\nPING\r\n"
        )
        while self._line() != b"PONG":
            pass

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise NatsError("the NATS server closed the connection")
        self.buffer += chunk

    def _line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            self._fill()
        line, self.buffer = self.buffer[:end], self.buffer[end + 2 :]
        if line.startswith(b"-ERR"):
            raise NatsError(f"the NATS server answered {line.decode(errors='replace')}")
        if line == b"PING":
            self.sock.sendall(b"PONG\r\n")
            return self._line()
        return line

    def _reply(self) -> bytes:
        """The payload of the next MSG (an ack or an API response)."""
        while True:
            line = self._line()
            if line.startswith(b"MSG "):
                size = int(line.rsplit(b" ", 1)[1])
                while len(self.buffer) < size + 2:
                    self._fill()
                payload, self.buffer = self.buffer[:size], self.buffer[size + 2 :]
                return payload

    def _ack(self) -> None:
        payload = self._reply()
        if b'"error"' in payload:
            raise NatsError(f"JetStream refused a publish: {payload.decode(errors='replace')}")
        self.acks += 1

    def request(self, subject: str, body: bytes) -> dict[str, object]:
        self.sock.sendall(f"PUB {subject} {self.inbox}.r {len(body)}\r\n".encode() + body + b"\r\n")
        answer: dict[str, object] = json.loads(self._reply())
        return answer

    def publish_sync(self, subject: str, payload: bytes) -> None:
        self.sock.sendall(
            f"PUB {subject} {self.inbox}.a {len(payload)}\r\n".encode() + payload + b"\r\n"
        )
        self._ack()

    def publish_window(self, subject: str, payload: bytes, count: int, window: int) -> None:
        """`count` publishes, at most `window` unacknowledged at any time."""
        message = f"PUB {subject} {self.inbox}.a {len(payload)}\r\n".encode() + payload + b"\r\n"
        sent = acked = 0
        while acked < count:
            room = min(window - (sent - acked), count - sent)
            if room > 0:
                self.sock.sendall(message * room)
                sent += room
            self._ack()
            acked += 1


class NatsCluster:
    """Three nats-server processes forming one JetStream cluster (R3 streams possible)."""

    def __init__(self, root: Path, servers: int = 3) -> None:
        binary = nats_server()
        if binary is None:
            raise NatsError("nats-server is not on PATH (Debian: apt-get install nats-server)")
        self.binary = binary
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.hosts = [f"127.0.0.{n}" for n in range(1, servers + 1)]
        self.ports = [free_port(host) for host in self.hosts]
        self.routes = [free_port(host) for host in self.hosts]
        self.processes: list[subprocess.Popen[bytes]] = []

    def _config(self, number: int) -> Path:
        routes = ", ".join(
            f"nats-route://{host}:{port}"
            for other, (host, port) in enumerate(zip(self.hosts, self.routes, strict=True))
            if other != number
        )
        store = self.root / f"n{number}"
        store.mkdir(parents=True, exist_ok=True)
        path = self.root / f"n{number}.conf"
        path.write_text(
            f'server_name: "n{number}"\n'
            f'listen: "{self.hosts[number]}:{self.ports[number]}"\n'
            f'jetstream {{ store_dir: "{store}" }}\n'
            f'cluster {{ name: "bench", listen: "{self.hosts[number]}:{self.routes[number]}", '
            f"routes: [{routes}] }}\n"
        )
        return path

    def __enter__(self) -> NatsCluster:
        try:
            for number in range(len(self.hosts)):
                log = (self.root / f"n{number}.log").open("wb")
                self.processes.append(
                    subprocess.Popen(
                        [self.binary, "-c", str(self._config(number))],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
                log.close()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_S)
        self.processes = []

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def connect(self, number: int = 0, timeout_s: float = 30.0) -> JetStreamPublisher:
        return JetStreamPublisher(self.hosts[number], self.ports[number], timeout_s)

    def create_stream(self, name: str, subject: str, replicas: int = 3) -> JetStreamPublisher:
        """Creates an R`replicas` file-stored stream capturing `subject` once the cluster has
        elected its JetStream meta leader (asked again until `START_TIMEOUT_S`), and returns a
        connection to the server that leads the stream (publishes go there directly)."""
        config = {"name": name, "subjects": [subject], "storage": "file",
                  "num_replicas": replicas, "retention": "limits", "discard": "old"}  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        last: object = None
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise NatsError(f"nats-server pid {process.pid} exited: see {self.root}")
            with contextlib.suppress(OSError, NatsError):
                # short: before the meta leader is elected an API request is not answered
                client = self.connect(timeout_s=2.0)
                try:
                    last = client.request(
                        f"$JS.API.STREAM.CREATE.{name}", json.dumps(config).encode()
                    )
                    info = client.request(f"$JS.API.STREAM.INFO.{name}", b"")
                finally:
                    client.close()
                leader = (info.get("cluster") or {}).get("leader")  # type: ignore[attr-defined]
                if "error" not in info and leader:
                    return self.connect(int(str(leader).removeprefix("n")))
            time.sleep(0.2)
        log = (self.root / "n0.log").read_text(errors="replace").splitlines()[-5:]
        raise NatsError(
            f"no R{replicas} stream {name} within {START_TIMEOUT_S} s: last answer {last}; "
            f"n0's log ends: {' | '.join(log)}"
        )


@contextlib.contextmanager
def stream(
    root: Path, name: str = "BENCH", subject: str = "bench"
) -> Iterator[tuple[NatsCluster, JetStreamPublisher]]:
    """A running 3-server cluster with one R3 file stream, and a publisher to its leader."""
    with NatsCluster(root) as cluster:
        publisher = cluster.create_stream(name, subject)
        try:
            yield cluster, publisher
        finally:
            publisher.close()
