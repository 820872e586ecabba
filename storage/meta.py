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

A header may carry a tag: the owner's name for what the log belongs to (a replica's topic
incarnation uid), written with a new log's header and kept by every later one. A tagged new
header is fsynced with the log's first flush (`SegmentedLog`), so a log holding a durable entry
holds its tag: a crash can lose the tag only of a log that holds nothing durable (read as
untagged, `FRESH_START`). Opening a log with an expected tag refuses one tagged otherwise
(`ForeignLog`) before touching any file.
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
    "Header",
    "RecoveryReport",
    "read_header",
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


@dataclass(frozen=True, slots=True)
class Header:
    """What `log.meta` holds: the log's start (index, term, offset) and its tag, if any."""

    start: tuple[int, int, int]
    tag: str | None = None


def _encode(start_index: int, start_term: int, start_offset: int, tag: str | None = None) -> bytes:
    meta: dict[str, object] = {
        "format": _META_FORMAT,
        "start_index": start_index,
        "start_term": start_term,
        "start_offset": start_offset,
    }
    if tag is not None:
        meta["tag"] = tag  # last: a new header torn anywhere still begins with `_FRESH_HEAD`
    return json.dumps(meta).encode()


_FRESH_BYTES = _encode(*FRESH_START)
_FRESH_HEAD = _FRESH_BYTES[:-1]  # every new header's bytes begin so, tagged or not


def _torn_fresh(raw: bytes) -> bool:
    """`raw` (which does not parse) is a new log's header cut short or zero-filled by a crash:
    a prefix of `_FRESH_HEAD`, or `_FRESH_HEAD` and a part of the tag after it."""
    kept = raw.rstrip(b"\0")
    return _FRESH_HEAD.startswith(kept) or kept.startswith(_FRESH_HEAD)


def write_meta(
    directory: str,
    start_index: int,
    start_term: int,
    start_offset: int,
    disk: Disk = OS_DISK,
    tag: str | None = None,
) -> None:
    """Durable on return (temp file, fsync, rename, fsync of the directory)."""
    payload = _encode(start_index, start_term, start_offset, tag)
    write_atomic(os.path.join(directory, META_NAME), payload, disk)


def write_fresh_meta(directory: str, disk: Disk = OS_DISK, tag: str | None = None) -> None:
    """A new log's header, not yet durable: the caller fsyncs the directory (and its parent,
    and the header itself if tagged) before anything in the log is durable. Fails if a header
    exists."""
    fd = disk.open(os.path.join(directory, META_NAME), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        disk.write_all(fd, _FRESH_BYTES if tag is None else _encode(*FRESH_START, tag))
    finally:
        disk.close(fd)


def read_meta(directory: str, disk: Disk = OS_DISK) -> tuple[int, int, int] | None:
    """(start_index, start_term, start_offset) from `log.meta`, None if absent."""
    header = read_header(directory, disk)
    return None if header is None else header.start


_FRESH_HEADER = Header(FRESH_START)


def read_header(directory: str, disk: Disk = OS_DISK) -> Header | None:
    """What `log.meta` holds, None if absent."""
    raw = disk.read_file(os.path.join(directory, META_NAME))
    if raw is None:
        return None
    if raw == _FRESH_BYTES:
        return _FRESH_HEADER  # an untagged log that never moved its start: no parse for it
    try:
        meta = json.loads(raw)
    except ValueError as error:
        if _torn_fresh(raw):
            # created by `write_fresh_meta` (empty, cut short or zero-filled: `write_meta`
            # never leaves a partial file); a crash came before its first flush
            return _FRESH_HEADER
        raise NotALogDirectory(
            f"{directory}: {META_NAME} is not a Flotilla log header ({error})"
        ) from None
    try:
        if not isinstance(meta, dict):
            raise TypeError(f"a JSON {type(meta).__name__}, not an object")
        if meta.get("format") != _META_FORMAT:
            raise ValueError(f"format {meta.get('format')!r}")
        start = (int(meta["start_index"]), int(meta["start_term"]), int(meta["start_offset"]))
        tag = meta.get("tag")
        if tag is not None and not isinstance(tag, str):
            raise TypeError(f"tag {tag!r} is not a string")
    except (ValueError, KeyError, TypeError) as error:
        raise NotALogDirectory(
            f"{directory}: {META_NAME} is not a Flotilla log header ({error})"
        ) from None
    if start[0] < 1 or start[1] < 0 or start[2] < 0:
        raise CorruptLog(f"{directory}: {META_NAME} holds impossible values {start}")
    return Header(start, tag)


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
