"""Atomic, durable small-file writes: temp file + fsync + rename + fsync of the directory."""

from __future__ import annotations

import os

from storage.disk import OS_DISK, Disk

__all__ = ["fsync_directory", "write_atomic"]


def fsync_directory(directory: str, disk: Disk = OS_DISK) -> None:
    """Makes the names in `directory` (created, renamed, removed) durable."""
    fd = disk.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        disk.fsync(fd)
    finally:
        disk.close(fd)


def write_atomic(path: str, data: bytes, disk: Disk = OS_DISK) -> None:
    """Replaces `path` with `data` so that a crash leaves either the old or the new content;
    durable on return."""
    temp = path + ".tmp"
    fd = disk.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        disk.write_all(fd, data)
        disk.fsync(fd)
    finally:
        disk.close(fd)
    disk.replace(temp, path)
    fsync_directory(os.path.dirname(path) or ".", disk)
