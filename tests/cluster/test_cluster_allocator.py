"""cluster.allocator: a node's large buffers come from the heap, not from fresh mappings."""

from __future__ import annotations

import gc
import logging
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import allocator

ROOT = Path(__file__).resolve().parents[2]

# Measures the bytes glibc holds in mmapped chunks (mallinfo2's hblkhd) before and while a 20 MiB
# buffer is alive: a buffer served by its own mmap adds 20 MiB there; one from the heap adds 0.
PROBE = """
import ctypes, sys
sys.path.insert(0, {root!r})
from cluster import allocator
tuned = {tune} and allocator.tune()
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
mallinfo2.restype = Info
before = mallinfo2().hblkhd
buffer = bytes(20 * 1024 * 1024)
print(tuned, (mallinfo2().hblkhd - before) // (1024 * 1024))
"""

glibc_only = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="the allocator settings and the probe (mallinfo2) are glibc's",
)


def _probe(tune: bool) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(root=str(ROOT), tune=tune)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    return out[0] == "True", int(out[1])


@glibc_only
def test_a_large_buffer_comes_from_the_heap_once_tuned() -> None:
    tuned, mapped_mib = _probe(tune=True)
    assert tuned
    assert mapped_mib == 0


@glibc_only
def test_the_probe_sees_the_fresh_mapping_an_untuned_process_makes() -> None:
    # the checker above can fail: without the settings, the same buffer is a mapping of its own
    tuned, mapped_mib = _probe(tune=False)
    assert not tuned
    assert mapped_mib >= 20


# A node's heap in miniature: long-lived objects (its replicas) and rounds whose objects live
# two rounds (messages, Readies); prints the old-generation collections the rounds cost.
ROUNDS = """
import collections, gc, sys
sys.path.insert(0, {root!r})
from cluster import allocator
if {tune}:
    allocator.tune_collector()
replicas = [[i] for i in range(200_000)]
rounds = collections.deque(maxlen=2)
gc.collect()
before = gc.get_stats()[2]["collections"]
for _ in range(300):
    rounds.append([[i] for i in range(5_000)])
print(gc.get_stats()[2]["collections"] - before)
"""


def _old_collections(tune: bool) -> int:
    out = subprocess.run(
        [sys.executable, "-c", ROUNDS.format(root=str(ROOT), tune=tune)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return int(out)


def test_a_tuned_collector_lets_a_round_s_objects_die_young() -> None:
    # untuned, the rounds' objects are promoted and the whole heap is scanned again and again
    # (the checker's own proof that it can fail); tuned, they die in the young generation
    untuned, tuned = _old_collections(tune=False), _old_collections(tune=True)
    assert untuned >= 5, untuned
    assert tuned <= 1, (tuned, untuned)


def test_a_long_old_generation_collection_is_logged_and_a_short_one_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`watch_collector` logs `gc_pause` for an old-generation collection of at least its
    threshold (a pause that holds the loop as a stall does), not for a shorter one nor for a
    young one; the clock is the test's."""
    now = [0.0]
    allocator.unwatch_collector()
    callback = allocator.watch_collector(threshold_s=0.1, clock=lambda: now[0])
    assert allocator.watch_collector() is callback  # once a process
    try:
        caplog.set_level(logging.WARNING, logger="flotilla.allocator")
        for generation, took in ((2, 0.05), (0, 0.5), (2, 0.25)):
            callback("start", {"generation": generation})
            now[0] += took
            callback("stop", {"generation": generation, "collected": 7})
        pauses = [r for r in caplog.records if r.getMessage() == "gc_pause"]
        assert [r.fields for r in pauses] == [  # type: ignore[attr-defined]
            {"generation": 2, "seconds": 0.25, "collected": 7}
        ]
    finally:
        allocator.unwatch_collector()
    assert callback not in gc.callbacks
