"""The disk nemesis's harness: per-node fault-control files, read by a real process through
FLOTILLA_DISK_FAULTS, and a nemesis that insists on fail-stop (exit code 75)."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.disk import DISK_FAULTS, FAULTS_ENV, DiskFault, DiskFaultCluster
from chaos.history import EventType, HistoryWriter
from chaos.nemesis import Nemesis
from chaos.network import ChaosNetwork
from cluster.local import NodeSpec

# A stand-in node for the harness alone (the real nodes run in the end-to-end sweep): it polls
# its control file and stops with 75 when a fault is armed, or ignores faults when told to.
NODE = """
import json, os, sys, time
path = os.environ["FLOTILLA_DISK_FAULTS"]
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    faults = json.loads(open(path).read() or "{}")
    if faults and sys.argv[1] == "stops":
        print("CRITICAL fault", faults, flush=True)
        sys.exit(75)
    time.sleep(0.02)
"""


class StandInCluster(DiskFaultCluster):
    def __init__(self, root: Path, behaviour: str) -> None:
        super().__init__(root, 3)
        self.script = root / "node.py"
        self.script.write_text(NODE)
        self.behaviour = behaviour

    def command(self, spec: NodeSpec) -> list[str]:
        environment = super().command(spec)[:2]  # env FLOTILLA_DISK_FAULTS=<its file>
        return [*environment, sys.executable, str(self.script), self.behaviour]

    def wait_serving(self, node_id: str, timeout_s: float = 30.0) -> None:
        pass  # no gRPC in the stand-in


class OnePartitionOnN2:
    """What the nemesis asks of the cluster's client: the topic's replicas (here: n2 alone)."""

    def describe_topic(self, topic: str) -> SimpleNamespace:
        return SimpleNamespace(partitions=[SimpleNamespace(index=0, replicas=["n2"])])


def test_the_faults_cover_eio_and_enospc_on_write_and_fsync() -> None:
    assert {(f.operation, f.error) for f in DISK_FAULTS} == {
        ("fsync", "EIO"), ("fsync", "ENOSPC"), ("write", "EIO"), ("write", "ENOSPC"),
    }  # fmt: skip
    assert json.loads(DiskFault("fsync", "EIO").to_json()) == {"fsync": "EIO"}


def test_each_node_gets_its_own_control_file_cleared_at_start(tmp_path: Path) -> None:
    cluster = DiskFaultCluster(tmp_path, 3)
    commands = {n: cluster.command(spec) for n, spec in cluster.nodes.items()}
    for node_id, command in commands.items():
        assert command[:2] == ["env", f"{FAULTS_ENV}={tmp_path / f'{node_id}.disk-faults.json'}"]
        assert command[2:5] == [sys.executable, "-m", "flotilla"]
    cluster.arm("n2", DiskFault("write", "ENOSPC"))
    assert json.loads(cluster.control_file("n2").read_text()) == {"write": "ENOSPC"}
    cluster.clear("n2")
    assert json.loads(cluster.control_file("n2").read_text()) == {}
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("behaviour", ["stops", "goes-on"])
def test_the_disk_nemesis_requires_exit_75_and_restarts_the_node(
    tmp_path: Path, behaviour: str
) -> None:
    cluster = StandInCluster(tmp_path, behaviour)
    history = HistoryWriter(tmp_path / "history.jsonl")
    nemesis = Nemesis(
        cluster, ChaosNetwork(tmp_path), OnePartitionOnN2(), "t", history, 1,  # type: ignore[arg-type]
        fail_stop_timeout_s=1.0,
    )  # fmt: skip
    try:
        cluster.start(wait=False)
        what, heal = nemesis.inject("disk", random.Random(1))
        target = what.split()[1]
        assert target == "n2"  # the node holding replicas: the one the workload writes to
        assert json.loads(cluster.control_file(target).read_text()) == {}  # cleared at once
        assert not cluster.is_running(target)
        checks = [e for e in history.events if e.f == "fault-check"]
        if behaviour == "stops":
            assert what.endswith("exit code 75") and not checks
        else:  # a node that goes on after a storage error is an anomaly for the checker
            assert what.endswith("exit code None")
            assert [e.type for e in checks] == [EventType.FAIL]
            assert f"{target} was still running 1 s after" in checks[0].value
        heal()
        assert cluster.is_running(target)
    finally:
        history.close()
        cluster.close()
    assert all(not cluster.is_running(n) for n in cluster.nodes)
    assert os.path.exists(tmp_path / "history.jsonl")
