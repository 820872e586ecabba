"""The chaos runner end to end on real node processes (3 nodes on 127.0.0.x, proxies per link).

A short sweep (every nemesis at least once, grouped so that the suite stays within its budget)
must find no anomaly; and the checker must fail against nodes broken on purpose (test-only flags):
a leader that acknowledges before commit loses acknowledged writes once it is isolated, and a
replica that serves reads above the commit index shows reads that were never committed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chaos.__main__ import ALL, _names
from chaos.checker import check
from chaos.history import EventType, load_history
from chaos.nemesis import DISK, LINKS, MOVES, NEMESES, PARTITIONS, PROCESS, schedule
from chaos.network import ChaosNetwork
from chaos.run import (
    NODE_CONFIG,
    RunConfig,
    RunOutcome,
    _node_config,
    print_outcome,
    replay_command,
    run,
)
from chaos.workload import WorkloadConfig

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

QUIET_S = (0.5, 1.0)
FAULT_S = (1.5, 2.5)
GROUPS = {
    "partitions": ("partition-random", *PARTITIONS),
    "process": PROCESS,
    "links": LINKS,
    "moves": MOVES,
    "disk": DISK,
}
# churn needs spare nodes and replicas that move within the budget: 5 nodes, replication 3,
# replace_after 2 s; two churns, so that a node is killed while another's replicas are re-added
MOVING: dict[str, Any] = {"nodes": 5, "replace_after_s": 2.0, "max_faults": 2, "duration_s": 9.0}


def short(tmp_path: Path, names: tuple[str, ...], seed: int = 1, **changes: object) -> RunConfig:
    """Long enough for every name in `names` to be scheduled once (see `schedule`)."""
    duration_s = len(names) * (FAULT_S[1] + QUIET_S[1]) + 2.0
    config = RunConfig(
        nodes=3,
        nemeses=names,
        duration_s=duration_s,
        seed=seed,
        root=tmp_path / "chaos-runs",
        workload=WorkloadConfig(producers=2),
        settle_s=2.0,
        quiet_s=QUIET_S,
        fault_s=FAULT_S,
        converge_timeout_s=45.0,
        max_faults=len(names),  # each nemesis once: the suite's time budget
    )
    return replace(config, **changes)  # type: ignore[arg-type]


def sweep_config(tmp_path: Path, group: str) -> RunConfig:
    names = GROUPS[group]
    if group == "process":  # kills and pauses with a consumer group reading (chaos.group_checker)
        return short(tmp_path, names, group_members=2)
    return short(tmp_path, names, **(MOVING if group == "moves" else {}))


def test_the_groups_cover_every_nemesis_and_each_is_scheduled() -> None:
    assert sorted(n for names in GROUPS.values() for n in names) == sorted(NEMESES)
    for group, names in GROUPS.items():
        config = sweep_config(Path("unused"), group)
        faults = schedule(
            names,
            config.duration_s,
            1,
            quiet_s=QUIET_S,
            fault_s=FAULT_S,
            max_faults=config.max_faults,
        )
        assert sorted({f.name for f in faults}) == sorted(names)
        assert len(faults) == config.max_faults
        assert all(f.start_s + f.duration_s <= config.duration_s for f in faults)
        again = schedule(names, config.duration_s, 1, quiet_s=QUIET_S, fault_s=FAULT_S)
        assert again[: len(faults)] == faults  # the seed fixes the schedule


def report(outcome: RunOutcome) -> str:
    print_outcome(outcome)
    return f"{outcome.result.summary()}\nrun directory: {outcome.directory}"


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_short_sweep_finds_no_anomaly(tmp_path: Path, group: str) -> None:
    outcome = run(sweep_config(tmp_path, group))
    assert outcome.converged, report(outcome)
    assert outcome.result.ok, report(outcome)
    assert outcome.result.acked > 0, report(outcome)
    assert (outcome.directory / "history.jsonl").stat().st_size > 0
    assert (outcome.directory / "report.json").exists()
    if group == "moves":
        churn_moved_replicas_and_would_catch_a_split_brain(outcome)
    if group == "process":  # the group read everything, and its checks ran
        history = load_history(outcome.directory / "history.jsonl")
        assert any(e.f == "drained" for e in history), report(outcome)
        assert "interleaved" in outcome.result.counts, report(outcome)


def churn_moved_replicas_and_would_catch_a_split_brain(outcome: RunOutcome) -> None:
    """The churn run did what it is for (replicas moved away, the node came back), and its own
    history fails the checker once the final logs are what issue 21's split brain leaves: a
    leader elected with the vote of a re-added replica whose log was wiped commits over entries
    the other side had committed, so every replica ends with a log that lacks them."""
    history = load_history(outcome.directory / "history.jsonl")
    targets = [e.value for e in history if e.f == "fault-target"]
    assert len(targets) == 2 and all("moved away" in t and "NOT" not in t for t in targets), targets
    final = {
        int(p): {r: [tuple(pair) for pair in log] for r, log in logs.items()}
        for p, logs in json.loads((outcome.directory / "final-logs.json").read_text()).items()
    }
    partition, logs = max(final.items(), key=lambda item: len(max(item[1].values(), key=len)))
    committed = max(logs.values(), key=len)
    acked = {e.value for e in history if e.f == "produce" and e.type is EventType.OK}
    # three acknowledged entries from the middle of the log: the ones the other side committed
    lost = [v for _, v in committed[len(committed) // 2 :] if v in acked][:3]
    assert len(lost) == 3, committed[len(committed) // 2 :][:10]
    rest = [value for _, value in committed if value not in lost]
    split = list(enumerate(rest))
    broken = {**final, partition: dict.fromkeys(logs, split)}
    result = check(history, broken)
    assert result.counts["lost"] == len(lost) and not result.ok, result.summary()


def mutation(tmp_path: Path, flag: str) -> RunConfig:
    """One long isolation of partition 0's leader, four producers. A 3 s election timeout keeps
    the isolated leader leading (and taking writes it cannot commit) for about 3 s; a 1 s produce
    timeout gives up on those writes rather than retrying them at the new leader."""
    return short(
        tmp_path,
        ("isolate-leader",),
        duration_s=10.0,
        fault_s=(6.0, 7.0),
        workload=WorkloadConfig(producers=4, produce_timeout_s=1.0),
        unsafe_flags=(flag,),
        node_config=NODE_CONFIG.replace("election_ticks = 10", "election_ticks = 60"),
    )


def test_ack_before_commit_loses_acknowledged_writes(tmp_path: Path) -> None:
    """The isolated leader acknowledges at its own append; the majority elects a new leader and
    commits other records at those offsets; on healing, the old leader's records are truncated."""
    config = mutation(tmp_path, "--unsafe-ack-before-commit")
    outcome = run(config)
    assert outcome.result.counts["lost"] > 0, report(outcome)
    assert not outcome.ok


