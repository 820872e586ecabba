"""The delayed-delivery workload (issue 26): delayers send numbered delayed records, followers
note when each one appears. Judged by `chaos.delay_checker`.

Delayer k ("delayer-<k>", its own `Client`, so its own idempotent producer) sends record n as
`d<k>-<n>@<due_ms>` to partition n % partitions with `deliver_at_ms=due_ms`, at `rate_per_s`
records a second shared by the delayers. Due times (seeded): most spread over `spread_s` ahead;
`same_instant_share` of them on a shared grid (several records due at one instant);
`past_share` slightly in the past (due at once). Outcomes: `ok` (durably accepted), `fail` only
for TopicNotFound, `info` (unknown) for everything else — InvalidArgument too, since a retry of
an accepted produce whose due time has meanwhile passed the 1 s tolerance is refused so.

Partition p has a follower per replica ("follower-<p>-<replica>"): each subscribes from offset
0 starting at that replica and records each record's arrival (`delay-seen`, wall clock,
offset); the checker takes the earliest. One per replica, so a follower held up by a paused or
partitioned replica (until its subscription gives that replica up) does not count as lateness
of the timers. When the workload stops it records `delay-followed`: the time up to which some
follower of every partition had caught up (the checker judges an unseen record due a bound
before it late).

    workload = DelayWorkload(bootstrap, history, "reminders", 2, seed, DelaySettings())
    workload.start(); ...; workload.stop_delayers(); workload.wait_due(bound_ms)
    final = ...; workload.stop()
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chaos.client_tls import PLAINTEXT, ClientTls
from chaos.delay_checker import delayed_value
from chaos.history import EventType, HistoryWriter
from flotilla import Client
from flotilla.errors import FlotillaError, TopicNotFound
from timers.types import timer_topic

__all__ = ["DelaySettings", "DelayWorkload", "timer_leaders", "wall_ms"]

GRID_MS = 500  # the shared instants "same instant" records fall due at
IDLE_S = 0.5  # a follower's subscription ends after this long without a record, then resumes


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class DelaySettings:
    rate_per_s: float = 20.0  # delayed records a second, all delayers together
    delayers: int = 2
    spread_s: tuple[float, float] = (0.5, 4.0)  # MIN,MAX seconds ahead of the send
    same_instant_share: float = 0.25
    past_share: float = 0.1  # due 1..300 ms before the send: due at once
    produce_timeout_s: float = 5.0
    max_records: int = 100_000  # per delayer: bounds a run's history


class DelayWorkload:
    def __init__(
        self,
        bootstrap: Sequence[str],
        history: HistoryWriter,
        topic: str,
        partitions: int,
        seed: int,
        settings: DelaySettings = DelaySettings(),
        tls: ClientTls = PLAINTEXT,
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.tls = tls
        self.history = history
        self.topic = topic
        self.partitions = partitions
        self.seed = seed
        self.settings = settings
        self._stop_delayers = threading.Event()
        self._stop_followers = threading.Event()
        self._delayers: list[threading.Thread] = []
        self._followers: list[threading.Thread] = []
        self._clients: list[Client] = []
        self._lock = threading.Lock()
        # partition -> when one of its followers last had nothing new
        self._caught_up_ms: dict[int, int] = {}
        self.last_due_ms = 0
        self.sent = 0

    def start(self) -> None:
        for number in range(self.settings.delayers):
            self._spawn(self._delayers, f"delayer-{number}", self._delay, number)
        for partition, replicas in enumerate(self._replicas()):
            for replica in replicas:
                name = f"follower-{partition}-{replica or 'any'}"
                self._spawn(self._followers, name, self._follow, partition, replica)

    def _replicas(self) -> list[list[str | None]]:
        """Each partition's replicas (one follower each), or [None] where unknown."""
        found: list[list[str | None]] = [[None] for _ in range(self.partitions)]
        with (
            contextlib.suppress(FlotillaError),
            self.tls.client(self.bootstrap, timeout_s=10) as client,
        ):
            for info in client.describe_topic(self.topic).partitions:
                if info.index < self.partitions and info.replicas:
                    found[info.index] = list(info.replicas)
        return found

    def _spawn(self, into: list[threading.Thread], name: str, target: Callable[..., None],
               *args: object) -> None:  # fmt: skip
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        into.append(thread)
        thread.start()

    def _client(self, timeout_s: float) -> Client:
        client = self.tls.client(self.bootstrap, timeout_s=timeout_s)
        with self._lock:
            self._clients.append(client)
        return client

    def due_ms(self, rng: random.Random, now_ms: int) -> int:
        s = self.settings
        draw = rng.random()
        if draw < s.past_share:
            return now_ms - rng.randint(1, 300)
        ahead_ms = int(rng.uniform(*s.spread_s) * 1000)
        if draw < s.past_share + s.same_instant_share:
            return -(-(now_ms + ahead_ms) // GRID_MS) * GRID_MS
        return now_ms + ahead_ms

    def _delay(self, number: int) -> None:
        s, process = self.settings, f"delayer-{number}"
        client = self._client(s.produce_timeout_s)
        rng = random.Random(f"{self.seed}/{process}")
        pause_s = s.delayers / s.rate_per_s
        next_at = time.monotonic()
        for counter in range(s.max_records):
            if self._stop_delayers.wait(max(0.0, next_at - time.monotonic())):
                return
            next_at += pause_s
            partition = counter % self.partitions
            sent_ms = wall_ms()
            due = self.due_ms(rng, sent_ms)
            value = delayed_value(number, counter, due)
            with self._lock:
                self.last_due_ms = max(self.last_due_ms, due)
                self.sent += 1
            self.history.record(process, EventType.INVOKE, "delay-produce", partition=partition,
                                value=value, wall_ms=sent_ms)  # fmt: skip
            try:
                client.produce(self.topic, value.encode(), partition=partition,
                               deliver_at_ms=due)  # fmt: skip
            except TopicNotFound as error:
                self.history.record(process, EventType.FAIL, "delay-produce", partition=partition,
                                    value=value, wall_ms=wall_ms(), error=repr(error)[:200])  # fmt: skip
            except Exception as error:  # unknown: it may have been accepted
                self.history.record(process, EventType.INFO, "delay-produce", partition=partition,
                                    value=value, wall_ms=wall_ms(), error=repr(error)[:200])  # fmt: skip
            else:
                self.history.record(process, EventType.OK, "delay-produce", partition=partition,
                                    value=value, wall_ms=wall_ms())  # fmt: skip

    def _follow(self, partition: int, replica: str | None) -> None:
        process = f"follower-{partition}-{replica or 'any'}"
        client = self._client(5.0)
        cursor = 0
        while not self._stop_followers.is_set():
            began_ms = wall_ms()
            try:
                for record in client.subscribe(self.topic, partition, cursor, replica,
                                               stop_after_idle_s=IDLE_S):  # fmt: skip
                    self.history.record(process, EventType.OK, "delay-seen", partition=partition,
                                        offset=record.offset, value=record.value.decode(),
                                        wall_ms=wall_ms())  # fmt: skip
                    cursor = record.offset + 1
                    if self._stop_followers.is_set():
                        return
            except (FlotillaError, ValueError):
                self._stop_followers.wait(0.2)  # a retry interval; the cluster may be failing over
                continue
            # it ran IDLE_S without a record: everything committed before that was seen
            with self._lock:
                caught = max(began_ms, wall_ms() - int(IDLE_S * 1000))
                self._caught_up_ms[partition] = max(self._caught_up_ms.get(partition, 0), caught)

    def stop_delayers(self) -> None:
        self._stop_delayers.set()
        for thread in self._delayers:
            thread.join(timeout=60)

    def wait_due(self, after_ms: int, timeout_s: float = 120.0) -> None:
        """After `stop_delayers`: waits until every sent record is `after_ms` past due and each
        follower caught up after that (or `timeout_s` passes)."""
        deadline = time.monotonic() + timeout_s
        target = self.last_due_ms + after_ms
        while time.monotonic() < deadline:
            with self._lock:
                caught = [self._caught_up_ms.get(p, 0) for p in range(self.partitions)]
            if min(caught, default=0) >= target:
                return
            self._stop_followers.wait(0.1)  # a poll interval

    def stop(self) -> None:
        """Stops the delayers and followers, then records `delay-followed` (once)."""
        self.stop_delayers()
        if self._stop_followers.is_set():
            return
        self._stop_followers.set()
        for thread in self._followers:
            thread.join(timeout=30)
        with self._lock:
            caught = [self._caught_up_ms.get(p, -1) for p in range(self.partitions)]
            clients, self._clients = self._clients, []
        if caught and min(caught) > 0:
            self.history.record("delayer", EventType.OK, "delay-followed", wall_ms=min(caught))
        for client in clients:
            with contextlib.suppress(Exception):
                client.close()


def timer_leaders(client: Client, topic: str) -> dict[int, str]:
    """The leaders of `topic`'s timer partitions (timer partition p holds source partition p's
    pending timers); {} before its first delayed produce created them."""
    uid = client.describe_topic(topic).uid
    name = timer_topic(uid)
    for info in client.metadata().topics:
        if info.name == name:
            return {p.index: p.leader for p in info.partitions if p.leader}
    return {}
