"""The clean-shutdown marker: which replicas' logs the last process closed, each flushed.

A graceful stop closes every log (`SegmentedLog.close` flushes it) and only then writes the
marker, durably, naming those groups. The next start takes it before any replica opens, and
removes it durably at once, so that a crash of the new process is never taken for a clean stop;
the opener then opens each named log once as `durable`, skipping recovery's fsync of its active
segment (Kafka's clean-shutdown file). A group not named (a replica quarantined, failed, or not
hosted at the stop) is recovered as after a crash.
"""

from __future__ import annotations

import os

from storage.atomic import fsync_directory, write_atomic

__all__ = ["MARKER_NAME", "mark_clean_shutdown", "take_clean_shutdown"]

MARKER_NAME = "CLEAN_SHUTDOWN"


def mark_clean_shutdown(data_dir: str, groups: list[str]) -> None:
    """After every log named in `groups` was closed: the marker, written atomically."""
    write_atomic(os.path.join(data_dir, MARKER_NAME), "\n".join(groups).encode())


def take_clean_shutdown(data_dir: str) -> set[str]:
    """Before any replica opens: the groups the last process closed cleanly (empty without a
    marker), the marker removed durably."""
    path = os.path.join(data_dir, MARKER_NAME)
    try:
        with open(path, "rb") as file:
            groups = {group for group in file.read().decode().split("\n") if group}
    except FileNotFoundError:
        return set()
    os.unlink(path)
    fsync_directory(data_dir)
    return groups
