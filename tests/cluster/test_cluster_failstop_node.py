"""Fail-stop on a real node process: a write its disk refuses ends the process with exit code 75
(`cluster.failstop`), after one CRITICAL line; a restart recovers, keeps every acknowledged
record and serves again.

The disk is made to refuse writes a real way: the node's file-size limit (RLIMIT_FSIZE) is
lowered under it, so a write that would grow a file past it fails with EFBIG (Python ignores
SIGXFSZ), exactly as the kernel reports it, on whatever file the node writes next."""

from __future__ import annotations

import json
import os
import resource
import subprocess
from functools import partial
from pathlib import Path

import pytest
from harness import wait_until

from cluster.failstop import FAIL_STOP_EXIT_CODE
from cluster.local import LocalCluster
from flotilla import Client, FlotillaError

pytestmark = pytest.mark.integration

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
HEADROOM_BYTES = 256 * 1024  # what every file the node has may still grow by


def _largest_file(*roots: Path) -> int:
    sizes = [0]
    for root in roots:
        for directory, _, names in os.walk(root):
            for name in names:
                try:
                    sizes.append(os.path.getsize(os.path.join(directory, name)))
                except FileNotFoundError:
                    pass
    return max(sizes)


def _holds_at_least(client: Client, count: int) -> bool:
    return len(client.read("hooked", 0, 0, 100)) >= count


def test_a_node_whose_disk_refuses_a_write_exits_75_and_restarts_clean(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 1, config_text=CONFIG) as cluster:
        cluster.start()
        spec = cluster.nodes["n1"]
        with Client(cluster.addresses(), timeout_s=30) as client:
            client.create_topic("disk", partitions=1, replication_factor=1)
            acknowledged = [client.produce("disk", f"v{n}".encode(), partition=0) for n in range(5)]
            assert [m.offset for m in acknowledged] == [0, 1, 2, 3, 4]
            process = spec.process
            assert process is not None and spec.log_path is not None
            limit = _largest_file(spec.data_dir, spec.log_path) + HEADROOM_BYTES
            resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (limit, limit))
        # a record larger than the headroom: the leader's append cannot fit under the limit
        with Client(cluster.addresses(), timeout_s=5) as client, pytest.raises(FlotillaError):
            client.produce("disk", b"x" * (2 * HEADROOM_BYTES), partition=0)
        try:
            returncode = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the node went on after its disk refused a write")
        log_text = spec.log_path.read_text(errors="replace")
        assert returncode == FAIL_STOP_EXIT_CODE, log_text[-3000:]
        # one CRITICAL line for one failure (storage reports it at ERROR)
        critical = [line for line in log_text.splitlines() if "level=critical" in line]
        assert len(critical) == 1 and "logger=flotilla.failstop" in critical[0], log_text[-3000:]
        assert "event=fail_stop" in critical[0], critical
        assert "disk/0" in critical[0] and ".log" in critical[0], critical  # replica, file
        errors = [line for line in log_text.splitlines() if "event=storage_error" in line]
        assert len(errors) == 1 and "level=error" in errors[0], log_text[-3000:]
        assert "partitions/disk/0" in errors[0] and "short write" in errors[0], errors
        # a restart (without the limit) recovers: every acknowledged record, and new writes
        cluster.start("n1")
        with Client(cluster.addresses(), timeout_s=30) as client:
            wait_until(
                lambda: len(client.read("disk", 0, 0, 100)) >= 5,
                30,
                "the acknowledged records after the restart",
            )
            records = client.read("disk", 0, 0, 100)
            assert [(r.offset, r.value) for r in records[:5]] == [
                (n, f"v{n}".encode()) for n in range(5)
            ]
            assert all(len(r.value) < HEADROOM_BYTES for r in records)  # the refused one is gone
            assert client.produce("disk", b"after", partition=0).offset == len(records)


