"""The workload: concurrent idempotent producers of unique values and readers on every replica.

Producer k sends `p<k>-<counter>` to partition `counter % partitions` with its own `Client`
(its own producer id: retries inside the SDK never duplicate). Outcomes: `ok` with the offset;
`fail` only for errors that prove nothing was written (InvalidArgument, TopicNotFound); `info`
(unknown) for everything else. Reader r reads every partition from replica r only, from a cursor
that moves forward and sometimes steps back (so offsets are read more than once). A monitor
records each partition's leader when it changes. Every event goes to the history.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chaos.client_tls import PLAINTEXT, ClientTls
from chaos.history import EventType, HistoryWriter
from flotilla import Client
from flotilla.errors import FlotillaError, InvalidArgument, OffsetOutOfRange, TopicNotFound

__all__ = ["Workload", "WorkloadConfig"]


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    topic: str = "chaos"
    partitions: int = 2
    producers: int = 3
    produce_timeout_s: float = 3.0
    read_timeout_s: float = 2.0
    produce_pause_s: float = 0.01  # between one producer's sends: bounds the history's size
    read_pause_s: float = 0.05
    read_max_records: int = 50
    monitor_interval_s: float = 0.25


class Workload:
    def __init__(
        self,
        bootstrap: Sequence[str],
        replicas: Sequence[str],
        history: HistoryWriter,
        config: WorkloadConfig,
        seed: int,
        tls: ClientTls = PLAINTEXT,
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.tls = tls
        self.replicas = list(replicas)
        self.history = history
        self.config = config
        self.seed = seed
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.clients: list[Client] = []

    def _client(self, timeout_s: float) -> Client:
        client = self.tls.client(self.bootstrap, timeout_s=timeout_s)
        self.clients.append(client)
        return client

    def start(self) -> None:
        c = self.config
        for number in range(c.producers):
            client = self._client(c.produce_timeout_s)
            self._spawn(f"producer-{number}", self._produce, client, number)
        for replica in self.replicas:
            client = self._client(c.read_timeout_s)
            rng = random.Random(f"{self.seed}/{replica}")
            self._spawn(f"reader-{replica}", self._read, client, replica, rng)
        self._spawn("monitor", self._monitor, self._client(c.read_timeout_s))

    def _spawn(self, name: str, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=30)
        for client in self.clients:
            with contextlib.suppress(Exception):
                client.close()

    def _produce(self, client: Client, number: int) -> None:
        c, process = self.config, f"producer-{number}"
        counter = 0
        while not self.stopping.is_set():
            value, partition = f"p{number}-{counter}", counter % c.partitions
            counter += 1
            self.history.record(
                process, EventType.INVOKE, "produce", partition=partition, value=value
            )
            try:
                meta = client.produce(c.topic, value.encode(), partition=partition)
            except (InvalidArgument, TopicNotFound) as error:
                self.history.record(process, EventType.FAIL, "produce", partition=partition,
                                    value=value, error=repr(error))  # fmt: skip
            except Exception as error:  # unknown outcome: it may or may not have been written
                self.history.record(process, EventType.INFO, "produce", partition=partition,
                                    value=value, error=repr(error)[:200])  # fmt: skip
            else:
                self.history.record(process, EventType.OK, "produce", partition=partition,
                                    value=value, offset=meta.offset)  # fmt: skip
            self.stopping.wait(c.produce_pause_s)

    def _read(self, client: Client, replica: str, rng: random.Random) -> None:
        c, process = self.config, f"reader-{replica}"
        cursor = dict.fromkeys(range(c.partitions), 0)
        while not self.stopping.is_set():
            partition = rng.randrange(c.partitions)
            offset = max(0, cursor[partition] - rng.choice((0, 0, 5, 50)))
            self.history.record(process, EventType.INVOKE, "read", partition=partition,
                                offset=offset, replica=replica)  # fmt: skip
            try:
                records = client.read(c.topic, partition, offset, c.read_max_records, replica)
            except (FlotillaError, ValueError) as error:
                kind = EventType.FAIL  # a read changes nothing: a failed read is just a failure
                self.history.record(process, kind, "read", partition=partition, offset=offset,
                                    replica=replica, error=repr(error)[:200])  # fmt: skip
                if isinstance(error, OffsetOutOfRange):
                    cursor[partition] = 0
            else:
                pairs = tuple((r.offset, r.value.decode()) for r in records)
                self.history.record(process, EventType.OK, "read", partition=partition,
                                    offset=offset, replica=replica, records=pairs)  # fmt: skip
                if pairs:
                    cursor[partition] = max(cursor[partition], pairs[-1][0] + 1)
            self.stopping.wait(c.read_pause_s)

    def _monitor(self, client: Client) -> None:
        leaders: dict[int, str] = {}
        while not self.stopping.wait(self.config.monitor_interval_s):
            with contextlib.suppress(FlotillaError):
                for info in client.describe_topic(self.config.topic).partitions:
                    if info.leader and leaders.get(info.index) != info.leader:
                        leaders[info.index] = info.leader
                        self.history.record("monitor", EventType.OK, "leader",
                                            partition=info.index, value=info.leader)  # fmt: skip
