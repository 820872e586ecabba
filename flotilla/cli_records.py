"""`flotilla produce` and `flotilla consume`: records in and out of a topic from a shell, in the
manner of kafka-console-producer/-consumer, kcat and rpk.

consume: every partition by default, merged in arrival order (`--partition N` narrows to one).
Where to start (one of): the tail (default: only records written from now on), `--from-beginning`,
`--offset N`, `--last N` (the last N of each partition) or `--since TIME` (the first record of each
partition stamped at or after TIME). It then follows the tail, like kafka-console-consumer, until
`--max` records, `--idle-timeout` seconds without a record, `-e` (the end as of the start) or Ctrl-C
(exit 130, no traceback). A count of what it printed goes to stderr.

produce: one record per line of FILE or stdin; `partition offset` per record on stdout and a
summary (records, bytes, rate) on stderr.

Usage errors exit 2 with a message naming the bad value and what is valid; errors from the
cluster exit 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import queue
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from flotilla._routing import Record
from flotilla.client import Client
from flotilla.errors import FlotillaError, TopicNotFound

__all__ = [
    "InputError",
    "add_record_parsers",
    "compile_format",
    "parse_since",
    "run_consume",
    "run_produce",
]

POLL_S = 0.5  # how long a partition's reader waits at the tail before it checks for a stop
QUEUE_BATCHES = 8  # batches read ahead of the printer, per consume (memory stays bounded)
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


def add_record_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    produce = sub.add_parser(
        "produce",
        parents=parents,
        help="write lines of a file or stdin as records",
        description="One record per line of FILE (default: stdin). Prints `partition offset` per "
        "record, then a summary (records, bytes, rate) on stderr.",
    )
    produce.add_argument("topic")
    produce.add_argument(
        "file", nargs="?", default="-", help="read lines from this file (default: - , stdin)"
    )
    keys = produce.add_mutually_exclusive_group()
    keys.add_argument("--key", help="key for every record (default: none, round-robin)")
    keys.add_argument(
        "--key-separator",
        metavar="SEP",
        help="each line is KEY<SEP>VALUE, split at the first SEP (default: no key in the line)",
    )
    produce.add_argument(
        "-H",
        "--header",
        dest="headers",
        action="append",
        type=header,
        default=[],
        metavar="NAME=VALUE",
        help="a header on every record; repeat for more (default: none)",
    )
    produce.add_argument(
        "--partition",
        type=non_negative,
        help="write every record to this partition (default: by key, else round-robin)",
    )
    produce.add_argument(
        "--acks",
        choices=("all", "leader"),
        default="all",
        help="all: acknowledged once durable on a quorum; leader: once the leader appended it, "
        "may be lost on failover (default: %(default)s)",
    )

    fields = ", ".join(f"%%{code} {meaning}" for code, meaning in FIELDS.items())
    consume = sub.add_parser(
        "consume",
        parents=parents,
        help="print records (every partition; follows the tail)",
        description="Prints records of every partition (or --partition N), merged, then follows "
        "the tail until --max, --idle-timeout, -e or Ctrl-C (exit 130).",
    )
    consume.add_argument("topic")
    consume.add_argument(
        "--partition",
        type=non_negative,
        help="read only this partition (default: every partition)",
    )
    start = consume.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at each partition's log start (default: the tail, new records only)",
    )
    start.add_argument(
        "--offset",
        type=non_negative,
        help="start at this offset of each partition (default: the tail)",
    )
    start.add_argument(
        "--last",
        type=positive,
        metavar="N",
        help="start N records before each partition's end (default: the tail)",
    )
    start.add_argument(
        "--since",
        type=since,
        metavar="TIME",
        help="start at each partition's first record stamped at or after TIME: ISO-8601 "
        "(2026-11-25T17:00:00Z; no zone: local time), a duration ago (-5m, 2h, 1d) or epoch ms "
        "(default: the tail)",
    )
    consume.add_argument(
        "-f",
        "--format",
        default="%v",
        help=f"json (one object per line) or a template of {fields}, %%%% for %%, \\n \\t; a "
        "newline follows each record unless the template ends in one (default: %(default)s)",
    )
    consume.add_argument(
        "--max", type=positive, help="stop after this many records (default: no limit)"
    )
    consume.add_argument(
        "--idle-timeout",
        type=seconds,
        metavar="S",
        help="stop after S seconds without a record (default: wait for ever)",
    )
    consume.add_argument(
        "-e",
        "--exit-at-end",
        action="store_true",
        help="stop at each partition's end as of the start instead of following the tail",
    )
    consume.add_argument(
        "--follow", action="store_true", help="follow the tail (the default; kept for old scripts)"
    )
    consume.add_argument(
        "--replica", help="read from this member (default: any replica of each partition)"
    )


# -- produce ---------------------------------------------------------------------------------------
def open_input(path: str) -> IO[bytes]:
    """The lines a produce reads: stdin for "-", else the file (InputError naming it)."""
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as error:
        raise InputError(f"cannot read {path!r}: {error.strerror}") from None


def split_lines(
    lines: Iterable[bytes], separator: bytes | None, key: bytes | None
) -> Iterator[tuple[bytes | None, bytes]]:
    """(key, value) per line, its line ending removed; with `separator`, the key is what comes
    before its first occurrence (InputError naming the line that has none)."""
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip(b"\r\n")
        if separator is None:
            yield key, line
            continue
        found_key, found, value = line.partition(separator)
        if not found:
            shown = line[:60].decode(errors="replace")
            raise InputError(
                f"line {number} ({shown!r}) has no key separator {separator.decode()!r}: with "
                "--key-separator each line is KEY<SEP>VALUE"
            )
        yield found_key, value


def run_produce(client: Client, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    source = open_input(args.file)
    separator = args.key_separator.encode() if args.key_separator is not None else None
    if separator == b"":
        raise InputError("--key-separator '' is invalid: use one or more characters, e.g. ':'")
    key = args.key.encode() if args.key is not None else None
    headers = list(args.headers) or None
    count = size = 0
    started = time.monotonic()
    try:
        with client.producer(linger_ms=5) as producer:
            pending = []
            try:
                for record_key, value in split_lines(source, separator, key):
                    pending.append(
                        producer.send(
                            args.topic,
                            value,
                            key=record_key,
                            partition=args.partition,
                            headers=headers,
                        )
                    )
                    size += len(value) + len(record_key or b"")
                    if len(pending) >= 1000:
                        count += _print_results(pending, out)
                        pending = []
            finally:  # what was sent before a bad line is written and reported
                producer.flush()
                count += _print_results(pending, out)
    finally:
        if source is not sys.stdin.buffer:
            source.close()
        elapsed = max(time.monotonic() - started, 1e-6)
        err.write(
            f"produced {count} records, {size} bytes in {elapsed:.2f} s "
            f"({count / elapsed:,.0f} records/s, {size / elapsed / 1e6:.2f} MB/s)\n"
        )
        err.flush()
    return 0


def _print_results(futures: list[Any], out: IO[str]) -> int:
    written = 0
    try:
        for future in futures:
            meta = future.result()
            out.write(f"{meta.partition} {meta.offset}\n")
            written += 1
    finally:
        out.flush()
    return written


# -- consume ---------------------------------------------------------------------------------------
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


@dataclass(frozen=True, slots=True)
class _Done:
    partition: int


def offset_for_time(
    client: Client, topic: str, partition: int, low: int, high: int, timestamp_ms: int
) -> int:
    """The first offset in [low, high) whose record is stamped at or after `timestamp_ms`
    (`high` if none), by bisection: it assumes timestamps grow with offsets, as one producer's
    clock makes them (Kafka's time index assumes the same of its maximum)."""
    while low < high:
        middle = (low + high) // 2
        found = client.read(topic, partition, middle, max_records=1)
        if not found:
            high = middle
        elif found[0].timestamp_ms < timestamp_ms:
            low = found[0].offset + 1
        else:
            high = middle
    return low


def start_offsets(client: Client, args: argparse.Namespace) -> dict[int, tuple[int, int | None]]:
    """partition -> (first offset to print, end to stop at or None to follow the tail)."""
    info = client.describe_topic(args.topic)
    count = len(info.partitions)
    if args.partition is not None and args.partition >= count:
        raise TopicNotFound(
            f"partition {args.partition} of topic {args.topic!r} does not exist: valid "
            f"partitions are 0..{count - 1}"
        )
    chosen = [args.partition] if args.partition is not None else list(range(count))
    plan: dict[int, tuple[int, int | None]] = {}
    for index in chosen:
        state = info.partitions[index]
        start, end = state.log_start, state.high_watermark
        if args.from_beginning:
            first = start
        elif args.offset is not None:
            first = args.offset
        elif args.last is not None:
            first = max(start, end - args.last)
        elif args.since is not None:
            first = offset_for_time(client, args.topic, index, start, end, args.since)
        else:
            first = end
        plan[index] = (first, end if args.exit_at_end else None)
    return plan


def _read_partition(
    client: Client,
    args: argparse.Namespace,
    partition: int,
    offset: int,
    end: int | None,
    found: queue.Queue[Any],
    stop: threading.Event,
) -> None:
    """One partition's reader: long polls from `offset` (to `end`, if set) into `found`."""

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                found.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    try:
        while not stop.is_set() and (end is None or offset < end):
            records = client.poll(
                args.topic, partition, offset, timeout_s=POLL_S, replica=args.replica
            )
            if end is not None:
                records = [r for r in records if r.offset < end]
            if records:
                offset = records[-1].offset + 1
                if not put((partition, records)):
                    return
    except FlotillaError as error:
        put(error)
    finally:
        put(_Done(partition))


def run_consume(client: Client, args: argparse.Namespace, out: IO[bytes], err: IO[str]) -> int:
    """Prints the records `args` asks for; returns the exit status (KeyboardInterrupt is the
    caller's: it exits 130)."""
    formatter = compile_format(args.format)
    plan = start_offsets(client, args)
    found: queue.Queue[Any] = queue.Queue(QUEUE_BATCHES)
    stop = threading.Event()
    readers = [
        threading.Thread(
            target=_read_partition,
            args=(client, args, partition, first, end, found, stop),
            name=f"flotilla-consume-{partition}",
            daemon=True,
        )
        for partition, (first, end) in plan.items()
    ]
    printed = 0
    finished = 0
    last_record = time.monotonic()
    try:
        for reader in readers:
            reader.start()
        while finished < len(readers):
            wait_s = 1.0
            if args.idle_timeout is not None:
                wait_s = args.idle_timeout - (time.monotonic() - last_record)
                if wait_s <= 0:
                    break
            try:
                item = found.get(timeout=min(wait_s, 1.0))
            except queue.Empty:
                continue
            if isinstance(item, _Done):
                finished += 1
                continue
            if isinstance(item, FlotillaError):
                raise item
            partition, records = item
            if args.max is not None:
                records = records[: args.max - printed]
            out.write(b"".join(formatter(args.topic, partition, r) for r in records))
            out.flush()
            printed += len(records)
            last_record = time.monotonic()
            if args.max is not None and printed >= args.max:
                break
    finally:
        stop.set()
        deadline = time.monotonic() + 5
        for reader in readers:
            if reader.is_alive():
                reader.join(max(0.0, deadline - time.monotonic()))
        err.write(f"consumed {printed} records\n")
        err.flush()
    return 0
