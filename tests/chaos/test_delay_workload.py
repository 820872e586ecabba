"""Delayed records on real nodes through timer-leader kills (issue 26's end-to-end case), and the
same load against nodes whose timer leader fires every batch twice, which must be caught.

Three nodes; two delayers send delayed records to a 2-partition topic (due 1-3 s ahead, a
quarter of them on shared instants, a tenth slightly in the past) while followers subscribe to
both partitions; the leader of a timer partition is killed with SIGKILL twice while its timers
fall due, and comes back. After the load every record falls due, the replicas converge and
`chaos.delay_checker` judges it all: each accepted record fired exactly once, none early, none
later than an election + 1 s (1 s away from the kills). The longer version:
`python -m chaos run ... --delayed 20` (make chaos).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from harness import wait_until

from chaos.delay_checker import DelayCheck, check_delayed, due_of
from chaos.delay_workload import GRID_MS, DelaySettings, DelayWorkload, timer_leaders, wall_ms
from chaos.history import EventType, HistoryWriter
from chaos.run import DELAY_BOUNDS, NODE_CONFIG, RunConfig, finish_delayed, replay_command
from cluster.local import LocalCluster
from flotilla import Client
from flotilla.errors import FlotillaError

TOPIC, PARTITIONS, SEED = "reminders", 2, 5
SETTINGS = DelaySettings(rate_per_s=40, delayers=2, spread_s=(1.0, 3.0))
FIRST_KILL_S, KILL_EVERY_S, DOWN_S = 3.5, 4.5, 1.5
FAULT_ENV = "FLOTILLA_TIMER_FAULTS"
CAPPED_RECORDS = 2000


@dataclass(frozen=True, slots=True)
class DelayRun:
    check: DelayCheck
    converged: bool
    kills: list[str]
    windows_ms: list[tuple[int, int]]  # (kill, restarted) wall ms
    due_in_windows: int  # acknowledged records due while a timer leader was down

    def detail(self) -> str:
        return (
            f"{self.check.summary()}; kills {self.kills}; due during kills {self.due_in_windows}; "
            f"examples { ({k: v[:3] for k, v in self.check.found.items() if v}) }"
        )


def wait_timer_leaders(client: Client) -> dict[int, str]:
    found: list[dict[int, str]] = []

    def known() -> bool:
        with contextlib.suppress(FlotillaError):
            found.append(timer_leaders(client, TOPIC))
        return bool(found) and len(found[-1]) == PARTITIONS

    wait_until(known, 30, f"a leader of every timer partition of {TOPIC}")
    return found[-1]


def delay_run(
    root: Path, env: dict[str, str], kills: int, load_s: float, *, settle: bool = True
) -> DelayRun:
    """The load runs `load_s`; the leader of timer partition (k % PARTITIONS) is killed at
    FIRST_KILL_S + k * KILL_EVERY_S for DOWN_S, `kills` times; then `finish_delayed`, or
    (`settle` False: a broken build whose timer leader never stops appending) the first
    CAPPED_RECORDS of each partition once the records fell due, read from its leader."""
    history = HistoryWriter(root / "history.jsonl")
    killed: list[str] = []
    windows: list[tuple[int, int]] = []
    with LocalCluster(root / "cluster", 3, config_text=NODE_CONFIG, env=env) as cluster:
        cluster.start()
        client = Client(cluster.addresses(), timeout_s=20)
        workload = DelayWorkload(cluster.addresses(), history, TOPIC, PARTITIONS, SEED, SETTINGS)
        schedule = threading.Event()  # never set: its waits are the kill schedule
        try:
            client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
            workload.start()
            started = time.monotonic()
            for number in range(kills):
                schedule.wait(started + FIRST_KILL_S + number * KILL_EVERY_S - time.monotonic())
                node = wait_timer_leaders(client)[number % PARTITIONS]
                window = f"kill-timer-leader#{number}"
                history.record("nemesis", EventType.INFO, "fault-start", value=window)
                history.record("nemesis", EventType.INFO, "fault-target", value=f"kill {node}")
                down_ms = wall_ms()
                cluster.kill(node)
                killed.append(node)
                schedule.wait(DOWN_S)
                cluster.start(node, wait=False)
                cluster.wait_serving(node, timeout_s=30)
                windows.append((down_ms, wall_ms()))
                history.record("nemesis", EventType.INFO, "fault-stop", value=window)
            schedule.wait(started + load_s - time.monotonic())
            if settle:
                check, converged = finish_delayed(client, workload, 30)
            else:
                check, converged = capped_check(client, workload), False
        finally:
            workload.stop()
            client.close()
            history.close()
    acked = [e.value for e in history.events if e.f == "delay-produce" and e.type is EventType.OK]
    due_in_windows = sum(
        1 for value in acked if any(a <= (due_of(value) or 0) <= b for a, b in windows)
    )
    return DelayRun(check, converged, killed, windows, due_in_windows)


def capped_check(client: Client, workload: DelayWorkload) -> DelayCheck:
    workload.stop_delayers()
    workload.wait_due(DELAY_BOUNDS.quiet_ms, timeout_s=DELAY_BOUNDS.quiet_ms / 1000 + 5)
    final = {}
    for partition in range(PARTITIONS):
        records = client.read(TOPIC, partition, 0, CAPPED_RECORDS)
        final[partition] = [(r.offset, r.value.decode()) for r in records]
    final_ms = wall_ms()
    workload.stop()
    return check_delayed(workload.history.snapshot(), final, final_ms=final_ms,
                         bounds=DELAY_BOUNDS)  # fmt: skip


def test_each_delayed_record_fires_once_on_time_through_timer_leader_kills(
    tmp_path: Path,
) -> None:
    run = delay_run(tmp_path, {}, kills=2, load_s=FIRST_KILL_S + 2 * KILL_EVERY_S)
    assert run.check.ok, run.detail()
    assert run.converged, run.detail()
    # the run did what it claims: two timer leaders killed while timers fell due, and most
    # records accepted, fired and seen
    assert len(run.kills) == 2, run.detail()
    assert run.due_in_windows >= 20, run.detail()
    assert run.check.acked >= 250 and run.check.fired >= run.check.acked, run.detail()
    assert run.check.seen >= run.check.acked * 0.95, run.detail()
    lateness = run.check.lateness()
    assert lateness["max"] is not None and lateness["max"] <= DELAY_BOUNDS.fault_ms, run.detail()


def test_a_timer_leader_that_fires_twice_is_caught(tmp_path: Path) -> None:
    """The same load against nodes with a TEST-ONLY fault: the timer leader plans every batch
    again after firing it. The checker must find records in the log twice."""
    run = delay_run(tmp_path, {FAULT_ENV: "fire_twice"}, kills=0, load_s=3.0, settle=False)
    caught = {kind: len(items) for kind, items in run.check.found.items() if items}
    assert caught.get("twice", 0) >= 1, run.detail()


def test_due_times_spread_ahead_some_on_one_instant_some_just_past() -> None:
    workload = DelayWorkload([], HistoryWriter(), TOPIC, PARTITIONS, SEED, SETTINGS)
    rng, now = random.Random(SEED), 1_800_000_000_000
    dues = [workload.due_ms(rng, now) for _ in range(2000)]
    past = [d for d in dues if d < now]
    assert all(now - 300 <= d for d in past) and 0.05 < len(past) / len(dues) < 0.15
    ahead = [d - now for d in dues if d >= now]
    low, high = SETTINGS.spread_s
    assert all(low * 1000 <= a <= high * 1000 + GRID_MS for a in ahead)
    shared = Counter(d for d in dues if d % GRID_MS == 0)
    assert sum(n for n in shared.values() if n > 1) >= len(dues) * 0.2  # many due at one instant


def test_the_replay_command_names_the_delayed_rate() -> None:
    config = RunConfig(nemeses=("kill-leader",), duration_s=30, seed=3, delayed=20)
    assert replay_command(config).endswith(" --seed 3 --delayed 20")
    assert " --delayed" not in replay_command(RunConfig())
