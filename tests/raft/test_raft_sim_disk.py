"""The Raft simulator on the real storage over a simulated disk (`--disk sim`): each host's log is
a `SegmentedLog` and its hard state a `StateJournal` on its own `SimDisk`, a crash loses or tears
every unsynced write and the host restarts through the real recovery; writes and fsyncs fail
(EIO, ENOSPC) and the host fail-stops. A sweep stays at zero violations, a seed replays exactly,
and a storage whose flush claims durability without an fsync (`sim-lying-fsync`, test only) or
which retries a failed fsync (`sim-retries-fsync`, fsyncgate) is caught."""

from __future__ import annotations

import errno
import logging
import random

import pytest

from raft.codec import encode_config_entry
from raft.sim.checker import Violation
from raft.sim.cluster import IO_ERROR_RATES, io_error_rate_of
from raft.sim.disk import DiskDamaged, DiskStore
from raft.sim.runner import run_seed, sweep
from raft.storage_log import SIDECAR_NAME, SegmentedRaftLog
from raft.types import ConfigChange, ConfigChangeOp, Configuration, Entry, EntryKind, HardState
from storage import FileHandles, LogConfig, SegmentedLog, StorageFailed
from storage.simdisk import SimDisk

SWEEP_SEEDS = range(0, 40)
STEPS = 2000


@pytest.fixture(autouse=True)
def _quiet_recovery(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="flotilla.storage")  # every crash logs a torn tail


def test_the_sidecar_lives_on_the_logs_disk() -> None:
    """`raft.configs` goes through `SegmentedLog.disk`: on a SimDisk no real file is touched,
    and the listing survives a crash once written (it is written durably, before the entry)."""
    disk = SimDisk(random.Random(7))
    config = Configuration(frozenset({"a", "b", "c"}), frozenset({"d"}))
    data = encode_config_entry(ConfigChange(ConfigChangeOp.ADD_LEARNER, "d"), config)
    log = SegmentedRaftLog(
        SegmentedLog("/g/log", LogConfig(segment_bytes=4096), handles=FileHandles(disk=disk))
    )
    log.append(
        [Entry(1, 1, EntryKind.NORMAL, 1, b"x", 0), Entry(2, 1, EntryKind.CONFIG, 0, data, 0)]
    )
    log.sync()
    assert disk.kind(f"/g/log/{SIDECAR_NAME}") == "file"
    disk.crash()
    reopened = SegmentedRaftLog(
        SegmentedLog("/g/log", LogConfig(segment_bytes=4096), handles=FileHandles(disk=disk))
    )
    assert [e.index for e in reopened.config_entries()] == [2]


def test_a_sweep_on_the_simulated_disk_has_no_violation() -> None:
    summary = sweep(SWEEP_SEEDS, STEPS, (3, 5), disk="sim")
    for failure in summary.failures:
        print(failure.violation, failure.detail, failure.replay)
    print(*summary.lines(), sep="\n")
    assert summary.seeds == len(SWEEP_SEEDS)
    assert summary.failures == []
    assert summary.stats["crashes"] > 100  # the disks were crashed, and recovered, many times
    assert summary.stats["commits"] > 1000
    assert summary.stats["fail_stops"] > 0  # bit flips were found, and those hosts stayed down
    assert summary.stats["io_fail_stops"] > 10  # writes and fsyncs failed, the hosts stopped


def test_a_bit_flipped_at_rest_keeps_the_host_down() -> None:
    """A flip in a segment's first entry, with a valid entry after it, is refused on reopen
    (`DiskDamaged`), not cut off as a torn tail; the same crash without a flip reopens."""
    store = DiskStore("n1", random.Random(5), "sim")
    log, _ = store.open()
    log.append([Entry(i, 1, EntryKind.NORMAL, 1, b"batch %d" % i, 0) for i in range(1, 6)])
    log.sync()
    store.save(HardState(1, "n1", 5))
    log, state = store.crash(log)
    assert (log.last_index, log.durable_last_index, state) == (5, 5, HardState(1, "n1", 5))
    with pytest.raises(DiskDamaged):
        store.crash(log, flip=True)
    assert len(store.flipped) == 1


