"""A durable journal for the control plane's pysyncobj: what a controller says is on disk first.

pysyncobj's own `FileJournal` writes its log through an mmap and its term/vote record with a
rename, and fsyncs neither; its full dumps are renamed into place unsynced too. After an OS crash a
controller could then vote twice in a term or forget a topic change a quorum acknowledged.
`DurableJournal` replaces it, on pysyncobj's own on-disk format (a journal written before opens,
and an older build can still read ours), with these guarantees, each holding when the call
returns, i.e. before pysyncobj sends the vote or the acknowledgement that reflects it:

- `add` (an append): the record and then the header's end offset, each written and fsynced, so a crash leaves the end offset pointing only at whole, durable records
  (two fsyncs per control-plane entry; entries are topic changes and election no-ops).
- `setCurrentTerm` (term and votedFor): the meta file replaced atomically: temporary file
  written and fsynced, renamed, directory fsynced. The commit index, which pysyncobj saves once
  a second, goes through the same replacement, so it can never leave a torn meta behind.
- `deleteEntriesFrom` (a conflicting suffix cut): the header's end offset, fsynced.
- Full dumps (`DurableDumps`, pysyncobj's serializer hooks): a dump is written and fsynced
  before pysyncobj renames it into place (so a crash never leaves the name on a dump whose data
  did not reach the disk), and a dump received from the leader is fsynced (file and directory)
  before pysyncobj loads it, clears its journal and acknowledges it.
- `deleteEntriesTo` (compaction after a full dump) and `clear` (a dump received from the leader
  replaces the log): the dump file and its directory are fsynced first, so the dump standing for
  the entries is durable before they are forgotten; compaction writes the remaining entries to
  a new file that is fsynced and renamed over the journal (directory fsynced): a crash leaves the
  old journal or the new one, never half of either.
- A failed write or fsync is never retried: the node stops (`cluster.failstop`, exit code 75)
  and recovery on restart decides what survived (fsyncgate: after a failed fsync the page cache
  may claim data that is not on disk).

Its file operations go through the storage layer's disk seam (`storage.disk.OS_DISK`), so the
test harness's disk faults (FLOTILLA_DISK_FAULTS) reach the control plane too.

A meta file that exists but cannot be read is an error, not an empty state: pysyncobj would read
it as "term 0, no vote" and could vote a second time in a term it already voted in.

Why wrap pysyncobj rather than move topic metadata onto our own Raft core: durability needed
only these files to be fsynced in the right order, and pysyncobj's journal interface is small.
Moving the control plane would add a second kind of group to the MultiRaft host (bootstrapped
without a controller to place it, with metadata snapshots, and a migration of every existing
controller journal): a larger change, with its own risks, than this fix. The on-disk format stays
pysyncobj's, so existing controllers upgrade in place.

Threading: pysyncobj calls the journal only from its own thread, so these fsyncs never run on the
node's event loop.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import pysyncobj.syncobj as syncobj_module
from pysyncobj import pickle as syncobj_pickle
from pysyncobj.journal import (
    APP_NAME,
    APP_VERSION,
    FIRST_RECORD_OFFSET,
    JOURNAL_FORMAT_VERSION,
    LAST_RECORD_OFFSET_OFFSET,
    NAME_SIZE,
    VERSION_SIZE,
    Journal,
)

from cluster.errors import ClusterError
from cluster.failstop import FailStop
from storage.disk import OS_DISK

__all__ = [
    "DurableDumps",
    "DurableJournal",
    "JournalCorrupt",
    "durable_journal_installed",
    "fsync_directory",
]

Entry = tuple[bytes, int, int]  # (command, index, term), as pysyncobj keeps them
_HEADER = struct.Struct("<II")  # format version, end offset of the last record
_U32 = struct.Struct("<I")  # a record's size (before and after it); the header's end offset
_INDEX_TERM = struct.Struct("<QQ")


class JournalCorrupt(ClusterError, RuntimeError):
    """The control-plane journal or its meta file cannot be read as written."""


_FAIL_STOP = FailStop()


def _fail_stop(operation: str, path: str, error: OSError) -> NoReturn:
    """Logs one CRITICAL line and exits 75 (if the exit was injected: raises NodeFailStopped)."""
    raise _FAIL_STOP(f"the control-plane journal's {operation} of {path}", error) from error


def fsync_directory(path: str) -> None:
    """Makes the names in `path` durable (a file created or renamed there)."""
    try:
        fd = OS_DISK.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            OS_DISK.fsync(fd)
        finally:
            OS_DISK.close(fd)
    except OSError as error:
        _fail_stop("fsync", path, error)


def _write_all(fd: int, data: bytes, offset: int, path: str) -> None:
    view = memoryview(data)
    try:
        while view:
            written = OS_DISK.pwritev(fd, [view], offset)
            view, offset = view[written:], offset + written
    except OSError as error:
        _fail_stop("write", path, error)


def _sync(fd: int, path: str) -> None:
    try:
        OS_DISK.fsync(fd)
    except OSError as error:
        _fail_stop("fsync", path, error)


def _write_synced(path: str, data: bytes) -> None:
    """Creates (or truncates) `path` with `data`, fsynced; a failure stops the process."""
    try:
        fd = OS_DISK.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as error:
        _fail_stop("create", path, error)
    try:
        _write_all(fd, data, 0, path)
        _sync(fd, path)
    finally:
        OS_DISK.close(fd)


def _replace_durably(path: str, data: bytes) -> None:
    """Writes `data` to `path` so that a crash leaves either the old content or `data`."""
    temporary = path + ".tmp"
    _write_synced(temporary, data)
    try:
        OS_DISK.replace(temporary, path)
    except OSError as error:
        _fail_stop("rename", path, error)
    fsync_directory(os.path.dirname(path) or ".")


def _header(end_offset: int) -> bytes:
    name = APP_NAME + b"\0" * (NAME_SIZE - len(APP_NAME))
    version = APP_VERSION + b"\0" * (VERSION_SIZE - len(APP_VERSION))
    return name + version + _HEADER.pack(JOURNAL_FORMAT_VERSION, end_offset)


def _frame(entry: Entry) -> bytes:
    command, index, term = entry
    record = _INDEX_TERM.pack(index, term) + syncobj_pickle.to_bytes(command)
    size = _U32.pack(len(record))
    return size + record + size


def _parse(path: str, data: bytes) -> list[Entry]:
    if len(data) < FIRST_RECORD_OFFSET:
        raise JournalCorrupt(f"{path}: {len(data)} bytes, shorter than the journal header")
    version, end = _HEADER.unpack_from(data, NAME_SIZE + VERSION_SIZE)
    if version != JOURNAL_FORMAT_VERSION or not FIRST_RECORD_OFFSET <= end <= len(data):
        raise JournalCorrupt(
            f"{path}: format {version} (expected {JOURNAL_FORMAT_VERSION}) with records up to "
            f"offset {end} in a file of {len(data)} bytes"
        )
    entries: list[Entry] = []
    offset = FIRST_RECORD_OFFSET
    while offset < end:
        (size,) = _U32.unpack_from(data, offset)
        after = offset + _U32.size + size
        if size < _INDEX_TERM.size or after + _U32.size > end:
            raise JournalCorrupt(f"{path}: a record of {size} bytes at offset {offset} overruns")
        if _U32.unpack_from(data, after)[0] != size:
            raise JournalCorrupt(f"{path}: the record at offset {offset} ends with another size")
        index, term = _INDEX_TERM.unpack_from(data, offset + _U32.size)
        entries.append((data[offset + _U32.size + _INDEX_TERM.size : after], index, term))
        offset = after + _U32.size
    return entries


class DurableJournal(Journal):  # type: ignore[misc]
    """pysyncobj's journal interface, durable before each call returns (see the module doc)."""

    def __init__(self, journal_path: str, dump_path: str | None) -> None:
        self._path = journal_path
        self._dump_path = dump_path
        self._directory = os.path.dirname(journal_path) or "."
        self._meta_path = journal_path + ".meta"
        if not os.path.exists(journal_path):
            _replace_durably(journal_path, _header(FIRST_RECORD_OFFSET))
        with open(journal_path, "rb") as file:
            self._entries = _parse(journal_path, file.read())
        self._end = FIRST_RECORD_OFFSET + sum(len(_frame(entry)) for entry in self._entries)
        self._fd = self._open()
        self._meta = self._load_meta()
        self._meta_dirty = False

    def _open(self) -> int:
        try:
            return OS_DISK.open(self._path, os.O_RDWR)
        except OSError as error:
            _fail_stop("open", self._path, error)

    def _load_meta(self) -> dict[str, Any]:
        try:
            with open(self._meta_path, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            return {}
        try:
            meta = syncobj_pickle.loads(data)
        except Exception as error:
            raise JournalCorrupt(
                f"{self._meta_path}: the term/vote record cannot be read ({error}); starting "
                "without it could vote twice in a term: restore it or remove this controller's "
                "data directory so that it rejoins empty"
            ) from error
        if not isinstance(meta, dict):
            raise JournalCorrupt(f"{self._meta_path}: holds a {type(meta).__name__}, not a dict")
        return meta

    def _set_end(self, end: int) -> None:
        _write_all(self._fd, _U32.pack(end), LAST_RECORD_OFFSET_OFFSET, self._path)
        _sync(self._fd, self._path)
        self._end = end

    def _sync_dump(self) -> None:
        """The dump that stands for entries about to be forgotten reaches the disk first."""
        if self._dump_path is None or not os.path.exists(self._dump_path):
            return
        try:
            fd = OS_DISK.open(self._dump_path, os.O_RDONLY)
            try:
                OS_DISK.fsync(fd)
            finally:
                OS_DISK.close(fd)
        except OSError as error:
            _fail_stop("fsync", self._dump_path, error)
        fsync_directory(os.path.dirname(self._dump_path) or ".")

    # -- the log ----------------------------------------------------------------------------------
    def add(self, command: bytes, idx: int, term: int) -> None:
        frame = _frame((command, idx, term))
        _write_all(self._fd, frame, self._end, self._path)
        _sync(self._fd, self._path)
        self._set_end(self._end + len(frame))
        self._entries.append((command, idx, term))

    def clear(self) -> None:
        self._sync_dump()
        self._set_end(FIRST_RECORD_OFFSET)
        self._entries = []

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        cut = self._entries[entryFrom:]
        self._set_end(self._end - sum(len(_frame(entry)) for entry in cut))
        del self._entries[entryFrom:]

    def deleteEntriesTo(self, entryTo: int) -> None:
        self._sync_dump()
        kept = self._entries[entryTo:]
        body = b"".join(_frame(entry) for entry in kept)
        _replace_durably(self._path, _header(FIRST_RECORD_OFFSET + len(body)) + body)
        OS_DISK.close(self._fd)
        self._fd = self._open()
        self._entries = kept
        self._end = FIRST_RECORD_OFFSET + len(body)

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def flush(self) -> None:
        """Nothing to do: every change is durable when its call returns."""

    def _destroy(self) -> None:
        if self._meta_dirty:
            self._store_meta()
        with contextlib.suppress(OSError):
            OS_DISK.close(self._fd)

    # -- term, vote and commit index ----------------------------------------------------------------
    def _store_meta(self) -> None:
        _replace_durably(self._meta_path, syncobj_pickle.dumps(self._meta))
        self._meta_dirty = False

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = votedForNodeId
        self._store_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("votedForNodeId")

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        # Saved lazily (onOneSecondTimer), as pysyncobj does: a commit index lost in a crash is
        # learnt again from the leader; nothing is promised on the strength of it.
        if self._meta.get("raftCommitIndex") != raftCommitIndex:
            self._meta["raftCommitIndex"] = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("raftCommitIndex", 1))

    def onOneSecondTimer(self) -> None:
        if self._meta_dirty:
            self._store_meta()


