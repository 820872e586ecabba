"""The chaos runner: real node processes on 127.0.0.x, proxies on every link, a workload, a
seeded nemesis schedule, then heal, wait for convergence, check and report.

    python -m chaos run --nodes 5 --nemesis partition-random,kill-leader,pause --duration 60 --seed 7
    python -m chaos sweep --nemesis all --seeds 1,2,3 --duration 60
    python -m chaos run --nemesis kill-leader --duration 30 --delayed 20
    python -m chaos run --nemesis kill-leader --duration 30 --no-tls

A run is TLS by default (mutual TLS on every connection, node certificates on the Raft and
gossip links through the proxies, every client with the cluster's `admin` client certificate:
`chaos.client_tls`); `--no-tls` runs plaintext, to compare.

`--delayed N` adds N delayed records a second to a topic of their own (`<topic>-delayed`)
beside the normal workload (`chaos.delay_workload`), judged by `chaos.delay_checker`: each
accepted one fires exactly once, never early, late by at most 1 s (an election + 1 s when it
fell due during a fault).

A run writes `<root>/<timestamp>-<nemeses>-s<seed>/`: history.jsonl, report.json, the node logs
and dial maps. It prints the checker's summary and the replay command, and exits 1 on an anomaly.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from chaos.checker import CheckResult, FinalLogs, check, reference_logs, with_group
from chaos.client_tls import PLAINTEXT, ClientTls
from chaos.delay_checker import DelayBounds, DelayCheck, check_delayed
from chaos.delay_workload import DelaySettings, DelayWorkload, wall_ms
from chaos.disk import DiskFaultCluster
from chaos.group_checker import check_group
from chaos.group_workload import GroupWorkload, committed_offsets
from chaos.history import HistoryWriter
from chaos.nemesis import DISK, MOVES, Nemesis, schedule
from chaos.network import ChaosNetwork
from chaos.queue_checker import check_queue
from chaos.queue_workload import QueueSettings, QueueWorkload, queue_summary, read_dead_letters
from chaos.workload import Workload, WorkloadConfig
from cluster.local import LocalCluster
from flotilla import Client
from flotilla.errors import FlotillaError

__all__ = ["RunConfig", "RunOutcome", "replay_command", "run", "sweep", "sweep_table"]

NODE_CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
UNSAFE_ENV = "FLOTILLA_ALLOW_UNSAFE"
# NODE_CONFIG's election timeout is 500 ms; a split vote may take a second round
ELECTION_MS = 1000
DELAY_BOUNDS = DelayBounds(quiet_ms=1000, fault_ms=ELECTION_MS + 1000, grace_s=2.0)


@dataclass(frozen=True, slots=True)
class RunConfig:
    nodes: int = 3
    nemeses: tuple[str, ...] = ("partition-random", "kill-leader", "pause")
    duration_s: float = 60.0
    seed: int = 7
    root: Path = Path("chaos-runs")
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    settle_s: float = 3.0  # workload keeps running after the final heal (time-to-first-write)
    converge_timeout_s: float = 60.0
    unsafe_flags: tuple[str, ...] = ()  # test-only node flags, e.g. "--unsafe-ack-before-commit"
    quiet_s: tuple[float, float] = (1.0, 3.0)
    fault_s: tuple[float, float] = (2.0, 5.0)
    max_faults: int = 0  # 0 = as many as fit in duration_s
    node_config: str = NODE_CONFIG  # TOML given to every node (--config)
    # seconds before a dead or departed node's replicas move to live nodes (the nodes' own
    # default when None); short, with more nodes than replicas, the faults also move data
    replace_after_s: float | None = None
    fail_stop_timeout_s: float = 30.0  # how long the disk nemesis waits for a node to stop
    # test-only: runs each node instead of `python -m flotilla` (a mutation test's broken build)
    node_launcher: tuple[str, ...] = ()
    # members of one consumer group reading the topic (`chaos.group_workload`); 0: none
    group_members: int = 0
    drain_timeout_s: float = 60.0  # how long the group may take to consume the final logs
    # receiver processes of one queue group sharing the topic (`chaos.queue_workload`); 0: none
    queue_receivers: int = 0
    queue: QueueSettings = field(default_factory=QueueSettings)
    # delayed records a second to `<topic>-delayed` (`chaos.delay_workload`); 0: none
    delayed: float = 0.0
    tls: bool = True  # nodes and clients on mutual TLS (False: plaintext, `--no-tls`)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    config: RunConfig
    directory: Path
    result: CheckResult
    converged: bool
    delayed: DelayCheck | None = None  # the delayed-delivery checker's verdict, when it ran

    @property
    def ok(self) -> bool:
        return self.result.ok and self.converged


def replay_command(config: RunConfig) -> str:
    """The one command that replays this run's schedule (non-default settings included)."""
    default, workload = RunConfig(), WorkloadConfig()
    extra = {
        "--partitions": (config.workload.partitions, workload.partitions),
        "--producers": (config.workload.producers, workload.producers),
        "--quiet-s": (config.quiet_s, default.quiet_s),
        "--fault-s": (config.fault_s, default.fault_s),
        "--max-faults": (config.max_faults, default.max_faults),
        "--replace-after-s": (config.replace_after_s, default.replace_after_s),
        "--group-members": (config.group_members, default.group_members),
        "--queue-receivers": (config.queue_receivers, default.queue_receivers),
        "--delayed": (f"{config.delayed:g}", f"{default.delayed:g}"),
    }
    flags = "".join(
        f" {flag} {','.join(f'{v:g}' for v in value) if isinstance(value, tuple) else value}"
        for flag, (value, usual) in extra.items()
        if value != usual
    )
    flags += "".join(f" {flag}" for flag in config.unsafe_flags)
    flags += "" if config.tls else " --no-tls"
    return (
        f"python -m chaos run --nodes {config.nodes} --nemesis {','.join(config.nemeses)} "
        f"--duration {config.duration_s:g} --seed {config.seed}{flags}"
    )