def test_reading_above_the_commit_index_shows_phantom_reads(tmp_path: Path) -> None:
    """The isolated leader appends records it can never commit and serves them to its reader.
    A run shows no phantom if the majority elects no new leader during the 6.8 s isolation
    (the isolated leader's timed-out writes are then committed at their offsets after the
    heal), which a loaded machine can make happen; so up to three seeds are tried, and a
    checker blind to phantoms fails all three."""
    reports = []
    for seed in (1, 2, 3):
        config = replace(mutation(tmp_path / f"s{seed}", "--unsafe-read-uncommitted"), seed=seed)
        outcome = run(config)
        if outcome.result.counts["phantom"] > 0:
            assert not outcome.ok
            return
        reports.append(report(outcome))
    raise AssertionError("no phantom read seen on seeds 1-3:\n" + "\n".join(reports))


def test_a_node_that_goes_on_after_a_storage_error_fails_the_disk_sweep(tmp_path: Path) -> None:
    """The mutation: nodes whose fail-stop exit does nothing (tests/chaos/node_without_failstop.py)
    log the failed write or fsync and go on; the disk nemesis sees the node still running and
    the run fails."""
    launcher = (sys.executable, str(Path(__file__).with_name("node_without_failstop.py")))
    config = short(tmp_path, DISK, node_launcher=launcher, fail_stop_timeout_s=5.0)
    outcome = run(config)
    assert outcome.result.counts["faults"] == 1, report(outcome)
    assert "was still running 5 s after" in outcome.result.faults[0]
    assert not outcome.ok


