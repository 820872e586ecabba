"""Opening a log directory: validation, index loading or rebuilding, torn-tail repair.

A new log costs no fsync when created (see `storage.meta.write_fresh_meta`): its first flush
makes the directory durable.

What is repaired silently (and reported in `SegmentedLog.recovery`): a torn or corrupt tail of
the active segment (cut off: those bytes were never acknowledged as durable, or are damaged),
a missing, short or damaged `.index` of a sealed segment (rebuilt from its `.log`), segments
wholly below the logical start recorded in `log.meta` (a prefix truncation interrupted by a
crash), and leftover temporary files.

What is refused with an error, leaving the directory as it was: a path that is not a directory,
a non-empty directory without `log.meta` (not a log), a sealed segment whose entries fail their
checks (`CorruptEntry`: a sealed entry is never skipped), and a gap between `log.meta`'s start
and the first segment (`CorruptLog`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from storage.atomic import fsync_directory
from storage.errors import CorruptEntry, CorruptLog, NotALogDirectory
from storage.meta import (
    FRESH_START,
    META_NAME,
    RecoveryReport,
    read_meta,
    segment_bases,
    write_fresh_meta,
)
from storage.segment import Segment

if TYPE_CHECKING:
    from storage.segmented_log import SegmentedLog

__all__ = ["recover"]


def recover(target: SegmentedLog, create: bool) -> None:
    directory = target.directory
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotALogDirectory(f"{directory} is not a directory, so it cannot hold a log")
    if not os.path.exists(directory):
        if not create:
            raise NotALogDirectory(f"{directory} does not exist (and create=False)")
        os.makedirs(directory)
        _create(target)
        return
    start = read_meta(directory)
    if start is None:
        names = sorted(os.listdir(directory))
        if names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise NotALogDirectory(
                f"{directory} is not a Flotilla log: it has no {META_NAME} and holds {shown}; "
                "give an empty or new directory"
            )
        if not create:
            raise NotALogDirectory(f"{directory} is empty (and create=False)")
        _create(target)
        return

    for name in os.listdir(directory):
        if name.endswith(".tmp"):
            os.unlink(os.path.join(directory, name))

    config = target.config
    handles = target._handles
    segments = [Segment(directory, base, handles) for base in segment_bases(directory)]
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
                raise CorruptEntry(
                    f"sealed segment {segment.log_path} is damaged: {problem}. Sealed entries "
                    "are never skipped; restore this replica from its peers"
                )
            if not loaded:
                segment.write_index()
                rebuilt.append(os.path.basename(segment.index_path))
        expected_offset = segment.next_offset

    if segments:
        active = segments[-1]
        result = active.scan(config.max_batch_bytes, expected_offset)
        if result.valid_bytes != result.file_bytes:
            active.cut_file(result.valid_bytes)
            torn = f"{active.log_path}: {result.problem}"
            truncated = result.file_bytes - result.valid_bytes
        if active.entry_count == 0:
            active.delete_files()
            removed.append(os.path.basename(active.log_path))
            segments.pop()
        else:
            with handles.pin(active.log_path) as fd:
                os.fsync(fd)

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
    if removed:
        fsync_directory(directory)
    report = RecoveryReport(torn, truncated, tuple(rebuilt), tuple(removed))
    target._install(segments, start, report)


def _create(target: SegmentedLog) -> None:
    """A new, empty log: its header is written without fsync, and the log fsyncs its directory
    and the parent before anything it holds is durable (see `storage.meta`). Until then a crash
    may lose the directory or leave the header empty: either way an empty log, as it was."""
    write_fresh_meta(target.directory)
    target._install([], FRESH_START, RecoveryReport())
    target._creation_unsynced = True
