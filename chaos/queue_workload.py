"""The queue workload: receiver processes of one queue group share the chaos topic while faults
happen, and some of them crash and come back.

Receiver k ("receiver-<k>") is a `chaos.queue_member` process with its own history file per
life (`<directory>/receiver-<k>.<life>.jsonl`): it receives in batches and acks most
deliveries, releases, rejects or lets expire a few (a seeded choice per record and delivery
count). A seeded crash loop stops one receiver every few seconds — mostly SIGKILL (a crash:
no release, no leave; recorded here as `crash` with its wall-clock time) and sometimes SIGTERM
(it closes its queue, releasing what it holds) — and starts it again. After the heal, `drain`
waits until the group's acked floor of every partition reaches the partition's final length
with no dead letter pending, and records `drained`; `dead_letters` reads the dead-letter topic
whole. `events` merges every receiver's history for `chaos.queue_checker`.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from chaos.client_tls import PLAINTEXT, ClientTls
from chaos.history import Event, EventType, HistoryWriter
from chaos.queue_checker import DeadLetter
from flotilla import Client
from flotilla.errors import FlotillaError, TopicNotFound

__all__ = ["QUEUE_GROUP", "QueueSettings", "QueueWorkload", "read_dead_letters"]

QUEUE_GROUP = "chaos-queue"
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class QueueSettings:
    receivers: int = 8
    invisible_ms: int = 3000  # below the session timeout: a lease ends by its deadline first
    max_deliveries: int = 3
    session_timeout_ms: int = 8000
    backoff_ms: tuple[int, ...] = (200, 500, 1000)
    batch: int = 20
    crash_every_s: tuple[float, float] = (3.0, 6.0)  # MIN,MAX between two receiver crashes
    kill_share: float = 0.7  # of the crashes: SIGKILL; the rest SIGTERM (a clean close)
    max_crashes: int = 50
    group: str = QUEUE_GROUP

    def dead_letter_topic(self, topic: str) -> str:
        return f"{topic}.{self.group}.dlq"


class QueueWorkload:
    def __init__(
        self,
        bootstrap: Sequence[str],
        history: HistoryWriter,
        directory: Path,
        topic: str,
        seed: int,
        settings: QueueSettings = QueueSettings(),
        env: Mapping[str, str] | None = None,
        tls: ClientTls = PLAINTEXT,
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.tls = tls
        self.history = history
        self.directory = directory
        self.topic = topic
        self.seed = seed
        self.settings = settings
        self.env = {**os.environ, **(env or {})}
        self.stopping = threading.Event()
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.lives: dict[int, int] = {}
        self.files: list[Path] = []
        self._lock = threading.Lock()
        self._crasher: threading.Thread | None = None
        self.crashes = 0

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for number in range(self.settings.receivers):
            self._launch(number)
        self._crasher = threading.Thread(target=self._crash_loop, name="queue-crasher", daemon=True)
        self._crasher.start()

    def _launch(self, number: int) -> None:
        s = self.settings
        life = self.lives.get(number, -1) + 1
        self.lives[number] = life
        path = self.directory / f"receiver-{number}.{life}.jsonl"
        self.files.append(path)
        command = [
            sys.executable, "-m", "chaos.queue_member", "--bootstrap", ",".join(self.bootstrap),
            "--group", s.group, "--topic", self.topic, "--name", f"receiver-{number}",
            "--history", str(path), "--seed", str(self.seed),
            "--invisible-ms", str(s.invisible_ms), "--max-deliveries", str(s.max_deliveries),
            "--session-timeout-ms", str(s.session_timeout_ms),
            "--backoff-ms", ",".join(str(ms) for ms in s.backoff_ms), "--batch", str(s.batch),
            *self.tls.argv(),
        ]  # fmt: skip
        log = open(self.directory / f"receiver-{number}.log", "ab")  # noqa: SIM115
        with log:
            self.processes[number] = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def _crash_loop(self) -> None:
        s = self.settings
        rng = random.Random(f"{self.seed}/queue-crashes")
        while self.crashes < s.max_crashes:
            if self.stopping.wait(rng.uniform(*s.crash_every_s)):
                return
            number = rng.randrange(s.receivers)
            kill = rng.random() < s.kill_share
            with self._lock:
                if self.stopping.is_set():
                    return
                process = self.processes[number]
                if kill:
                    self.history.record(f"receiver-{number}", EventType.OK, "crash",
                                        wall_ms=int(time.time() * 1000))  # fmt: skip
                    _signal(process, signal.SIGKILL)
                else:
                    _signal(process, signal.SIGTERM)  # it records its own close
                _wait(process, 30)
                self.crashes += 1
            if self.stopping.wait(rng.uniform(0.3, 1.0)):
                return
            with self._lock:
                if not self.stopping.is_set():
                    self._launch(number)

    def drain(self, ends: Mapping[int, int], timeout_s: float) -> bool:
        """Waits until the group's acked floor of every partition p reaches `ends[p]` with no
        dead letter pending (every record acked or dead-lettered); records `drained` if so.
        Call after the heal, before `stop`: the receivers are still receiving."""
        deadline = time.monotonic() + timeout_s
        with self.tls.client(self.bootstrap, timeout_s=10) as client:
            while time.monotonic() < deadline:
                if _settled(client, self.settings.group, ends):
                    self.history.record("queue", EventType.OK, "drained")
                    return True
                time.sleep(0.5)  # a poll interval: the floor is the coordinator's to move
        return False

    def stop(self) -> None:
        self.stopping.set()
        if self._crasher is not None:
            self._crasher.join(timeout=60)
        with self._lock:
            for process in self.processes.values():
                _signal(process, signal.SIGTERM)
            for process in self.processes.values():
                if not _wait(process, 20):
                    _signal(process, signal.SIGKILL)
                    _wait(process, 10)

    def events(self) -> list[Event]:
        """Every receiver life's events, merged in time order (one monotonic clock per machine),
        with this workload's own (crashes, drained)."""
        merged = list(self.history.snapshot())
        for path in self.files:
            if path.exists():
                merged += _load(path)
        return sorted(merged, key=lambda event: event.t)


