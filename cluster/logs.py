"""A node's log: one line per event an operator needs, as logfmt (default) or JSON.

`configure(node_id, level, fmt)` is the one call a node makes at start (`flotilla node`): the
root logger writes to stderr at `level` (the `--log-level` flag, else `FLOTILLA_LOG`, else
INFO), one line per record, in `fmt`:

    logfmt  ts=2026-11-25T17:49:00.123Z level=info node=n1 event=election_won topic=t partition=3 term=7
    json    {"ts": "2026-11-25T17:49:00.123Z", "level": "info", "node": "n1", "event": "election_won", ...}

An event is a record made by `event(logger, name, **fields)`: `event=<name>` then its fields, in
the order given. Any other record (a library's, a plain `log.warning(...)`) has `msg="..."`
instead; an exception's traceback goes in `exc="..."` on the same line (logfmt escapes newlines),
so one record is always one line. `logger=` closes every line.

Chatty libraries (grpc, pysyncobj) stay at WARNING whatever the level.

Bursts: 1,000 partitions electing at once must not write 1,000 lines. `EventBudget` lets
`per_window` events of a kind through per window (1 s) and counts the rest; when a window in
which events were held back ends, one summary line gives the counts (`tick()` closes a window
even when no further event comes).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from cluster.errors import ClusterError

__all__ = [
    "FORMATS",
    "LEVELS",
    "LOG_ENV",
    "EventBudget",
    "JsonFormatter",
    "LogConfigError",
    "LogfmtFormatter",
    "configure",
    "event",
    "log_event",
    "parse_logfmt",
]

LOG_ENV = "FLOTILLA_LOG"
LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("logfmt", "json")
DEFAULT_LEVEL = "info"
# libraries that log at INFO for things an operator does not act on
QUIET_LIBRARIES = ("grpc", "grpc._cython", "grpc.aio", "pysyncobj", "asyncio", "urllib3")


class LogConfigError(ClusterError, ValueError):
    """A log level or format that is not one of the valid ones."""


def event(
    logger: logging.Logger,
    name: str,
    /,
    level: int = logging.INFO,
    exc_info: BaseException | None = None,
    **fields: Any,
) -> None:
    """Logs event `name` with `fields` (rendered `key=value`, in this order); `exc_info`'s
    traceback goes in `exc=` on the same line."""
    log_event(logger, name, fields, level, exc_info)


def log_event(
    logger: logging.Logger,
    name: str,
    fields: Mapping[str, Any],
    level: int = logging.INFO,
    exc_info: BaseException | None = None,
) -> None:
    """`event` with the fields in a mapping."""
    if logger.isEnabledFor(level):
        logger.log(level, name, exc_info=exc_info, extra={"event": name, "fields": fields})


# -- formatting ------------------------------------------------------------------------------------
def _timestamp(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _fields(record: logging.LogRecord, node_id: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [
        ("ts", _timestamp(record.created)),
        ("level", record.levelname.lower()),
        ("node", node_id),
    ]
    name = getattr(record, "event", None)
    if name:
        out.append(("event", name))
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            out.extend((str(key), value) for key, value in fields.items())
    else:
        out.append(("msg", record.getMessage()))
    if record.exc_info:
        out.append(("exc", logging.Formatter().formatException(record.exc_info)))
    out.append(("logger", record.name))
    return out


def _logfmt_value(value: Any) -> str:
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        value = ",".join(str(each) for each in value)
    text = str(value)
    if text and not any(c in text for c in ' ="\\') and text.isprintable():
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


class LogfmtFormatter(logging.Formatter):
    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(record, self.node_id))


class JsonFormatter(logging.Formatter):
    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {}
        for key, value in _fields(record, self.node_id):
            if isinstance(value, (set, frozenset)):
                fields[key] = sorted(value)
            else:
                fields[key] = list(value) if isinstance(value, tuple) else value
        return json.dumps(fields, default=str, separators=(",", ":"))


def parse_logfmt(line: str) -> dict[str, str]:
    """The fields of one logfmt line (the inverse of `LogfmtFormatter`; tests and tools use it).
    Raises ValueError on a line that is not logfmt."""
    fields: dict[str, str] = {}
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i] == " ":
            i += 1
        if i >= n:
            break
        equals = line.find("=", i)
        if equals < 0 or " " in line[i:equals] or equals == i:
            raise ValueError(f"not a logfmt line (no key=value at column {i}): {line!r}")
        key = line[i:equals]
        i = equals + 1
        if i < n and line[i] == '"':
            i += 1
            chars: list[str] = []
            while i < n and line[i] != '"':
                if line[i] == "\\" and i + 1 < n:
                    i += 1
                    chars.append({"n": "\n", "r": "\r", "t": "\t"}.get(line[i], line[i]))
                else:
                    chars.append(line[i])
                i += 1
            if i >= n:
                raise ValueError(f"not a logfmt line (unterminated quote in {key!r}): {line!r}")
            i += 1
            fields[key] = "".join(chars)
        else:
            end = line.find(" ", i)
            end = n if end < 0 else end
            fields[key] = line[i:end]
            i = end
    return fields


# -- configuration ---------------------------------------------------------------------------------
def configure(node_id: str, level: str | None = None, fmt: str = "logfmt") -> int:
    """Sends every record to stderr, one line each, in `fmt` ("logfmt" or "json"), at `level`
    (else `FLOTILLA_LOG`, else INFO). Returns the level set; raises `LogConfigError` naming the
    bad value and the valid ones (and changes nothing)."""
    source = "--log-level"
    if level is None:
        level, source = os.environ.get(LOG_ENV) or DEFAULT_LEVEL, LOG_ENV
    name = level.strip().lower()
    if name == "warn":
        name = "warning"
    if name not in LEVELS:
        raise LogConfigError(
            f"{source}={level!r} is not a log level; use one of {', '.join(LEVELS)}"
        )
    if fmt not in FORMATS:
        raise LogConfigError(
            f"--log-format={fmt!r} is not a log format; use one of {', '.join(FORMATS)}"
        )
    formatter: logging.Formatter = (
        JsonFormatter(node_id) if fmt == "json" else LogfmtFormatter(node_id)
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelName(name.upper())
    root.setLevel(numeric)
    for library in QUIET_LIBRARIES:
        logging.getLogger(library).setLevel(max(logging.WARNING, numeric))
    return int(numeric)


# -- bursts ----------------------------------------------------------------------------------------
class EventBudget:
    """Logs at most `per_window` events per `window_s`; the rest are counted, and the window's
    counts of every event name go out as one `summary` line when the window closes. Thread-safe
    (retention cuts are logged from the storage thread)."""

    def __init__(
        self,
        logger: logging.Logger,
        summary: str,
        per_window: int = 20,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.summary = summary
        self.per_window = per_window
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._window_start = clock()
        self._logged = 0
        self._held = 0
        self._counts: dict[str, int] = {}

    def __call__(self, name: str, /, **fields: Any) -> None:
        """Logs event `name` (or counts it, past this window's budget)."""
        with self._lock:
            self._roll(self.clock())
            self._counts[name] = self._counts.get(name, 0) + 1
            if self._logged >= self.per_window:
                self._held += 1
                return
            self._logged += 1
        event(self.logger, name, **fields)

    def tick(self) -> None:
        """Closes the window if its time is up (call it periodically: the summary of a burst
        must not wait for the next event)."""
        with self._lock:
            self._roll(self.clock())

    def flush(self) -> None:
        """Closes the window now (its summary, if anything was held back, goes out)."""
        with self._lock:
            self._roll(self.clock(), force=True)

    def _roll(self, now: float, force: bool = False) -> None:
        if now - self._window_start < self.window_s and not force:
            return
        if self._held:
            fields: dict[str, Any] = {"window_s": round(now - self._window_start, 3)}
            fields.update(sorted(self._counts.items()))
            fields.update(logged=self._logged, suppressed=self._held)
            log_event(self.logger, self.summary, fields)
        self._window_start = now
        self._logged = self._held = 0
        self._counts = {}
