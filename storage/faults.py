"""The disk fault hook: injected EIO / ENOSPC on the storage layer's writes and fsyncs.

Armed only by a test harness, never in production: by the environment variable
`FLOTILLA_DISK_FAULTS=<path of a JSON control file>` (read once, when `storage.disk` is
imported), or in-process with `storage.disk.arm_faults(path)`. While armed, every file write (`pwritev`, `write`)
and every `fsync` that `storage` does (segments, indexes, `log.meta`, the state journal, atomic
writes) first consults the control file, which holds a JSON object naming the operations to
fail and how:

    {}                                  no faults (so does a missing or empty file)
    {"fsync": "EIO"}                    every fsync fails with EIO
    {"write": "ENOSPC"}                 every write fails with ENOSPC
    {"write": "EIO", "fsync": "EIO"}    both

The failing operation raises `OSError(errno.EIO or errno.ENOSPC, ...)` exactly as the OS
would, and does nothing else. The file is re-read only when its mtime or size changes.
When disarmed the hook costs one `is None` test per operation (see `storage.disk.OsDisk`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading

__all__ = ["ENV_VAR", "FaultControl", "from_environment"]

ENV_VAR = "FLOTILLA_DISK_FAULTS"
OPERATIONS = ("write", "fsync")
ERRNOS = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC}

log = logging.getLogger("flotilla.storage.faults")


class FaultControl:
    """Reads the control file (when it changed) and raises the fault it names."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._faults: dict[str, int] = {}

    def check(self, operation: str) -> None:
        """Raises the configured `OSError` for `operation` ("write" or "fsync"), if any."""
        code = self._current().get(operation)
        if code is not None:
            raise OSError(code, f"{os.strerror(code)} (injected by {ENV_VAR})")

    def _current(self) -> dict[str, int]:
        try:
            stat = os.stat(self.path)
            stamp: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp != self._stamp:
                self._faults = _parse(self.path) if stamp is not None else {}
                self._stamp = stamp
            return self._faults


def _parse(path: str) -> dict[str, int]:
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except FileNotFoundError:
        return {}
    if not raw.strip():
        return {}
    try:
        document = json.loads(raw)
        if not isinstance(document, dict):
            raise ValueError(f"a JSON object is needed, not {type(document).__name__}")
        faults = {}
        for operation, name in document.items():
            if operation not in OPERATIONS or name not in ERRNOS:
                raise ValueError(
                    f"{operation!r}: {name!r} is not a fault: use operations {OPERATIONS} "
                    f"with errors {tuple(ERRNOS)}"
                )
            faults[operation] = ERRNOS[name]
    except ValueError as error:
        # a harness bug, not a disk fault: say so loudly and inject nothing
        log.error("disk fault control file %s is invalid (%s); injecting nothing", path, error)
        return {}
    return faults


def from_environment() -> FaultControl | None:
    path = os.environ.get(ENV_VAR)
    return FaultControl(path) if path else None
