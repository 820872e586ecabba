"""cluster.allocator: a node's large buffers come from the heap, not from fresh mappings."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Counts the process's memory mappings before and while a 20 MiB buffer is alive: a buffer
# served by its own mmap adds a mapping; one served from the heap only grows [heap].
PROBE = """
import sys
sys.path.insert(0, {root!r})
from cluster import allocator
tuned = {tune} and allocator.tune()
def mappings():
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)
before = mappings()
buffer = bytes(20 * 1024 * 1024)
print(tuned, mappings() - before)
"""

glibc_only = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not Path("/proc/self/maps").exists(),
    reason="the allocator settings are glibc's (and the probe reads Linux's /proc)",
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
    tuned, new_mappings = _probe(tune=True)
    assert tuned
    assert new_mappings == 0


@glibc_only
def test_the_probe_sees_the_fresh_mapping_an_untuned_process_makes() -> None:
    # the checker above can fail: without the settings, the same buffer is a mapping of its own
    tuned, new_mappings = _probe(tune=False)
    assert not tuned
    assert new_mappings >= 1