def _node_config(config: RunConfig) -> str:
    if config.replace_after_s is None:
        return config.node_config
    return config.node_config + f"replace_after_s = {config.replace_after_s!r}\n"


def replication_factor(config: RunConfig) -> int:
    return min(3, config.nodes)


def run(config: RunConfig) -> RunOutcome:
    moves = [n for n in config.nemeses if n in MOVES]
    if moves and config.nodes <= replication_factor(config):
        raise ValueError(
            f"{moves} need more nodes than the replication factor "
            f"{replication_factor(config)}, not --nodes {config.nodes}: e.g. --nodes 5"
        )
    faults = schedule(config.nemeses, config.duration_s, config.seed, quiet_s=config.quiet_s,
                      fault_s=config.fault_s, max_faults=config.max_faults)  # fmt: skip
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    name = f"{stamp}-{'+'.join(config.nemeses)[:60]}-s{config.seed}"
    directory = config.root / name
    suffix = 1
    while directory.exists():
        suffix += 1
        directory = config.root / f"{name}-{suffix}"
    directory.mkdir(parents=True)
    (directory / "schedule.json").write_text(json.dumps([asdict(f) for f in faults], indent=2))
    env = {UNSAFE_ENV: "1"} if config.unsafe_flags else {}
    # nodes read disk faults from their own control file only when a disk nemesis runs
    options: dict[str, Any] = {"env": env, "node_args": list(config.unsafe_flags),
                               "config_text": _node_config(config), "tls": config.tls}  # fmt: skip
    if any(n in DISK for n in config.nemeses) or config.node_launcher:
        cluster: LocalCluster = DiskFaultCluster(
            directory / "cluster", config.nodes, launcher=config.node_launcher, **options
        )
    else:
        cluster = LocalCluster(directory / "cluster", config.nodes, **options)
    network = ChaosNetwork(directory)
    history = HistoryWriter(directory / "history.jsonl")
    topic = config.workload.topic
    committed: dict[int, int] = {}
    group: GroupWorkload | None = None
    queue: QueueWorkload | None = None
    queue_found: dict[str, list[str]] = {}
    delayer: DelayWorkload | None = None
    delayed: DelayCheck | None = None
    delayed_topic = f"{topic}-delayed"
    try:
        network.attach(cluster)
        cluster.start()
        tls = client_tls(cluster)
        client = tls.client(cluster.addresses(), timeout_s=20)
        client.create_topic(topic, config.workload.partitions, replication_factor(config))
        replicas = _wait_for_leaders(client, topic, config.workload.partitions)
        if config.delayed:
            client.create_topic(delayed_topic, config.workload.partitions,
                                replication_factor(config))  # fmt: skip
            _wait_for_leaders(client, delayed_topic, config.workload.partitions)
        workload = Workload(cluster.addresses(), replicas, history, config.workload, config.seed,
                            tls)  # fmt: skip
        nemesis = Nemesis(cluster, network, client, topic, history, config.seed,
                          fail_stop_timeout_s=config.fail_stop_timeout_s)  # fmt: skip
        workload.start()
        if config.group_members:
            group = GroupWorkload(cluster.addresses(), history, topic, config.group_members,
                                  config.seed, tls=tls)  # fmt: skip
            group.start()
        if config.queue_receivers:
            settings = replace(config.queue, receivers=config.queue_receivers)
            queue = QueueWorkload(cluster.addresses(), history, directory / "queue", topic,
                                  config.seed, settings, tls=tls)  # fmt: skip
            queue.start()
        if config.delayed:
            delayer = DelayWorkload(cluster.addresses(), history, delayed_topic,
                                    config.workload.partitions, config.seed,
                                    DelaySettings(rate_per_s=config.delayed), tls)  # fmt: skip
            delayer.start()
        started_at = time.monotonic()
        runner = threading.Thread(target=nemesis.run, args=(faults, started_at), name="nemesis")
        runner.start()
        runner.join(timeout=3 * config.duration_s + 120)  # overruns shift faults
        nemesis.stop()
        runner.join(timeout=60)
        nemesis.heal_all()
        time.sleep(config.settle_s)  # the workload's writes after the heal are part of the run
        workload.stop()
        if delayer is not None:
            delayed, delayed_converged = finish_delayed(client, delayer, config.converge_timeout_s)
        final, converged = collect_final_logs(client, topic, config.converge_timeout_s)
        if delayer is not None:
            converged = converged and delayed_converged
        if group is not None:
            ends = {p: len(log) for p, log in reference_logs(final).items()}
            group.drain(ends, config.drain_timeout_s)
            group.stop()
            committed = committed_offsets(client, config.workload.partitions)
        if queue is not None:
            queue_found = drain_and_check_queue(client, queue, final, config.drain_timeout_s)
        client.close()
    finally:
        if group is not None:
            group.stop()
        if queue is not None:
            queue.stop()
        if delayer is not None:
            delayer.stop()
        history.close()
        cluster.close()
        network.close()
    (directory / "final-logs.json").write_text(
        json.dumps({str(p): logs for p, logs in final.items()}, separators=(",", ":"))
    )
    result = check(history.events, final)
    extra: dict[str, list[str]] = {}
    if config.group_members:
        extra.update(check_group(history.events, reference_logs(final), committed))
    if config.queue_receivers:
        extra.update(queue_found)
    if delayed is not None:
        extra.update(delayed.anomalies())
    if extra:
        result = with_group(result, extra)
    outcome = RunOutcome(config, directory, result, converged, delayed)
    write_report(outcome, faults)
    return outcome


