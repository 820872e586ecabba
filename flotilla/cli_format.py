"""The record commands' input and output shapes: argument types (each bad value a usage error
naming it and what is valid), durations (`--delay 10s`, `--max-delay 40d`, `--invisible 30s`),
`--since`'s and `--at`'s TIME and consume's output formats (kcat-style templates or JSON
lines)."""

from __future__ import annotations

import argparse
import base64
import json
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from proto.records import Record

__all__ = [
    "FIELDS",
    "Formatter",
    "InputError",
    "at_time",
    "compile_format",
    "delay",
    "duration_ms",
    "duration_text",
    "header",
    "max_delay",
    "non_negative",
    "parse_since",
    "positive",
    "seconds",
    "since",
]

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
FIELDS = {
    "t": "topic",
    "p": "partition",
    "o": "offset",
    "k": "key",
    "K": "key length (-1: no key)",
    "v": "value",
    "S": "value length",
    "T": "timestamp (ms since the epoch)",
    "h": "headers (name=value,...)",
}
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}


class InputError(Exception):
    """Bad input to a record command (an argument or a line of input); exit status 2."""


# -- argument types (argparse turns their ArgumentTypeError into a usage error, exit 2) ----------
def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: use an integer >= 0")
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: use an integer >= 1")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: use a number of seconds > 0")
    return value


def header(text: str) -> tuple[str, bytes]:
    name, separator, value = text.partition("=")
    if not separator or not name:
        raise argparse.ArgumentTypeError(
            f"header {text!r} is invalid: use NAME=VALUE (a name, '=', a value that may be empty)"
        )
    return name, value.encode()


def duration_ms(text: str) -> int:
    """A DURATION in milliseconds: 500ms, 30s, 2m, 1.5h, 40d, or plain milliseconds (argparse:
    anything else is a usage error naming it)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use e.g. 500ms, 30s, 2m, 1h, 40d (or milliseconds)"
        )
    return int(float(match.group(1)) * _UNITS_MS[match.group(2) or "ms"])


def duration_text(ms: int) -> str:
    """A duration as the largest whole unit that states it exactly: 40d, 90m, 1500ms."""
    for unit in ("d", "h", "m", "s"):
        if ms and ms % _UNITS_MS[unit] == 0:
            return f"{ms // _UNITS_MS[unit]}{unit}"
    return f"{ms}ms"


def delay(text: str) -> int:
    """`produce --delay`'s DURATION (0 or more; the topic's max_delay_ms bounds it)."""
    return duration_ms(text)


def max_delay(text: str) -> int:
    """`topic create/alter --max-delay`'s DURATION: 1s to 365d, or 0 for the default (40d)."""
    value = duration_ms(text)
    if value != 0 and not 1_000 <= value <= 365 * _UNITS_MS["d"]:
        raise argparse.ArgumentTypeError(
            f"--max-delay {text!r} is out of range: use 1s to 365d (e.g. 7d), or 0 for the "
            "default, 40d"
        )
    return value


def at_time(text: str) -> int:
    """`produce --at`'s TIME in epoch milliseconds: ISO-8601 with a zone, `Z` or an offset
    (2026-12-01T09:00:00Z, 2026-12-01T10:00:00+01:00). A time without a zone is refused: a
    delivery time is not to depend on the machine the command runs on."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"--at {text!r} is not a time with a zone: use ISO-8601 ending in Z or an offset, "
            "e.g. 2026-12-01T09:00:00Z or 2026-12-01T10:00:00+01:00"
        )
    return int(moment.timestamp() * 1000)


def parse_since(text: str, now_ms: int | None = None) -> int:
    """`--since`'s TIME as milliseconds since the epoch: ISO-8601 (`2026-11-25T17:00:00Z`,
    `2026-11-25 17:00`; without a zone: this machine's local time), a duration ago (`-5m`,
    `90s`, `1.5h`, `2d`, `250ms`; the sign is optional) or epoch milliseconds (`1764090000000`)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    relative = re.fullmatch(r"-?(\d+(?:\.\d+)?)(ms|s|m|h|d)", text.strip())
    if relative:
        return now - int(float(relative.group(1)) * _UNITS_MS[relative.group(2)])
    if text.strip().isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--since {text!r} is not a time: use ISO-8601 (2026-11-25T17:00:00Z; without a "
            "zone, local time), a duration ago (-5m, 90s, 2h, 1d) or epoch milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as `date` shows it
    return int(moment.timestamp() * 1000)


def since(text: str) -> int:
    return parse_since(text)


Formatter = Callable[[str, int, Record], bytes]


def compile_format(template: str) -> Formatter:
    """A function printing one record: `json`, or a kcat-style template (see FIELDS)."""
    if template == "json":
        return _json_line
    parts: list[bytes | str] = []  # literal bytes, or a field code
    literal = bytearray()
    index = 0
    while index < len(template):
        char = template[index]
        following = template[index + 1] if index + 1 < len(template) else ""
        if char == "%" and following in FIELDS:
            if literal:
                parts.append(bytes(literal))
                literal.clear()
            parts.append(following)
        elif char == "%" and following == "%":
            literal += b"%"
        elif char == "\\" and following in _ESCAPES:
            literal += _ESCAPES[following]
        elif char == "%":
            valid = ", ".join(f"%{code}" for code in FIELDS)
            raise InputError(
                f"--format {template!r}: %{following} is not a field; use {valid}, %% or 'json'"
            )
        else:
            literal += char.encode()
            index += 1
            continue
        index += 2
    if literal:
        parts.append(bytes(literal))
    last = parts[-1] if parts else b""
    if not (isinstance(last, bytes) and last.endswith(b"\n")):
        parts.append(b"\n")

    def formatted(topic: str, partition: int, record: Record) -> bytes:
        return b"".join(
            part if isinstance(part, bytes) else _field(part, topic, partition, record)
            for part in parts
        )

    return formatted


def _field(code: str, topic: str, partition: int, record: Record) -> bytes:
    if code == "v":
        return record.value
    if code == "k":
        return record.key or b""
    if code == "o":
        return str(record.offset).encode()
    if code == "p":
        return str(partition).encode()
    if code == "t":
        return topic.encode()
    if code == "T":
        return str(record.timestamp_ms).encode()
    if code == "K":
        return str(-1 if record.key is None else len(record.key)).encode()
    if code == "S":
        return str(len(record.value)).encode()
    return b",".join(name.encode() + b"=" + value for name, value in record.headers)


def _text(data: bytes) -> tuple[str, bool]:
    """UTF-8 text, or base64 (then True) for bytes that are not."""
    try:
        return data.decode(), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), True


def _json_line(topic: str, partition: int, record: Record) -> bytes:
    """One JSON object: key and value as UTF-8 text, or base64 with `key_encoding` /
    `value_encoding: "base64"` when they are not UTF-8; headers as [name, value] pairs."""
    line: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "key": None,
    }
    if record.key is not None:
        line["key"], encoded = _text(record.key)
        if encoded:
            line["key_encoding"] = "base64"
    line["value"], encoded = _text(record.value)
    if encoded:
        line["value_encoding"] = "base64"
    line["headers"] = [[name, _text(value)[0]] for name, value in record.headers]
    return json.dumps(line, ensure_ascii=False).encode() + b"\n"
