"""The log's header file, `log.meta`, and what recovery reports.

`log.meta` marks a directory as a Flotilla log and records its logical start: the first retained
Raft index, the term of the entry just before it, and the offset of its first record (needed
when no entry is retained). It is replaced atomically, so a crash leaves the old or the new one.

A new log's `log.meta` (start `FRESH_START`) is written without fsync (`write_fresh_meta`):
creating ten thousand logs must not cost ten thousand fsyncs. The log makes it durable with its
first flush, before any entry is durable; its data is never fsynced. A crash can leave that new
file empty or torn (a prefix of its bytes, the rest cut off or zeros: a file system shows zeros,
never stale data, where a new file's bytes did not reach the disk); so such a `log.meta` reads as
`FRESH_START`, the only start a non-durable header can hold (every other start is written with
`write_meta`, atomically and durably, so it is whole). Anything else that does not parse is
refused.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from storage.atomic import write_atomic
from storage.disk import OS_DISK, Disk
from storage.errors import CorruptLog, NotALogDirectory

__all__ = [
    "FRESH_START",
    "META_NAME",
    "RecoveryReport",
    "read_meta",
    "segment_bases",
    "write_fresh_meta",
    "write_meta",
]

META_NAME = "log.meta"
_META_FORMAT = "flotilla-log/1"
_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
FRESH_START = (1, 0, 0)  # (start_index, start_term, start_offset) of a new log


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening the log repaired. Empty when the log was closed cleanly."""

    torn_tail: str | None = None
    truncated_bytes: int = 0
    rebuilt_indexes: tuple[str, ...] = ()
    removed_segments: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        return self.torn_tail is None and not self.rebuilt_indexes and not self.removed_segments


def _encode(start_index: int, start_term: int, start_offset: int) -> bytes:
    meta = {
        "format": _META_FORMAT,
        "start_index": start_index,
        "start_term": start_term,
        "start_offset": start_offset,
    }
    return json.dumps(meta).encode()


_FRESH_BYTES = _encode(*FRESH_START)


def _torn_fresh(raw: bytes) -> bool:
    """`raw` is a new log's header cut short or zero-filled by a crash."""
    if len(raw) > len(_FRESH_BYTES) or raw == _FRESH_BYTES:
        return False
    kept = len(raw.rstrip(b"\0"))
    return raw[:kept] == _FRESH_BYTES[:kept]


def write_meta(
    directory: str, start_index: int, start_term: int, start_offset: int, disk: Disk = OS_DISK
) -> None:
    """Durable on return (temp file, fsync, rename, fsync of the directory)."""
    payload = _encode(start_index, start_term, start_offset)
    write_atomic(os.path.join(directory, META_NAME), payload, disk)


def write_fresh_meta(directory: str, disk: Disk = OS_DISK) -> None:
    """A new log's header, not yet durable: the caller fsyncs the directory (and its parent)
    before anything in the log is durable. Fails if a header exists."""
    fd = disk.open(os.path.join(directory, META_NAME), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        disk.write_all(fd, _FRESH_BYTES)
    finally:
        disk.close(fd)


def read_meta(directory: str, disk: Disk = OS_DISK) -> tuple[int, int, int] | None:
    """(start_index, start_term, start_offset) from `log.meta`, None if absent."""
    raw = disk.read_file(os.path.join(directory, META_NAME))
    if raw is None:
        return None
    if not raw:
        return FRESH_START  # created by `write_fresh_meta`; a crash came before its first flush
    if raw == _FRESH_BYTES:
        return FRESH_START  # most logs never move their start: no parse for them
    if _torn_fresh(raw):
        return FRESH_START  # the same, torn: `write_meta` never leaves a partial file
    try:
        meta = json.loads(raw)
        if meta.get("format") != _META_FORMAT:
            raise ValueError(f"format {meta.get('format')!r}")
        start = (int(meta["start_index"]), int(meta["start_term"]), int(meta["start_offset"]))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise NotALogDirectory(
            f"{directory}: {META_NAME} is not a Flotilla log header ({error})"
        ) from None
    if start[0] < 1 or start[1] < 0 or start[2] < 0:
        raise CorruptLog(f"{directory}: {META_NAME} holds impossible values {start}")
    return start


def segment_bases(
    directory: str, disk: Disk = OS_DISK, names: list[str] | None = None
) -> list[int]:
    """The base indexes of the segments in `directory`, ascending; `names`: its listing, if the
    caller has it (one listing per open, not one per question)."""
    bases = []
    for name in disk.listdir(directory) if names is None else names:
        match = _SEGMENT_RE.match(name)
        if match:
            bases.append(int(match.group(1)))
    return sorted(bases)
