"""The consumer-group workload: members of one group share the chaos topic while the nemesis runs.

Member k (process "member-<k>") polls with `Client.consumer`, records what each poll returned per
partition, and commits its positions after every few polls (explicitly, and on revocation through
auto-commit); `on_assign` / `on_revoke` record the partitions it gains and gives up. From time to
time (seeded) a member closes and rejoins, so partitions move while faults happen. After the
heal, `drain` polls until the members have consumed every partition up to its final length, then
records `drained`. `chaos.group_checker` judges the events.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Mapping, Sequence

from chaos.client_tls import PLAINTEXT, ClientTls
from chaos.history import EventType, HistoryWriter
from flotilla import Client
from flotilla.errors import FlotillaError

__all__ = ["GROUP", "GroupWorkload"]

GROUP = "chaos-group"
SESSION_TIMEOUT_MS = 6_000
COMMIT_EVERY_POLLS = 3
REJOIN_CHANCE = 0.01  # per poll: a member closes and rejoins


class GroupWorkload:
    def __init__(
        self,
        bootstrap: Sequence[str],
        history: HistoryWriter,
        topic: str,
        members: int,
        seed: int,
        timeout_s: float = 5.0,
        tls: ClientTls = PLAINTEXT,
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.tls = tls
        self.history = history
        self.topic = topic
        self.members = members
        self.seed = seed
        self.timeout_s = timeout_s
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.consumed: dict[int, int] = {}  # partition -> highest offset consumed + 1
        self._lock = threading.Lock()
        self._progress = threading.Condition(self._lock)  # notified as `consumed` grows

    def start(self) -> None:
        for number in range(self.members):
            thread = threading.Thread(
                target=self._member, args=(number,), name=f"member-{number}", daemon=True
            )
            self.threads.append(thread)
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def drain(self, ends: Mapping[int, int], timeout_s: float) -> bool:
        """Waits until every partition p was consumed up to `ends[p]` (its final length); records
        `drained` if so. Call before `stop`, after the heal: the members are still polling."""
        with self._progress:
            done = self._progress.wait_for(
                lambda: all(self.consumed.get(p, 0) >= end for p, end in ends.items()),
                timeout=timeout_s,
            )
        if done:
            self.history.record("group", EventType.OK, "drained")
        return done

    def _member(self, number: int) -> None:
        process = f"member-{number}"
        rng = random.Random(f"{self.seed}/group/{number}")
        with self.tls.client(self.bootstrap, timeout_s=self.timeout_s) as client:
            while not self.stopping.is_set():
                try:
                    self._session(client, process, rng)
                except FlotillaError as error:  # e.g. no coordinator reachable: try again
                    self.history.record(process, EventType.INFO, "session",
                                        error=repr(error)[:200])  # fmt: skip
                    self.stopping.wait(0.5)

    def _session(self, client: Client, process: str, rng: random.Random) -> None:
        def assigned(partitions: set[tuple[str, int]]) -> None:
            for _, p in sorted(partitions):
                self.history.record(process, EventType.OK, "assign", partition=p)

        def revoked(partitions: set[tuple[str, int]]) -> None:
            for _, p in sorted(partitions):
                self.history.record(process, EventType.OK, "revoke", partition=p)

        with client.consumer(
            GROUP, [self.topic], start="earliest", auto_commit=True,
            auto_commit_interval_ms=1000, session_timeout_ms=SESSION_TIMEOUT_MS,
            on_assign=assigned, on_revoke=revoked,
        ) as consumer:  # fmt: skip
            polls = 0
            while not self.stopping.is_set():
                self.history.record(process, EventType.INVOKE, "poll")
                try:
                    records = consumer.poll(max_records=50, timeout_s=0.5)
                except FlotillaError as error:
                    self.history.record(process, EventType.FAIL, "poll", error=repr(error)[:200])
                    continue
                by_partition: dict[int, list[tuple[int, str]]] = {}
                for record in records:
                    by_partition.setdefault(record.partition, []).append(
                        (record.offset, record.value.decode())
                    )
                for p, pairs in sorted(by_partition.items()):
                    self.history.record(process, EventType.OK, "consume", partition=p,
                                        records=tuple(pairs))  # fmt: skip
                    with self._progress:
                        self.consumed[p] = max(self.consumed.get(p, 0), pairs[-1][0] + 1)
                        self._progress.notify_all()
                self.history.record(process, EventType.OK, "poll")
                polls += 1
                if polls % COMMIT_EVERY_POLLS == 0:
                    self._commit(consumer, process)
                if rng.random() < REJOIN_CHANCE:
                    return  # close (commits, leaves at once) and rejoin

    def _commit(self, consumer: object, process: str) -> None:
        positions = {
            p: consumer.position(topic, p)  # type: ignore[attr-defined]
            for topic, p in sorted(consumer.assignment())  # type: ignore[attr-defined]
        }
        pairs = tuple((p, str(offset)) for p, offset in positions.items() if offset is not None)
        if not pairs:
            return
        self.history.record(process, EventType.INVOKE, "commit", records=pairs)
        try:
            consumer.commit({(self.topic, p): int(o) for p, o in pairs})  # type: ignore[attr-defined]
        except FlotillaError as error:
            name = type(error).__name__
            kind = EventType.FAIL if name == "FencedMember" else EventType.INFO
            self.history.record(process, kind, "commit", error=repr(error)[:200])
        else:
            self.history.record(process, EventType.OK, "commit")


def committed_offsets(client: Client, partitions: int) -> dict[int, int]:
    """The group's committed offsets read back from its coordinator after the run."""
    offsets: dict[int, int] = {}
    with contextlib.suppress(FlotillaError):
        info = client.describe_group(GROUP)
        for partition in info.partitions:
            if partition.committed is not None and partition.partition < partitions:
                offsets[partition.partition] = partition.committed
    return offsets