class DurableDumps:
    """pysyncobj's full dumps through its `serializer`/`deserializer` hooks, made durable.

    A dump is gzip(pickle((state, *pysyncobj's own data))), where `state` is what `save_state`
    returns: the layout of pysyncobj's own dumps (whose first element is the object's attribute
    dict), so a dump written by either reads in the other. With these hooks pysyncobj leaves the
    replicated state to us: `write` takes it from `save_state`, `read` gives it to `load_state`.
    Both run on pysyncobj's thread; `bind` must be called before the SyncObj starts."""

    def __init__(self) -> None:
        self._save_state: Callable[[], dict[str, Any]] | None = None
        self._load_state: Callable[[dict[str, Any]], None] | None = None

    def bind(
        self, save_state: Callable[[], dict[str, Any]], load_state: Callable[[dict[str, Any]], None]
    ) -> None:
        self._save_state, self._load_state = save_state, load_state

    def write(self, path: str, internal: tuple[Any, ...]) -> None:
        """pysyncobj's serializer: `path` is its temporary file, renamed into place after this
        returns; so its content is durable first (the rename is made durable by the journal,
        which fsyncs the dump's directory before it forgets the entries the dump stands for)."""
        assert self._save_state is not None, "DurableDumps.bind was not called"
        body = gzip.compress(syncobj_pickle.dumps((self._save_state(), *internal)))
        _write_synced(path, body)

    def read(self, path: str) -> tuple[Any, ...]:
        """pysyncobj's deserializer, called on a dump it is about to adopt: at start, or one just
        received from the leader, after which pysyncobj clears its journal and acknowledges. So
        the dump and its name are made durable first."""
        assert self._load_state is not None, "DurableDumps.bind was not called"
        try:
            fd = OS_DISK.open(path, os.O_RDONLY)
            try:
                OS_DISK.fsync(fd)
            finally:
                OS_DISK.close(fd)
        except OSError as error:
            _fail_stop("fsync", path, error)
        fsync_directory(os.path.dirname(path) or ".")
        with open(path, "rb") as file:
            data = syncobj_pickle.loads(gzip.decompress(file.read()))
        self._load_state(data[0])
        return tuple(data[1:])


_INSTALL_LOCK = threading.Lock()


@contextlib.contextmanager
def durable_journal_installed(dump_path: str | None) -> Iterator[None]:
    """While open, a SyncObj constructed on this thread gets a `DurableJournal` for its journal
    file (pysyncobj creates its journal in `SyncObj.__init__` through the module's
    `createJournal`, and offers no other way in)."""
    with _INSTALL_LOCK:
        original = syncobj_module.createJournal

        def create(journal_path: str | None) -> Journal:
            if journal_path is None:
                return original(None)
            return DurableJournal(journal_path, dump_path)

        syncobj_module.createJournal = create
        try:
            yield
        finally:
            syncobj_module.createJournal = original
