"""The record commands' input and output shapes: argument types (each bad value a usage error
naming it and what is valid), `--since`'s TIME and consume's output formats (kcat-style templates
or JSON lines)."""

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
    "compile_format",
    "header",
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
