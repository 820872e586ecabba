"""Fail-stop: a node whose disk failed stops rather than guess.

After a failed write or fsync the kernel may already have dropped the dirty pages (and cleared
the error: a second fsync then "succeeds" with the data gone — PostgreSQL's fsyncgate). So a node
that gets an error from a storage write or fsync (a log append, a group commit, a truncation, the
state journal's term/vote/commit, a marker or snapshot written atomically, a replica's recovery
on open) never retries it and never goes on as if it had succeeded: it logs one CRITICAL line
naming the error and what was being written, and the process exits with `FAIL_STOP_EXIT_CODE`
at once (no graceful stop: nothing more is sent or written). Recovery on restart decides what
survived; peers took over meanwhile. Nothing else in the node may send a Raft message for state
whose persist failed: the exit happens on the storage thread, before the event loop learns that
the round's disk work ended.

What counts (`storage_failure`, `disk_failure`):
- in the persist path of a round (writes, group commit, journal) and in storage-thread work
  (retention, retirement, deletion, snapshots): any `OSError`, or an error caused by one;
- opening the state journal at startup (`Node`): any `OSError` or `StorageError` (a journal
  found damaged too: the node must not run without the terms and votes it promised);
- elsewhere (opening a replica, a read while stepping a group): an `OSError` whose errno says the
  device itself failed (`DISK_ERRNOS`), or storage's report of a failed write or fsync. Other errors there are one replica's problem (an
  unreadable or corrupt directory, a bug): that replica is quarantined (`cluster.quarantine`),
  its neighbours go on.

The exit is injectable (`FailStop(exit=...)`) so tests observe it without dying; the hook then
returns, and its caller raises `NodeFailStopped`, with which every pending future of the node is
settled (nothing waits forever on a node that stopped).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
from collections.abc import Callable

from storage import StorageError

__all__ = [
    "DISK_ERRNOS",
    "FAIL_STOP_EXIT_CODE",
    "FailStop",
    "NodeFailStopped",
    "disk_failure",
    "storage_failure",
]

log = logging.getLogger("flotilla.failstop")

# EX_TEMPFAIL (sysexits.h): a supervisor restarts the node; recovery decides what survived.
FAIL_STOP_EXIT_CODE = 75

# Errors of the device or file system itself, wherever they are met.
DISK_ERRNOS = frozenset({errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EROFS})


class NodeFailStopped(Exception):
    """The node stopped on a storage failure (`where`: what was being written); every pending
    operation of the node ends with this error."""

    def __init__(self, where: str, error: BaseException) -> None:
        super().__init__(f"the node stopped: {where} failed: {error}")
        self.where = where
        self.error = error


def storage_failure(error: BaseException) -> OSError | None:
    """The `OSError` behind `error`: itself, or one in its chain of causes."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, NodeFailStopped):
            return storage_failure(current.error)
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def disk_failure(error: BaseException) -> OSError | None:
    """The `OSError` behind `error` if its errno says the device failed (`DISK_ERRNOS`)."""
    if isinstance(error, NodeFailStopped):
        return storage_failure(error)
    found = storage_failure(error)
    if found is None:
        return None
    # storage's own report of a failed write or fsync (`StorageFailed`) counts whatever its errno
    return found if found.errno in DISK_ERRNOS or isinstance(found, StorageError) else None


class FailStop:
    """The node's fail-stop hook; thread-safe (the storage thread calls it, as may the loop).

    `__call__(where, error)` logs the CRITICAL line and exits the process the first time; it
    returns (only when `exit` is injected and returns) the `NodeFailStopped` to raise."""

    def __init__(self, exit: Callable[[int], object] = os._exit) -> None:
        self.exit = exit
        self.failure: NodeFailStopped | None = None
        self._lock = threading.Lock()

    @property
    def stopped(self) -> bool:
        return self.failure is not None

    def __call__(self, where: str, error: BaseException) -> NodeFailStopped:
        with self._lock:
            first = self.failure is None
            if self.failure is None:
                self.failure = (
                    error if isinstance(error, NodeFailStopped) else NodeFailStopped(where, error)
                )
            failure = self.failure
        if first:
            log.critical(
                "fail-stop: %s failed: %r; exiting with code %d without retrying it "
                "(recovery on restart decides what survived)",
                failure.where,
                failure.error,
                FAIL_STOP_EXIT_CODE,
                extra={
                    "event": "fail_stop",
                    "fields": {
                        "where": failure.where,
                        "error": repr(failure.error),
                        "exit_code": FAIL_STOP_EXIT_CODE,
                        "note": "not retried; recovery on restart decides what survived",
                    },
                },
            )
            for stream in (sys.stderr, sys.stdout):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            self.exit(FAIL_STOP_EXIT_CODE)
        return failure

    def guard(self, where: str, work: Callable[[], object]) -> object:
        """Runs `work` (storage-thread work that writes); a storage failure in it stops the
        node (`NodeFailStopped` is raised when the injected exit returns)."""
        try:
            return work()
        except NodeFailStopped:
            raise
        except Exception as error:
            if storage_failure(error) is None:
                raise
            raise self(where, error) from error
