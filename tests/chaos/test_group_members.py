"""A consumer group of member processes on real nodes, through joins, leaves, a kill -9 and a
member paused past its session (issue 24's end-to-end case).

Six members (`python -m chaos.group_member`, each its own process and history file) join one by
one while a producer writes numbered records; three leave (SIGTERM: commit, then leave at once),
one is killed (SIGKILL), one is SIGSTOPped past its session and resumed (a zombie: its commits
are fenced and it rejoins). The merged histories are judged by `chaos.group_checker`: no record
skipped, none consumed below an acknowledged commit (duplicates only after the last commit), no
partition consumed by two members in turn without a new assignment, the committed offsets read
back never below an acknowledged commit; and the member that is never disturbed keeps polling
(its largest gap between polls is at most twice its poll timeout)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from harness import wait_until

from chaos.group_checker import GROUP_ANOMALIES, check_group
from chaos.history import Event, EventType, HistoryWriter, load_history
from cluster.local import LocalCluster
from flotilla import Client

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
TOPIC, PARTITIONS, GROUP = "orders", 12, "billing"
SESSION_MS, POLL_S = 3000, 0.5
ROOT = Path(__file__).resolve().parents[2]


class Member:
    def __init__(self, name: str, bootstrap: str, directory: Path) -> None:
        self.name = name
        self.history = directory / f"{name}.jsonl"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "chaos.group_member", "--bootstrap", bootstrap,
             "--group", GROUP, "--topic", TOPIC, "--name", name, "--history", str(self.history),
             "--session-timeout-ms", str(SESSION_MS), "--poll-timeout-s", str(POLL_S)],
            cwd=ROOT, start_new_session=True,
        )  # fmt: skip

    def events(self) -> list[Event]:
        return load_history(self.history) if self.history.exists() else []

    def has(self, f: str) -> bool:
        return any(e.f == f for e in self.events())

    def signal(self, signum: signal.Signals) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signum)

    def close(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.process.wait(timeout=30)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "cluster", 3, config_text=CONFIG) as local:
        local.start()
        yield local


def owned(member: Member) -> set[int]:
    """The partitions a member holds now, by its assign and revoke events."""
    held: set[int] = set()
    for event in member.events():
        if event.f == "assign":
            held.add(event.partition)
        elif event.f == "revoke":
            held.discard(event.partition)
    return held


def test_members_join_leave_die_and_pause_without_skips_or_two_owners(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = ",".join(cluster.addresses())
    client = Client(cluster.addresses(), timeout_s=20)
    client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    stop = threading.Event()
    produced = HistoryWriter()

    def produce() -> None:
        with Client(cluster.addresses(), timeout_s=20) as writer:
            for i in range(20_000):
                if stop.is_set():
                    return
                value = f"v{i}"
                writer.produce(TOPIC, value.encode(), partition=i % PARTITIONS)
                produced.record("producer", EventType.OK, "produce", value=value)
                stop.wait(0.005)

    producer = threading.Thread(target=produce)
    members: list[Member] = []
    try:
        producer.start()
        for number in range(6):  # join one by one (rendezvous may give a member nothing)
            member = Member(f"m{number}", bootstrap, tmp_path)
            members.append(member)
            wait_until(partial(member.has, "started"), 30, f"{member.name} to start")
            wait_until(lambda: sum(len(owned(m)) for m in members) == PARTITIONS, 30,
                       "every partition owned")  # fmt: skip
        for member in members[:3]:  # three leave: the rest take their partitions at once
            member.signal(signal.SIGTERM)
            assert member.process.wait(timeout=30) == 0
        wait_until(lambda: sum(len(owned(m)) for m in members[3:]) == PARTITIONS, 30,
                   "the three leavers' partitions owned by the others")  # fmt: skip
        members[3].signal(signal.SIGKILL)  # one dies: its partitions move after its session
        wait_until(lambda: sum(len(owned(m)) for m in members[4:]) == PARTITIONS, 30,
                   "the killed member's partitions owned by the survivors")  # fmt: skip
        zombie = members[4]
        zombie.signal(signal.SIGSTOP)  # paused past its session: its partitions move to m5
        wait_until(lambda: len(owned(members[5])) == PARTITIONS, 30,
                   "the paused member's partitions owned by m5")  # fmt: skip
        resumed_at = time.monotonic()
        zombie.signal(signal.SIGCONT)  # it resumes, finds its session over, rejoins
        wait_until(lambda: any(e.f == "assign" and e.t > resumed_at for e in zombie.events())
                   or len(owned(members[5])) < PARTITIONS, 30,
                   "the resumed member back in the group")  # fmt: skip
        stop.set()
        producer.join(timeout=30)
        final = {p: [(r.offset, r.value.decode()) for r in read_all(client, p)]
                 for p in range(PARTITIONS)}  # fmt: skip

        def consumed_everything() -> bool:
            seen: dict[int, set[int]] = {}
            for member in members:
                for event in member.events():
                    if event.f == "consume":
                        seen.setdefault(event.partition, set()).update(o for o, _ in event.records)
            return all(len(seen.get(p, ())) >= len(log) for p, log in final.items())

        wait_until(consumed_everything, 60, "the group to consume every record")
        for member in members[4:]:
            member.signal(signal.SIGTERM)
            member.process.wait(timeout=30)
        info = client.describe_group(GROUP)
        committed = {p.partition: p.committed for p in info.partitions if p.committed is not None}
    finally:
        stop.set()
        producer.join(timeout=30)
        for member in members:
            member.close()
        client.close()
    events = sorted((e for m in members for e in m.events()), key=lambda e: e.t)
    events.append(Event(events[-1].t, "group", EventType.OK, "drained"))
    found = check_group(events, final, committed)
    assert {kind: found[kind][:3] for kind in GROUP_ANOMALIES if found[kind]} == {}
    # the zombie gave its partitions up (a revoke after its resume) before any came back
    assert any(e.f == "revoke" and e.t > resumed_at for e in zombie.events())
    # m5 was never disturbed: it kept polling through every join, leave, death and pause
    polls = [e.t for e in members[5].events() if e.f == "poll" and e.type is EventType.OK]
    gaps = [b - a for a, b in itertools.pairwise(polls)]
    assert max(gaps) <= 2 * POLL_S, f"m5 stopped polling for {max(gaps):.2f} s"


def read_all(client: Client, partition: int) -> list:  # type: ignore[type-arg]
    records: list = []  # type: ignore[type-arg]
    while batch := client.read(TOPIC, partition, len(records), 1000):
        records += batch
    return records