def test_disk_faults_from_the_hook_stop_the_node_with_75_and_a_restart_recovers(
    tmp_path: Path,
) -> None:
    """The storage fault hook (`FLOTILLA_DISK_FAULTS`, as the chaos disk nemesis arms it): an
    fsync failing with EIO, then a write failing with ENOSPC; each time the node exits with 75,
    and once the fault is cleared it restarts with every acknowledged record."""
    control = tmp_path / "faults.json"
    env = {"FLOTILLA_DISK_FAULTS": str(control)}
    with LocalCluster(tmp_path / "cluster", 1, config_text=CONFIG, env=env) as cluster:
        cluster.start()
        spec = cluster.nodes["n1"]
        expected: list[bytes] = []
        with Client(cluster.addresses(), timeout_s=30) as client:
            client.create_topic("hooked", partitions=1, replication_factor=1)
        for fault in ({"fsync": "EIO"}, {"write": "ENOSPC"}):
            with Client(cluster.addresses(), timeout_s=30) as client:
                for _ in range(3):
                    value = f"{len(expected)}".encode()
                    assert client.produce("hooked", value, partition=0).offset == len(expected)
                    expected.append(value)
            process = spec.process
            assert process is not None and spec.log_path is not None
            control.write_text(json.dumps(fault))
            with Client(cluster.addresses(), timeout_s=5) as client, pytest.raises(FlotillaError):
                client.produce("hooked", b"refused", partition=0)
            try:
                returncode = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the node went on after {fault}")
            log_text = spec.log_path.read_text(errors="replace")
            assert returncode == FAIL_STOP_EXIT_CODE, log_text[-3000:]
            control.write_text("{}")
            cluster.start("n1")
            with Client(cluster.addresses(), timeout_s=30) as client:
                wait_until(
                    partial(_holds_at_least, client, len(expected)),
                    30,
                    f"the acknowledged records after {fault}",
                )
                values = [r.value for r in client.read("hooked", 0, 0, 100)]
                # every acknowledged record; the refused one had an unknown outcome (after a
                # failed fsync its write may still be in the file, and recovery keeps it)
                assert values[: len(expected)] == expected, (fault, values)
                assert values[len(expected) :] in ([], [b"refused"]), (fault, values)
                expected = values
        stops = log_text.count("event=fail_stop")
        assert stops == 2, log_text[-3000:]  # one line per fail-stop, in the appended log
        assert log_text.count("level=critical") == 2, log_text[-3000:]  # and no other


def test_a_state_journal_that_cannot_be_replayed_stops_the_node_with_75(tmp_path: Path) -> None:
    """At startup: the journal's torn tail must be cut and fsynced, and the fsync fails (EIO from
    the fault hook). The node ends with 75 after one CRITICAL line naming the journal, as for any
    storage failure, not with 1 as for a bad command line; once the fault is cleared it starts."""
    control = tmp_path / "faults.json"
    env = {"FLOTILLA_DISK_FAULTS": str(control)}
    with LocalCluster(tmp_path / "cluster", 1, config_text=CONFIG, env=env) as cluster:
        cluster.start()
        spec = cluster.nodes["n1"]
        with Client(cluster.addresses(), timeout_s=30) as client:
            client.create_topic("journaled", partitions=1, replication_factor=1)
            assert client.produce("journaled", b"kept", partition=0).offset == 0
        cluster.stop("n1")
        journal = spec.data_dir / "raft-state.journal"
        with open(journal, "ab") as file:
            file.write(b"\x07\x00")  # a torn record: replay cuts it, and fsyncs the cut
        control.write_text(json.dumps({"fsync": "EIO"}))
        cluster.start("n1", wait=False)
        process = spec.process
        assert process is not None and spec.log_path is not None
        try:
            returncode = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the node started on a journal it could not repair")
        log_text = spec.log_path.read_text(errors="replace")
        assert returncode == FAIL_STOP_EXIT_CODE, log_text[-3000:]
        critical = [line for line in log_text.splitlines() if "level=critical" in line]
        assert len(critical) == 1 and "raft-state.journal" in critical[0], log_text[-3000:]
        control.write_text("{}")
        cluster.start("n1")
        with Client(cluster.addresses(), timeout_s=30) as client:
            wait_until(
                lambda: [r.value for r in client.read("journaled", 0, 0, 10)] == [b"kept"],
                30,
                "the record after the restart",
            )


def test_a_damaged_state_journal_stops_the_node_with_75_naming_it(tmp_path: Path) -> None:
    """A bad record with a valid one after it (storage refuses it: `DamagedLog`): the node must
    not start without the terms and votes it promised; it stops through fail-stop with one
    CRITICAL line naming the journal, not with a traceback."""
    with LocalCluster(tmp_path, 1, config_text=CONFIG) as cluster:
        cluster.start()
        spec = cluster.nodes["n1"]
        with Client(cluster.addresses(), timeout_s=30) as client:
            client.create_topic("journaled", partitions=2, replication_factor=1)
            client.produce("journaled", b"kept", partition=0)
        cluster.stop("n1")
        journal = spec.data_dir / "raft-state.journal"
        data = bytearray(journal.read_bytes())
        assert len(data) > 40, len(data)
        data[14] ^= 0x01  # inside the first record's body: records follow it
        journal.write_bytes(bytes(data))
        cluster.start("n1", wait=False)
        process = spec.process
        assert process is not None and spec.log_path is not None
        try:
            returncode = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the node started on a damaged journal")
        log_text = spec.log_path.read_text(errors="replace")
        assert returncode == FAIL_STOP_EXIT_CODE, log_text[-3000:]
        critical = [line for line in log_text.splitlines() if "level=critical" in line]
        assert len(critical) == 1 and "raft-state.journal" in critical[0], log_text[-3000:]
        assert "DamagedLog" in critical[0] and "Traceback" not in log_text, log_text[-3000:]