def test_the_uncommitted_read_flag_is_refused_without_the_environment_guard(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FLOTILLA_ALLOW_UNSAFE"}
    command = [sys.executable, "-m", "flotilla", "node", "--id", "n1", "--listen", "127.0.0.1:1"]
    command += ["--data-dir", str(tmp_path), "--unsafe-read-uncommitted"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "FLOTILLA_ALLOW_UNSAFE=1" in done.stderr


def test_command_line_names_nemeses_and_the_replay_command() -> None:
    assert _names("all") == ALL
    assert set(ALL) | set(MOVES) == set(NEMESES) and not set(ALL) & set(MOVES)
    assert set(DISK) <= set(ALL)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown nemeses"):
        _names("kill-leader,meteor")
    config = RunConfig(nodes=5, nemeses=("pause", "ring"), duration_s=60, seed=7)
    assert replay_command(config) == (
        "python -m chaos run --nodes 5 --nemesis pause,ring --duration 60 --seed 7"
    )
    custom = replace(config, fault_s=(1.5, 2.5), max_faults=2, unsafe_flags=("--unsafe-x",))
    assert replay_command(custom).endswith(" --fault-s 1.5,2.5 --max-faults 2 --unsafe-x")
    moving = replace(config, replace_after_s=2.5)
    assert replay_command(moving).endswith(" --seed 7 --replace-after-s 2.5")
    assert _node_config(moving) == NODE_CONFIG + "replace_after_s = 2.5\n"
    assert _node_config(config) == NODE_CONFIG
    assert config.tls  # secure by default; a plaintext run replays as one
    assert replay_command(replace(config, tls=False)).endswith(" --seed 7 --no-tls")


class RecordingNetwork(ChaosNetwork):
    """The link bookkeeping of ChaosNetwork without a Toxiproxy server."""

    def __init__(self, nodes: int) -> None:
        super().__init__(Path("unused"))
        self.ids = tuple(f"n{i}" for i in range(1, nodes + 1))

    @property
    def node_ids(self) -> tuple[str, ...]:
        return self.ids

    def set_link(self, source: str, target: str, enabled: bool) -> None:
        (self.cut.discard if enabled else self.cut.add)((source, target))


def test_partitions_cut_exactly_the_links_between_groups() -> None:
    network = RecordingNetwork(5)
    network.partition([["n1", "n2", "n3"], ["n3", "n4", "n5"]])  # a bridge through n3
    assert not any("n3" in link for link in network.cut)
    assert ("n1", "n4") in network.cut and ("n5", "n2") in network.cut
    assert ("n1", "n2") not in network.cut and len(network.cut) == 8
    network.heal()
    assert not network.cut
    ring = ["n1", "n2", "n3", "n4", "n5"]
    network.partition([[ring[i], ring[(i + 1) % 5]] for i in range(5)])
    for node in ring:  # each node keeps its two neighbours: two reachable, two cut
        assert sum(1 for a, _ in network.cut if a == node) == 2


def test_churn_refuses_a_cluster_without_spare_nodes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"more nodes than the replication factor 3.*--nodes 5"):
        run(short(tmp_path, MOVES))
    assert not (tmp_path / "chaos-runs").exists()  # refused before anything started
