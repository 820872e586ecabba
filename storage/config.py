"""Configuration of a segmented log: one frozen dataclass with documented defaults and units."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from storage.errors import InvalidArgument

__all__ = ["FsyncMode", "FsyncPolicy", "LogConfig"]


class FsyncMode(enum.Enum):
    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class FsyncPolicy:
    """When appended bytes are made durable.

    - `always` (default): an append made with `sync=True` is fsynced before `append` returns; an
      append with `sync=False` is durable after the next `flush()` / `sync_logs()` (group commit).
    - `interval:<ms>`: the log fsyncs when an append finds the last fsync older than `interval_ms`.
    - `never`: the operating system decides; `flush()` still fsyncs when called explicitly.
    """

    mode: FsyncMode = FsyncMode.ALWAYS
    interval_ms: int = 0

    @classmethod
    def parse(cls, text: str) -> FsyncPolicy:
        text = text.strip()
        if text == "always":
            return cls(FsyncMode.ALWAYS)
        if text == "never":
            return cls(FsyncMode.NEVER)
        if text.startswith("interval:"):
            value = text.removeprefix("interval:")
            if value.isdigit() and int(value) > 0:
                return cls(FsyncMode.INTERVAL, int(value))
        raise InvalidArgument(
            f"fsync policy {text!r} is not valid: use 'always', 'never' or 'interval:<ms>' "
            "with a positive whole number of milliseconds"
        )

    def __str__(self) -> str:
        if self.mode is FsyncMode.INTERVAL:
            return f"interval:{self.interval_ms}"
        return str(self.mode.value)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one `SegmentedLog`.

    segment_bytes:   the active segment rolls once it holds this many bytes (default 64 MiB).
    max_batch_bytes: an append larger than this is refused with `BatchTooLarge` (default 8 MiB).
    fsync:           `FsyncPolicy` (default `always`).
    retention_bytes: `apply_retention` removes the oldest sealed segments while the log exceeds
                     this size (None: unlimited).
    retention_ms:    `apply_retention` removes sealed segments whose newest entry is older than
                     this (None: unlimited).
    verify_on_open:  also verify every checksum of the sealed segments on open (default: only the
                     active segment is scanned; sealed entries are verified on every read).
    """

    segment_bytes: int = 64 * 1024 * 1024
    max_batch_bytes: int = 8 * 1024 * 1024
    fsync: FsyncPolicy = FsyncPolicy()
    retention_bytes: int | None = None
    retention_ms: int | None = None
    verify_on_open: bool = False

    def __post_init__(self) -> None:
        if self.segment_bytes < 4096:
            raise InvalidArgument(
                f"segment_bytes={self.segment_bytes} is too small: use at least 4096"
            )
        if not 0 < self.max_batch_bytes < 2**32:
            raise InvalidArgument(
                f"max_batch_bytes={self.max_batch_bytes} must be between 1 and {2**32 - 1}"
            )
        for name in ("retention_bytes", "retention_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InvalidArgument(f"{name}={value} must be positive or None (unlimited)")
