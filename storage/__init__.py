"""storage: the segmented log of record batches, with recovery, retention and group commit.

Imports nothing else of Flotilla. See `storage.segmented_log` for the contract.

Every file operation goes through a `storage.disk.Disk`: the real one (`OS_DISK`, with the
test-only fault hook of `storage.faults`, armed by FLOTILLA_DISK_FAULTS) or the simulated one of
`storage.simdisk` (crashes that lose or tear unsynced writes, bit flips, EIO/ENOSPC), chosen by
the `FileHandles` a log is given (`FileHandles(max_open, disk)`). Storage errors are fail-stop
(`StorageFailed`); damage recovery may not repair is `DamagedLog`.
"""

from storage.config import FsyncMode, FsyncPolicy, LogConfig
from storage.entry import HEADER_SIZE, Entry
from storage.errors import (
    BatchTooLarge,
    CorruptEntry,
    CorruptLog,
    DamagedLog,
    ForeignLog,
    IndexOutOfRange,
    InvalidArgument,
    LogClosed,
    NotALogDirectory,
    OffsetOutOfRange,
    StorageError,
    StorageFailed,
)
from storage.handles import DEFAULT_HANDLES, FileHandles
from storage.hard_state import HardState
from storage.meta import RecoveryReport
from storage.segmented_log import SegmentedLog, sync_logs
from storage.state_journal import StateJournal

__all__ = [
    "DEFAULT_HANDLES",
    "HEADER_SIZE",
    "BatchTooLarge",
    "CorruptEntry",
    "CorruptLog",
    "DamagedLog",
    "Entry",
    "FileHandles",
    "ForeignLog",
    "FsyncMode",
    "FsyncPolicy",
    "HardState",
    "IndexOutOfRange",
    "InvalidArgument",
    "LogClosed",
    "LogConfig",
    "NotALogDirectory",
    "OffsetOutOfRange",
    "RecoveryReport",
    "SegmentedLog",
    "StateJournal",
    "StorageError",
    "StorageFailed",
    "sync_logs",
]
