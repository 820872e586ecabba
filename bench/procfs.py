"""A process's CPU time, resident memory and open files, read from /proc (Linux): what the
benchmarks sample of the node processes they start."""

from __future__ import annotations

import os

__all__ = ["CLOCK_TICKS", "cpu_seconds", "open_files", "rss_mb"]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def rss_mb(pid: int) -> float:
    """Resident memory, MiB."""
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))
