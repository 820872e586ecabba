"""A queue group on real nodes through coordinator kills (issue 25's end-to-end case), and the
same run against nodes whose coordinator forgets its leases on load, which must be caught.

Three nodes; four idempotent producers write numbered records to a 3-partition topic; eight
receiver processes (`chaos.queue_workload`) ack most deliveries, release, reject or let a few
expire, poison records go round until max_deliveries, and receivers are killed (SIGKILL) or
closed and come back; every 10 s the group's coordinator is killed with SIGKILL and restarted.
After the load the group drains, the dead-letter topic is read whole, and `chaos.queue_checker`
judges it all: every record acked once or dead-lettered once (never both, never neither), no
record held by two receivers before a deadline, delivery counts that only grow, dead letters with
correct headers. The longer version: `python -m chaos run ... --queue-receivers 8` (make chaos).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness import wait_until

from chaos.checker import reference_logs
from chaos.history import EventType, HistoryWriter
from chaos.queue_checker import QUEUE_ANOMALIES, check_queue
from chaos.queue_member import ACK, POISON_ONE_IN, decide
from chaos.queue_workload import QueueSettings, QueueWorkload, queue_summary, read_dead_letters
from chaos.run import RunConfig, collect_final_logs, replay_command
from chaos.workload import Workload, WorkloadConfig
from cluster.local import LocalCluster
from flotilla import Client
from flotilla.errors import FlotillaError

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
TOPIC, PARTITIONS, SEED = "jobs", 3, 11
KILL_EVERY_S, FIRST_KILL_S, KILLS, DOWN_S, AFTER_KILLS_S = 10.0, 4.0, 2, 1.5, 3.0
SETTINGS = QueueSettings(receivers=8, invisible_ms=4000, session_timeout_ms=10_000,
                         crash_every_s=(3.0, 5.0))  # fmt: skip
FAULT_ENV = "FLOTILLA_COORDINATOR_FAULTS"


@dataclass(frozen=True, slots=True)
class QueueRun:
    found: dict[str, list[str]]
    drained: bool
    summary: dict[str, int]
    reasons: dict[str, int]
    kills: list[str]
    records: int

    def anomalies(self) -> dict[str, list[str]]:
        return {kind: items[:3] for kind, items in self.found.items() if items}


def coordinator(client: Client) -> str:
    found: list[str] = []

    def known() -> bool:
        with contextlib.suppress(FlotillaError):
            found.append(client.describe_group(SETTINGS.group).coordinator)
        return bool(found and found[-1])

    wait_until(known, 30, f"a coordinator of {SETTINGS.group}")
    return found[-1]


def queue_run(root: Path, env: dict[str, str], kills: int, drain_timeout_s: float) -> QueueRun:
    """Producers and receivers run while the group's coordinator is killed `kills` times
    (FIRST_KILL_S in, then every KILL_EVERY_S) and for AFTER_KILLS_S after the last restart;
    then the drain (up to `drain_timeout_s`) and the checks. The verdict is also written to
    `root/queue-check.json`."""
    history = HistoryWriter(root / "history.jsonl")
    killed: list[str] = []
    with LocalCluster(root / "cluster", 3, config_text=CONFIG, env=env) as cluster:
        cluster.start()
        client = Client(cluster.addresses(), timeout_s=20)
        client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        config = WorkloadConfig(topic=TOPIC, partitions=PARTITIONS, producers=4,
                                produce_pause_s=0.05)  # fmt: skip
        producers = Workload(cluster.addresses(), [], history, config, SEED)  # no readers
        queue = QueueWorkload(cluster.addresses(), history, root / "queue", TOPIC, SEED, SETTINGS)
        schedule = threading.Event()  # never set: its waits are the kill schedule
        try:
            producers.start()
            queue.start()
            started = time.monotonic()
            for number in range(kills):
                schedule.wait(started + FIRST_KILL_S + number * KILL_EVERY_S - time.monotonic())
                node = coordinator(client)
                window = f"kill-coordinator#{number}"  # the checker's fault window
                history.record("nemesis", EventType.INFO, "fault-start", value=window)
                history.record("nemesis", EventType.INFO, "fault-target", value=f"kill {node}")
                cluster.kill(node)
                killed.append(node)
                schedule.wait(DOWN_S)  # down while a new coordinator takes over
                cluster.start(node, wait=False)
                cluster.wait_serving(node, timeout_s=30)
                history.record("nemesis", EventType.INFO, "fault-stop", value=window)
            schedule.wait(AFTER_KILLS_S)
            producers.stop()
            final, converged = collect_final_logs(client, TOPIC, 30)
            assert converged, "the topic's replicas did not converge"
            reference = reference_logs(final)
            drained = queue.drain({p: len(log) for p, log in reference.items()}, drain_timeout_s)
            queue.stop()
            letters, dlq_partitions = read_dead_letters(client, SETTINGS.dead_letter_topic(TOPIC))
        finally:
            queue.stop()
            producers.stop()
            client.close()
            history.close()
    events = queue.events()
    found = check_queue(events, reference, letters, topic=TOPIC,
                        max_deliveries=SETTINGS.max_deliveries,
                        dead_letter_partitions=dlq_partitions,
                        session_timeout_ms=SETTINGS.session_timeout_ms)  # fmt: skip
    reasons: dict[str, int] = {}
    for letter in letters:
        reason = letter.header("flotilla-dlq-reason") or "?"
        reasons[reason] = reasons.get(reason, 0) + 1
    records = sum(len(log) for log in reference.values())
    run = QueueRun(found, drained, queue_summary(events), reasons, killed, records)
    verdict = {"anomalies": {kind: len(items) for kind, items in found.items()},
               "examples": run.anomalies(), "drained": drained, "summary": run.summary,
               "dead_letters": reasons, "kills": killed, "records": records}  # fmt: skip
    (root / "queue-check.json").write_text(json.dumps(verdict, indent=2))
    return run


def test_queue_receivers_settle_every_record_once_through_coordinator_kills(
    tmp_path: Path,
) -> None:
    run = queue_run(tmp_path, {}, kills=KILLS, drain_timeout_s=60)
    detail = f"{run.summary}, dead letters {run.reasons}, {run.records} records, kills {run.kills}"
    assert run.anomalies() == {}, detail
    assert run.drained, detail
    assert set(run.found) == set(QUEUE_ANOMALIES)
    # the run did what it claims: kills, crashes, every kind of settlement, both reasons
    assert len(run.kills) == KILLS
    assert run.records >= 300 and run.summary.get("crash", 0) >= 1, detail
    for kind in ("lease", "ack", "release", "reject", "extend"):
        assert run.summary.get(kind, 0) >= 1, detail
    assert run.reasons.get("rejected", 0) >= 1 and run.reasons.get("max-deliveries", 0) >= 1, detail


def test_a_coordinator_that_forgets_leases_on_load_is_caught(tmp_path: Path) -> None:
    """The same run against nodes with a TEST-ONLY fault: a coordinator taking over forgets
    the leases its predecessor granted. Records held by receivers at a kill are handed out
    again before their deadlines (or never again): the checker must say so."""
    run = queue_run(tmp_path, {FAULT_ENV: "forget_lease_on_load"}, kills=1, drain_timeout_s=3)
    detail = f"{run.summary}, dead letters {run.reasons}, kills {run.kills}"
    caught = {kind: len(items) for kind, items in run.found.items() if items}
    # the leases it forgot are handed out again at once: two holders before a deadline
    assert caught.get("overlapping", 0) >= 1, f"{caught}: {detail}"


def test_receivers_choose_the_same_for_a_hand_out_and_poison_is_never_acked() -> None:
    """The choice is a function of (seed, record, delivery count): any receiver, any life."""
    values = [f"p{k}-{i}" for k in range(4) for i in range(500)]
    choices = [decide(SEED, v, 1) for v in values]
    assert choices == [decide(SEED, v, 1) for v in values]
    assert 0.8 < choices.count(ACK) / len(choices) < 0.97
    poison = [v for v in values if all(decide(SEED, v, n) != ACK for n in range(1, 6))]
    assert len(values) / POISON_ONE_IN / 2 < len(poison) < 2 * len(values) / POISON_ONE_IN


def test_the_replay_command_names_the_queue_receivers() -> None:
    config = RunConfig(nemeses=("kill-leader",), duration_s=30, seed=3, queue_receivers=8)
    assert replay_command(config).endswith(" --seed 3 --queue-receivers 8")
    assert " --queue-receivers" not in replay_command(RunConfig())
