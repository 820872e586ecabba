"""The history of a chaos run: one JSON object per line, in the order events happened.

Every operation is an `invoke` followed by exactly one completion from the same process:
`ok` (it happened), `fail` (it definitely did not happen) or `info` (unknown outcome: a timeout or
an error after the request may have reached the leader). Timestamps are `time.monotonic()` seconds,
so `t` never goes backwards within one run. Nemesis and monitor events use the same shape.

Kinds of `f`:
- `produce`: `value` is the unique value written to `partition`; an `ok` carries its `offset`.
- `read`: an `ok` carries `records`, the (offset, value) pairs one fetch returned from `replica`.
- `fault-start` / `fault-stop` (process "nemesis"): `value` names the fault window ("pause#2");
  `fault-target` between them says what was done ("pause n3").
- `leader` (process "monitor"): `value` is the leader of `partition` seen at `t` ("" = none).
- queue events (`chaos.queue_workload`; judged by `chaos.queue_checker`) also carry `count` (a
  lease's delivery_count), `deadline_ms` (its deadline) and `wall_ms` (epoch ms: when the lease
  was granted, or when a settlement call began), to compare with the servers' deadlines.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

__all__ = ["Event", "EventType", "HistoryWriter", "load_history"]


class EventType(StrEnum):
    INVOKE = "invoke"
    OK = "ok"
    FAIL = "fail"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Event:
    t: float  # time.monotonic() seconds
    process: str  # "producer-3", "reader-n2", "nemesis", "monitor"
    type: EventType
    f: str  # "produce", "read", "fault-start", "fault-stop", "leader"
    partition: int = -1
    value: str = ""
    offset: int = -1
    replica: str = ""
    records: tuple[tuple[int, str], ...] = field(default=())
    error: str = ""
    count: int = -1
    deadline_ms: int = -1
    wall_ms: int = -1

    def to_json(self) -> str:
        data = {key: item for key, item in asdict(self).items() if item not in ("", -1, ())}
        data["type"] = str(self.type)
        data["t"] = round(self.t, 6)
        if self.records:
            data["records"] = [list(pair) for pair in self.records]
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Event:
        data: dict[str, Any] = json.loads(line)
        records = tuple((int(offset), str(value)) for offset, value in data.pop("records", ()))
        return cls(
            t=float(data.pop("t")),
            process=str(data.pop("process")),
            type=EventType(data.pop("type")),
            f=str(data.pop("f")),
            records=records,
            **data,
        )


class HistoryWriter:
    """Thread-safe: appends events to a JSONL file (flushed per line) and keeps them in memory."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8") if path is not None else None  # noqa: SIM115

    def record(self, process: str, type_: EventType, f: str, **fields: Any) -> Event:
        with self._lock:  # the timestamp is taken under the lock: file order == time order
            event = Event(round(time.monotonic(), 6), process, type_, f, **fields)
            self.events.append(event)
            if self._file is not None:
                self._file.write(event.to_json() + "\n")
                self._file.flush()
            return event

    def snapshot(self) -> list[Event]:
        with self._lock:
            return list(self.events)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def load_history(lines: Iterable[str] | Path) -> list[Event]:
    if isinstance(lines, Path):
        lines = lines.read_text(encoding="utf-8").splitlines()
    return [Event.from_json(line) for line in lines if line.strip()]