def client_tls(cluster: LocalCluster) -> ClientTls:
    """The client settings for `cluster`: its `admin` client certificate when it runs TLS."""
    paths = cluster.tls
    if paths is None:
        return PLAINTEXT
    return ClientTls(str(paths.ca), str(paths.cert), str(paths.key))


def drain_and_check_queue(
    client: Client, queue: QueueWorkload, final: FinalLogs, timeout_s: float
) -> dict[str, list[str]]:
    """After the heal: the receivers settle every record of the final logs (or `timeout_s`
    passes), stop, and `chaos.queue_checker` judges their merged history with the dead-letter
    topic read whole."""
    reference = reference_logs(final)
    drained = queue.drain({p: len(log) for p, log in reference.items()}, timeout_s)
    queue.stop()
    letters, partitions = read_dead_letters(client, queue.settings.dead_letter_topic(queue.topic))
    events = queue.events()
    found = check_queue(events, reference, letters, topic=queue.topic,
                        max_deliveries=queue.settings.max_deliveries,
                        dead_letter_partitions=partitions,
                        session_timeout_ms=queue.settings.session_timeout_ms)  # fmt: skip
    with open(queue.directory / "dead-letters.jsonl", "w", encoding="utf-8") as out:
        for letter in letters:  # kept to judge the run again (headers as latin-1 text)
            headers = [[name, data.decode("latin-1")] for name, data in letter.headers]
            out.write(json.dumps([letter.partition, letter.offset, letter.value, headers]) + "\n")
    reasons = Counter(letter.header("flotilla-dlq-reason") or "?" for letter in letters)
    verdict = {
        "drained": drained,
        "events": queue_summary(events),
        "crashes": queue.crashes,
        "dead_letters": dict(reasons),
        "anomalies": {k: len(v) for k, v in found.items()},
    }
    (queue.directory / "queue-check.json").write_text(json.dumps(verdict, indent=2))
    return found


def finish_delayed(
    client: Client, delayer: DelayWorkload, timeout_s: float
) -> tuple[DelayCheck, bool]:
    """After the heal: the delayers stop, every record they sent falls due (and the quiet bound
    passes), the delayed topic's replicas converge, and `chaos.delay_checker` judges it."""
    delayer.stop_delayers()
    delayer.wait_due(DELAY_BOUNDS.quiet_ms)
    final, converged = collect_final_logs(client, delayer.topic, timeout_s)
    final_ms = wall_ms()
    delayer.stop()
    found = check_delayed(delayer.history.snapshot(), reference_logs(final), final_ms=final_ms,
                          bounds=DELAY_BOUNDS)  # fmt: skip
    return found, converged