def _signal(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)


def _wait(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _load(path: Path) -> list[Event]:
    """A receiver's history; a line torn by its kill is left out."""
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            events.append(Event.from_json(line))
    return events


def _settled(client: Client, group: str, ends: Mapping[int, int]) -> bool:
    try:
        info = client.describe_group(group)
    except FlotillaError:
        return False
    floors = {p.partition: p.queue for p in info.partitions if p.queue is not None}
    return all(
        (floor := floors.get(p)) is not None
        and floor.acked_floor >= end
        and floor.dead_letters_pending == 0
        for p, end in ends.items()
    )


def read_dead_letters(
    client: Client, topic: str, timeout_s: float = 30.0
) -> tuple[list[DeadLetter], int]:
    """The dead-letter topic read whole, and its partition count (([], 0) if it was never
    created). Retries other errors until `timeout_s` (the cluster may still be settling)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            partitions = len(client.describe_topic(topic).partitions)
            letters: list[DeadLetter] = []
            for partition in range(partitions):
                offset = 0
                while batch := client.read(topic, partition, offset, 1000):
                    letters += [
                        DeadLetter(partition, r.offset, r.value.decode(errors="replace"),
                                   tuple((name, bytes(value)) for name, value in r.headers))
                        for r in batch
                    ]  # fmt: skip
                    offset = batch[-1].offset + 1
            return letters, partitions
        except TopicNotFound:
            return [], 0
        except FlotillaError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)  # a retry interval


def queue_summary(events: Sequence[Event]) -> dict[str, int]:
    """Counts of hand-outs and settlement outcomes (for the report)."""
    counts: dict[str, int] = {}
    for event in events:
        if (
            event.f in ("lease", "ack", "release", "reject", "extend", "crash")
            and event.type is not EventType.INVOKE
        ):
            name = event.f if event.type is EventType.OK else f"{event.f}-{event.type}"
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))