def test_a_seed_replays_exactly_on_the_simulated_disk() -> None:
    first = run_seed(3, STEPS, 5, disk="sim")
    second = run_seed(3, STEPS, 5, disk="sim")
    assert first.violation is None
    assert first.stats["crashes"] > 0
    assert first == second
    assert "--disk sim" in first.replay


def test_a_flush_that_does_not_fsync_is_caught() -> None:
    """The mutation: `durable_index` advances but the bytes stay in the page cache, so a crash
    takes back acknowledged entries and the checker sees a committed entry lost."""
    summary = sweep(range(0, 10), STEPS, (3, 5), disk="sim-lying-fsync")
    kinds = {failure.violation for failure in summary.failures}
    print(*summary.lines(), sep="\n")
    assert len(summary.failures) >= 3
    assert kinds <= {"durability-claim", "lost-commit", "leader-completeness", "log-matching"}


@pytest.mark.parametrize("mode", ["sim", "sim-retries-fsync"])
def test_a_failed_fsync_stops_the_log_and_a_retried_one_is_caught(mode: str) -> None:
    """After a failed fsync the writes it covered are gone from the kernel's dirty pages
    (fsyncgate). The real log refuses every later flush (the host fail-stops); the mutation
    retries, the retry succeeds with nothing left to write, and the next crash shows the lie:
    entries the log called durable are gone (`durability-claim`)."""
    store = DiskStore("n1", random.Random(5), mode)
    log, _ = store.open()
    log.append([Entry(i, 1, EntryKind.NORMAL, 1, b"batch %d" % i, 0) for i in range(1, 4)])
    log.sync()
    log.append([Entry(i, 1, EntryKind.NORMAL, 1, b"batch %d" % i, 0) for i in range(4, 7)])
    store.disk.fail("fsync", errno.EIO)
    if mode == "sim":
        with pytest.raises(StorageFailed):
            log.sync()
        assert log.durable_last_index == 3
        reopened, _ = store.crash(log)  # what it claimed durable (3 entries) is there
        assert reopened.durable_last_index >= 3
        return
    log.sync()  # the mutation: retried, "succeeds"
    assert log.durable_last_index == 6
    with pytest.raises(Violation, match=r"durability-claim.*entry 6"):
        store.crash(log)


def test_a_storage_that_retries_a_failed_fsync_is_caught_by_the_sweep() -> None:
    """On the seeds whose disks fail most (1% of writes and fsyncs in chaos phases)."""
    seeds = [seed for seed in range(200) if io_error_rate_of(seed) == max(IO_ERROR_RATES)][:10]
    summary = sweep(seeds, STEPS, (3, 5), disk="sim-retries-fsync")
    kinds = {failure.violation for failure in summary.failures}
    print(*summary.lines(), sep="\n")
    assert len(summary.failures) >= 2
    assert kinds <= {"durability-claim", "storage-recovery", "lost-commit"}


def test_seeds_that_found_a_journal_lost_with_its_new_directory_stay_clean() -> None:
    """Seeds 20548 and 20632 (3 nodes) found two leaders in term 1: a vote saved in a state
    journal whose directory was made just before (and never fsynced into its parent) vanished
    with it on a crash. Seed 20025 (5 nodes) found the harness flipping a bit in a log the crash
    had taken. The storage test pins the journal fix; these replay the runs that found them."""
    results = [run_seed(seed, 2000, nodes, disk="sim") for seed, nodes in SOAK_FINDS]
    assert [(r.seed, r.violation) for r in results] == [(s, None) for s, _ in SOAK_FINDS]


SOAK_FINDS = ((20548, 3), (20632, 3), (20025, 5))
