"""Opening a log directory: validation, index loading or rebuilding, torn-tail repair.

A new log costs no fsync when created (see `storage.meta.write_fresh_meta`): its first flush
makes the directory durable, and the entries of every directory created for it in their parents.

What is repaired silently (and reported in `SegmentedLog.recovery`): a torn tail of the active
segment (cut off: bytes after the last complete entry with no valid entry after them were never
acknowledged as durable), a missing, short or damaged `.index` of a sealed segment, or one whose
rows do not fit its `.log` (rebuilt from the `.log`), segments wholly below the logical start
recorded in `log.meta` (a prefix truncation interrupted by a crash), and leftover temporary
files.

What is refused with an error, leaving the directory as it was: a path that is not a directory,
a non-empty directory without `log.meta` (not a log), a bad entry in the active segment with a
valid entry after it (`DamagedLog`: that is corruption, not a torn tail, and cutting there would
drop entries that were fsynced and perhaps acknowledged), a sealed segment whose entries fail
their checks (`DamagedLog`: a sealed entry is never skipped; a segment is sealed only once its
`.log` is fsynced, so no crash tears it), and a gap between `log.meta`'s start and the first
segment (`CorruptLog`). A replica whose log is damaged must not vote or serve: it is rebuilt
from its peers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from storage.atomic import fsync_directory
from storage.config import LogConfig
from storage.errors import CorruptLog, DamagedLog, ForeignLog, NotALogDirectory
from storage.handles import FileHandles
from storage.meta import (
    FRESH_START,
    META_NAME,
    RecoveryReport,
    read_header,
    segment_bases,
    write_fresh_meta,
)
from storage.segment import Segment

__all__ = ["Recovered", "recover"]


@dataclass(frozen=True, slots=True)
class Recovered:
    """What opening settled on, for the log to install: its verified segments (oldest first),
    its start `(index, term, offset)` and the report of what was repaired. `created_directories`
    is None for a log that existed; for a new one, the directories made for it (outermost
    first), none of them durable yet (nor its header). `tag`: the header's (see
    `storage.meta`)."""

    segments: tuple[Segment, ...]
    start: tuple[int, int, int]
    report: RecoveryReport
    created_directories: tuple[str, ...] | None = None
    tag: str | None = None


def recover(
    directory: str,
    config: LogConfig,
    handles: FileHandles,
    create: bool,
    durable: bool = False,
    tag: str | None = None,
) -> Recovered:
    """Opens (or, with `create`, makes) the log in `directory`; the caller installs the result.
    Touches only the directory's files, never the caller's state. `durable`: the files are known
    to be durable (the process that wrote them last closed the log, flushing it), so the active
    segment is not fsynced again. `tag`: a new log's header carries it; an existing log tagged
    otherwise is refused (`ForeignLog`) before any of its files is touched."""
    disk = handles.disk
    kind = disk.kind(directory)
    if kind == "file":
        raise NotALogDirectory(f"{directory} is not a directory, so it cannot hold a log")
    if kind is None:
        if not create:
            raise NotALogDirectory(f"{directory} does not exist (and create=False)")
        return _create(directory, handles, disk.makedirs(directory), tag)
    header = read_header(directory, disk)
    if header is None:
        names = sorted(disk.listdir(directory))
        if names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise NotALogDirectory(
                f"{directory} is not a Flotilla log: it has no {META_NAME} and holds {shown}; "
                "give an empty or new directory"
            )
        if not create:
            raise NotALogDirectory(f"{directory} is empty (and create=False)")
        return _create(directory, handles, [], tag)
    if header.tag is not None and tag is not None and header.tag != tag:
        raise ForeignLog(directory, header.tag, tag)
    start = header.start

    names = disk.listdir(directory)  # one listing: leftovers and segments
    for name in names:
        if name.endswith(".tmp"):
            disk.unlink(os.path.join(directory, name))
    bases = segment_bases(directory, disk, names)
    segments = [Segment(directory, base, handles) for base in bases]
    rebuilt: list[str] = []
    removed: list[str] = []
    torn: str | None = None
    truncated = 0
    expected_offset: int | None = None

    for position, segment in enumerate(segments[:-1]):
        expected = segments[position + 1].base_index - segment.base_index
        loaded = segment.load_index() and segment.entry_count == expected
        if loaded and expected_offset is not None and segment.first_offset != expected_offset:
            loaded = False
        if not loaded or config.verify_on_open:
            result = segment.scan(config.max_batch_bytes, expected_offset)
            if result.problem is not None or result.entries != expected:
                problem = result.problem or f"{result.entries} entries where {expected} belong"
                raise DamagedLog(
                    segment.log_path,
                    result.valid_bytes,
                    segment.base_index + result.entries,
                    f"sealed segment: {problem} (sealed entries are never skipped)",
                    _damaged_end(segments, config.max_batch_bytes),
                )
            if not loaded:
                segment.write_index()
                rebuilt.append(os.path.basename(segment.index_path))
        expected_offset = segment.next_offset

    if segments:
        active = segments[-1]
        result = active.scan(config.max_batch_bytes, expected_offset)
        if result.valid_bytes != result.file_bytes:
            bad_index = active.base_index + result.entries
            follower = active.find_entry_after(
                result.valid_bytes, bad_index, config.max_batch_bytes
            )
            if follower is not None:
                raise DamagedLog(
                    active.log_path,
                    result.valid_bytes,
                    bad_index,
                    f"{result.problem}, yet entry {follower[1]} at byte {follower[0]} is "
                    "valid: this is corruption, not a torn tail",
                    _damaged_end(segments, config.max_batch_bytes),
                )
            active.cut_file(result.valid_bytes)
            torn = f"{active.log_path}: {result.problem}"
            truncated = result.file_bytes - result.valid_bytes
        if active.entry_count == 0:
            active.delete_files()
            removed.append(os.path.basename(active.log_path))
            segments.pop()
        elif not durable:
            with handles.pin(active.log_path) as fd:
                disk.fsync(fd)  # what a crashed process wrote is durable before it is served

    start_index = start[0]
    while segments and segments[0].last_index < start_index:
        segment = segments.pop(0)
        segment.delete_files()
        removed.append(os.path.basename(segment.log_path))
    if segments and segments[0].base_index > start_index:
        raise CorruptLog(
            f"{directory}: entries {start_index}..{segments[0].base_index - 1} are missing "
            f"({META_NAME} starts the log at {start_index}, the first segment at "
            f"{segments[0].base_index})"
        )
    if removed or rebuilt:
        fsync_directory(directory, disk)
    report = RecoveryReport(torn, truncated, tuple(rebuilt), tuple(removed))
    return Recovered(tuple(segments), start, report, tag=header.tag)


def _damaged_end(segments: list[Segment], max_batch_bytes: int) -> tuple[int, int]:
    """(index, term) of a damaged log's last valid entry, past the damage: the last segment
    holding one decides; (0, 0) if none does."""
    for segment in reversed(segments):
        last = segment.last_valid_entry(max_batch_bytes)
        if last is not None:
            return last
    return (0, 0)


def _create(directory: str, handles: FileHandles, created: list[str], tag: str | None) -> Recovered:
    """A new, empty log: its header is written without fsync, and the log fsyncs its directory
    and the parent of every directory made for it (and a tagged header) before anything it
    holds is durable (see `storage.meta`). Until then a crash may lose the directory or leave
    the header empty: either way an empty log, as it was."""
    write_fresh_meta(directory, handles.disk, tag)
    return Recovered((), FRESH_START, RecoveryReport(), tuple(created), tag)
