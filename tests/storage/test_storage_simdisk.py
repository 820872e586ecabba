"""The simulated disk keeps the POSIX contract the storage code relies on, and breaks it on a
crash exactly as far as POSIX allows: what was fsynced survives, the rest may not."""

from __future__ import annotations

import errno
import os
import random

import pytest

from storage.simdisk import SimDisk

RW = os.O_RDWR | os.O_CREAT


def test_synced_data_and_names_survive_a_crash() -> None:
    for seed in range(50):
        disk = SimDisk(random.Random(seed))
        disk.makedirs("/d")
        fd = disk.open("/d/f", RW)
        disk.pwritev(fd, [b"hello ", b"world"], 0)
        disk.fsync(fd)
        dirfd = disk.open("/d", os.O_RDONLY | os.O_DIRECTORY)
        disk.fsync(dirfd)
        root = disk.open("/", os.O_RDONLY | os.O_DIRECTORY)
        disk.fsync(root)
        disk.pwritev(fd, [b"!" * 100], 11)  # never synced
        disk.crash()
        content = disk.read_file("/d/f")
        assert content is not None and content[:11] == b"hello world"
        assert len(content) <= 111


def test_unsynced_writes_and_names_may_vanish_or_tear() -> None:
    outcomes = set()
    for seed in range(200):
        disk = SimDisk(random.Random(seed))
        fd = disk.open("/f", RW)
        disk.pwritev(fd, [b"x" * 64], 0)
        disk.crash()
        content = disk.read_file("/f")
        outcomes.add("gone" if content is None else "torn" if content != b"x" * 64 else "kept")
    assert outcomes == {"gone", "torn", "kept"}


def test_a_rename_is_atomic_on_a_crash() -> None:
    for seed in range(100):
        disk = SimDisk(random.Random(seed))
        fd = disk.open("/a.tmp", RW)
        disk.write_all(fd, b"new")
        disk.fsync(fd)
        disk.close(fd)
        disk.replace("/a.tmp", "/a")
        disk.crash()
        names = set(disk.listdir("/"))
        assert names in ({"a"}, {"a.tmp"}, set())  # never both, and "a" only whole
        if "a" in names:
            assert disk.read_file("/a") == b"new"


def test_a_failed_fsync_loses_its_writes_even_if_a_later_one_succeeds() -> None:
    # fsyncgate, as Linux does it: a retried fsync succeeds without writing the lost pages
    lost = 0
    for seed in range(50):
        disk = SimDisk(random.Random(seed))
        fd = disk.open("/f", RW)
        disk.fsync(disk.open("/", os.O_RDONLY | os.O_DIRECTORY))
        disk.pwritev(fd, [b"data"], 0)
        disk.fail("fsync", errno.EIO)
        with pytest.raises(OSError):
            disk.fsync(fd)
        assert disk.pread(fd, 4, 0) == b"data"  # the cache still shows it
        disk.fsync(fd)
        disk.crash()
        lost += disk.read_file("/f") != b"data"
    assert lost == 50


def test_flip_changes_one_bit() -> None:
    disk = SimDisk(random.Random(1))
    fd = disk.open("/f", RW)
    disk.pwritev(fd, [bytes(32)], 0)
    disk.fsync(fd)
    where = disk.flip("/f")
    data = disk.pread(fd, 32, 0)
    assert sum(bin(byte).count("1") for byte in data) == 1 and data[where] != 0
