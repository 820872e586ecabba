"""Keeps large buffers on the heap instead of fresh `mmap`s (glibc only; elsewhere a no-op).

A node moves batches of up to megabytes through several buffers each (the request, the frame to
each follower, the read for a consumer). glibc serves an allocation above its mmap threshold
(128 KiB until the first such buffer is freed) with a fresh mapping, and every page of a fresh
mapping costs a page fault when first touched: about a quarter of a millisecond per MiB, paid for
every copy of every batch. Measured with 3 local nodes and 1 MiB batches: the leader spent 25-30%
less CPU and throughput rose by a fifth when large buffers were reused from the heap.

`tune()` raises the mmap threshold to the largest glibc accepts (32 MiB, above any message a node
takes) and keeps up to 256 MiB of freed heap instead of returning it to the kernel at once. The
cost is memory: the heap keeps what the busiest moment needed, as a JVM keeps its heap.

`tune_collector()` sets the cyclic garbage collector's thresholds for a node's heap: millions of
long-lived objects (tens of thousands of replicas) beside a churn of short-lived ones (messages,
Readies, frames) that live a round or two. With Python's default young-generation threshold (700
allocations) nearly everything alive across a round is promoted to the old generation, and each
time promotions reach a quarter of it the whole heap is scanned: measured (py-spy --native) on a
node of 5 electing 10,000 partitions, `gc_collect_main` took half its CPU. A young generation of
`GC_YOUNG_THRESHOLD` objects lets a round's objects die young; nothing else changes (reference
counting still frees acyclic objects at once, cycles still go).

`watch_collector()` logs each collection of the old generation that held the process for
`GC_PAUSE_LOG_S` or more (`gc_pause`, with its duration and the objects it freed): such a
pause holds the event loop, its ticks and SWIM answers as a stall does, and at 100,000
partitions a node's heap holds millions of objects.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

from cluster.logs import event

__all__ = [
    "GC_PAUSE_LOG_S",
    "GC_YOUNG_THRESHOLD",
    "tune",
    "tune_collector",
    "unwatch_collector",
    "watch_collector",
]

log = logging.getLogger("flotilla.allocator")

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's ceiling for this setting on 64-bit
TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024
TOP_PAD_BYTES = 16 * 1024 * 1024
# the collector's generation thresholds: allocations (net of frees) before a young collection,
# young collections before a middle one, middle ones before the old generation is considered
GC_YOUNG_THRESHOLD = 50_000
GC_MIDDLE_THRESHOLD = 20
GC_OLD_THRESHOLD = 10
GC_PAUSE_LOG_S = 0.1  # an old-generation collection this long or longer is logged


def tune() -> bool:
    """Applies the settings; True if the C library took all of them."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    results = [
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
        mallopt(_M_TOP_PAD, TOP_PAD_BYTES),
    ]
    if not all(results):
        log.info("the C library refused some allocator settings: %s", results)
    return all(results)


def tune_collector() -> None:
    """Sets the collector's thresholds for a node's heap (see the module docstring)."""
    gc.set_threshold(GC_YOUNG_THRESHOLD, GC_MIDDLE_THRESHOLD, GC_OLD_THRESHOLD)


def watch_collector(
    threshold_s: float = GC_PAUSE_LOG_S, clock: Callable[[], float] = time.perf_counter
) -> Callable[[str, dict[str, Any]], None]:
    """Logs each old-generation collection that took `threshold_s` or more (see the module
    docstring); returns the callback it registered in `gc.callbacks`. Once a process: a process
    that runs several nodes (`flotilla dev`) calls it for each, and gets the one callback."""
    global _watching
    if _watching is not None:
        return _watching
    started = [0.0]

    def on_collection(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = clock()
            return
        took = clock() - started[0]
        if info.get("generation") == 2 and took >= threshold_s and not sys.is_finalizing():
            event(
                log, "gc_pause", level=logging.WARNING, generation=2, seconds=round(took, 3),
                collected=info.get("collected", 0),
            )  # fmt: skip

    gc.callbacks.append(on_collection)
    _watching = on_collection
    return on_collection


def unwatch_collector() -> None:
    """Removes the callback `watch_collector` registered, if any (a test's clean-up)."""
    global _watching
    if _watching is not None:
        gc.callbacks.remove(_watching)
        _watching = None


_watching: Callable[[str, dict[str, Any]], None] | None = None
