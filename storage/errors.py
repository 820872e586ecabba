"""The errors of the storage package: one hierarchy rooted in `StorageError`.

Every message names the bad value and what would have been valid. An operation that raises one of
these has changed nothing on disk, except `CorruptLog`/`CorruptEntry`, which report damage that
was already there.
"""

from __future__ import annotations

__all__ = [
    "BatchTooLarge",
    "CorruptEntry",
    "CorruptLog",
    "DamagedLog",
    "ForeignLog",
    "IndexOutOfRange",
    "InvalidArgument",
    "LogClosed",
    "NotALogDirectory",
    "OffsetOutOfRange",
    "StorageError",
    "StorageFailed",
]


class StorageError(Exception):
    """Base class of every error raised by `storage`."""


class InvalidArgument(StorageError, ValueError):
    """An argument is outside what the operation accepts (the message says what is valid)."""


class BatchTooLarge(InvalidArgument):
    """An append larger than `max_batch_bytes` was refused; the log is unchanged."""


class IndexOutOfRange(StorageError, IndexError):
    """A Raft index outside the log's retained range was asked for."""

    def __init__(self, index: int, first_index: int, last_index: int, what: str = "index") -> None:
        if first_index > last_index:
            valid = f"the log is empty (next index {first_index})"
        else:
            valid = f"valid {what}es are {first_index}..{last_index}"
        super().__init__(f"{what} {index} is out of range: {valid}")
        self.index = index
        self.first_index = first_index
        self.last_index = last_index


class OffsetOutOfRange(StorageError, IndexError):
    """A record offset outside `[first_offset, next_offset)` was asked for."""

    def __init__(self, offset: int, first_offset: int, next_offset: int) -> None:
        if first_offset >= next_offset:
            valid = f"the log holds no records (next offset {next_offset})"
        else:
            valid = f"valid offsets are {first_offset}..{next_offset - 1}"
        super().__init__(f"offset {offset} is out of range: {valid}")
        self.offset = offset
        self.first_offset = first_offset
        self.next_offset = next_offset


class CorruptEntry(StorageError):
    """An entry failed its checksum or header checks; it is never served."""


class CorruptLog(StorageError):
    """The log directory is damaged beyond what recovery may repair silently (e.g. a gap)."""


class DamagedLog(CorruptLog, CorruptEntry):
    """Recovery found damage it may not repair: a bad entry with a valid entry after it (so not
    a torn tail; cutting there would drop entries that may have been acknowledged), or a sealed
    segment that fails its checks. The directory is left as it was. The replica must not vote
    or serve; rebuild it from its peers. `last_index`/`last_term`: the last valid entry of the
    log, valid entries after the damage included (0, 0 if none): the end of what the replica
    may have acknowledged, which its vote floor must keep (`cluster.opener`)."""

    def __init__(
        self, path: str, position: int, index: int, problem: str, last: tuple[int, int] = (0, 0)
    ) -> None:
        end = f"; the log's last valid entry is {last[0]} (term {last[1]})" if last[0] else ""
        super().__init__(
            f"{path} is damaged at byte {position} (entry {index}): {problem}{end}. The log was "
            "left as it is: rebuild this replica from its peers"
        )
        self.path = path
        self.position = position
        self.index = index
        self.problem = problem
        self.last_index, self.last_term = last


class StorageFailed(StorageError, OSError):
    """A write or fsync failed. What it covered may not be durable, and the log (or journal)
    refuses every later write and flush with this error: a failed fsync is never retried (the
    kernel may have dropped the dirty pages, so a retry would succeed and lie). Fail-stop:
    stop, and let recovery decide what survived. `errno` is the failed operation's."""

    def __init__(self, message: str, errno_code: int | None = None) -> None:
        OSError.__init__(self, errno_code, message)


class NotALogDirectory(StorageError):
    """The path is not a Flotilla log directory (and was left untouched)."""


class ForeignLog(StorageError):
    """The log's header carries another tag than the one it was opened with (its owner's name
    for what the log belongs to: a replica's topic incarnation). Nothing was touched."""

    def __init__(self, directory: str, found: str, expected: str) -> None:
        super().__init__(f"{directory} holds the log tagged {found!r}, not {expected!r}")
        self.directory = directory
        self.found = found
        self.expected = expected


class LogClosed(StorageError):
    """The log was used after `close()`."""