def _wait_for_leaders(client: Client, topic: str, partitions: int) -> list[str]:
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(FlotillaError):
            info = client.describe_topic(topic)
            if len(info.partitions) == partitions and all(p.leader for p in info.partitions):
                return sorted({r for p in info.partitions for r in p.replicas})
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic!r} has no leader on every partition after 60 s")
        time.sleep(0.1)


def _read_all(client: Client, topic: str, partition: int, replica: str) -> list[tuple[int, str]]:
    pairs: list[tuple[int, str]] = []
    while True:
        records = client.read(topic, partition, len(pairs), 1000, replica)
        if not records:
            return pairs
        pairs += [(r.offset, r.value.decode()) for r in records]


def collect_final_logs(client: Client, topic: str, timeout_s: float) -> tuple[FinalLogs, bool]:
    """Every replica's committed log, once all replicas of each partition hold the same length
    as its leader's high watermark. After `timeout_s`, the logs of the replicas that answered
    (a replica that never serves is left out and the run counts as not converged)."""
    deadline = time.monotonic() + timeout_s
    final: dict[int, dict[str, list[tuple[int, str]]]] = {}
    while True:
        converged = True
        with contextlib.suppress(FlotillaError):
            info = client.describe_topic(topic)
            for p in info.partitions:
                logs = final.setdefault(p.index, {})
                for replica in p.replicas:
                    try:
                        logs[replica] = _read_all(client, topic, p.index, replica)
                    except FlotillaError:
                        converged = False
                lengths = {len(log) for log in logs.values()} | {p.high_watermark}
                converged = converged and bool(p.leader) and len(lengths) == 1
            if converged and len(final) == len(info.partitions):
                return final, True
        if time.monotonic() > deadline:
            return final, False
        time.sleep(0.5)


def write_report(outcome: RunOutcome, faults: Sequence[Any]) -> None:
    result = outcome.result
    report = {
        "ok": outcome.ok,
        "converged": outcome.converged,
        "seed": outcome.config.seed,
        "nodes": outcome.config.nodes,
        "nemeses": list(outcome.config.nemeses),
        "duration_s": outcome.config.duration_s,
        "replay": replay_command(outcome.config),
        "schedule": [asdict(f) for f in faults],
        "acked": result.acked,
        "failed": result.failed,
        "unknown": result.unknown,
        "unknown_committed": result.unknown_committed,
        "reads": result.reads,
        "anomalies": dict(result.counts),
        "examples": {kind: list(result.examples(kind)) for kind in result.counts},
        "availability": {
            **asdict(result.availability),
            "fraction_during_faults": result.availability.fraction_during_faults,
        },
    }
    if outcome.delayed is not None:
        d = outcome.delayed
        report["delayed"] = {
            "acked": d.acked, "failed": d.failed, "unknown": d.unknown, "fired": d.fired,
            "seen": d.seen, "lateness_ms": d.lateness(),
            "anomalies": {kind: len(items) for kind, items in d.found.items()},
        }  # fmt: skip
    (outcome.directory / "report.json").write_text(json.dumps(report, indent=2))


def print_outcome(outcome: RunOutcome) -> None:
    print(f"chaos run {outcome.directory}")
    print(outcome.result.summary())
    if outcome.delayed is not None:
        print(outcome.delayed.summary())
    if not outcome.converged:
        print("replicas did NOT converge after healing")
    verdict = "OK" if outcome.ok else "ANOMALIES FOUND"
    print(f"{verdict}: seed {outcome.config.seed}; replay: {replay_command(outcome.config)}")


def sweep(base: RunConfig, nemeses: Sequence[str], seeds: Sequence[int]) -> list[RunOutcome]:
    outcomes = []
    for name in nemeses:
        for seed in seeds:
            outcome = run(replace(base, nemeses=(name,), seed=seed))
            print_outcome(outcome)
            outcomes.append(outcome)
    return outcomes


def sweep_table(outcomes: Sequence[RunOutcome]) -> str:
    header = f"{'nemesis':<20} {'seed':>4} {'acked':>6} {'lost':>5} {'dup':>4} {'diverg':>6} "
    header += f"{'other':>5} {'avail':>6} {'conv':>5}"
    lines = [header, "-" * len(header)]
    for o in outcomes:
        c = o.result.counts
        other = sum(n for kind, n in c.items() if kind not in ("lost", "duplicated", "divergent"))
        lines.append(
            f"{','.join(o.config.nemeses):<20} {o.config.seed:>4} {o.result.acked:>6} "
            f"{c['lost']:>5} {c['duplicated']:>4} {c['divergent']:>6} {other:>5} "
            f"{o.result.availability.fraction_during_faults:>6.2f} {o.converged!s:>5}"
        )
    return "\n".join(lines)
