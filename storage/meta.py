"""The log's header file, `log.meta`, and what recovery reports.

`log.meta` marks a directory as a Flotilla log and records its logical start: the first retained
Raft index, the term of the entry just before it, and the offset of its first record (needed
when no entry is retained). It is replaced atomically, so a crash leaves the old or the new one.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from storage.atomic import write_atomic
from storage.errors import CorruptLog, NotALogDirectory

__all__ = ["META_NAME", "RecoveryReport", "read_meta", "segment_bases", "write_meta"]

META_NAME = "log.meta"
_META_FORMAT = "flotilla-log/1"
_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")


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


def write_meta(directory: str, start_index: int, start_term: int, start_offset: int) -> None:
    meta = {
        "format": _META_FORMAT,
        "start_index": start_index,
        "start_term": start_term,
        "start_offset": start_offset,
    }
    write_atomic(os.path.join(directory, META_NAME), json.dumps(meta).encode())


def read_meta(directory: str) -> tuple[int, int, int] | None:
    """(start_index, start_term, start_offset) from `log.meta`, None if absent."""
    path = os.path.join(directory, META_NAME)
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except FileNotFoundError:
        return None
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


def segment_bases(directory: str) -> list[int]:
    bases = []
    for name in os.listdir(directory):
        match = _SEGMENT_RE.match(name)
        if match:
            bases.append(int(match.group(1)))
    return sorted(bases)
