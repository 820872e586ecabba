"""`flotilla produce` and `flotilla consume`: records in and out of a topic from a shell, in the
manner of kafka-console-producer/-consumer, kcat and rpk.

consume: every partition by default, merged in arrival order (`--partition N` narrows to one).
Where to start (one of): the tail (default: only records written from now on), `--from-beginning`,
`--offset N`, `--last N` (the last N of each partition) or `--since TIME` (the first record of each
partition stamped at or after TIME). It then follows the tail, like kafka-console-consumer, until
`--max` records, `--idle-timeout` seconds without a record, `-e` (the end as of the start) or Ctrl-C
(exit 130, no traceback). A count of what it printed goes to stderr.

produce: one record per line of FILE or stdin; `partition offset` per record on stdout and a
summary (records, bytes, rate) on stderr. With `--delay 10s` or `--at 2026-12-01T09:00:00Z` the
records are delayed: accepted now, appended (and readable) at their time; each one's line is
`partition due EPOCH_MS` instead, as it has no offset yet.

Usage errors exit 2 with a message naming the bad value and what is valid; errors from the
cluster exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from flotilla.cli_format import (
    FIELDS,
    InputError,
    at_time,
    compile_format,
    delay,
    header,
    non_negative,
    positive,
    seconds,
    since,
)
from flotilla.client import Client
from flotilla.errors import FlotillaError, OffsetOutOfRange, TopicNotFound

__all__ = [
    "InputError",
    "add_record_parsers",
    "run_consume",
    "run_produce",
    "split_lines",
]

STOP_CHECK_S = 1.0  # a partition's reader notices a stop within this at a quiet tail
QUEUE_RECORDS = 10_000  # records read ahead of the printer, per consume (memory stays bounded)


def add_record_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    produce = sub.add_parser(
        "produce",
        parents=parents,
        help="write lines of a file or stdin as records",
        description="One record per line of FILE (default: stdin). Prints `partition offset` per "
        "record (a delayed one: `partition due EPOCH_MS`), then a summary (records, bytes, rate) "
        "on stderr.",
    )
    produce.add_argument("topic")
    produce.add_argument(
        "file", nargs="?", default="-", help="read lines from this file (default: - , stdin)"
    )
    keys = produce.add_mutually_exclusive_group()
    keys.add_argument(
        "--key",
        help="key for every record (default: none: unkeyed records fill one partition's batch, then the next)",
    )
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
        help="write every record to this partition (default: by key; unkeyed, one partition per batch, in turn)",
    )
    when = produce.add_mutually_exclusive_group()
    when.add_argument(
        "--delay",
        type=delay,
        metavar="DURATION",
        help="deliver each record this long after it is read (10s, 5m, 2h, 7d; at most the "
        "topic's max delay, default 40d): readers see it only then (default: at once)",
    )
    when.add_argument(
        "--at",
        type=at_time,
        metavar="TIME",
        help="deliver every record at TIME, ISO-8601 with Z or an offset "
        "(2026-12-01T09:00:00Z) (default: at once)",
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
        help="print records (every partition; follows the tail; or as a group member)",
        description="Prints records of every partition (or --partition N), merged, then follows "
        "the tail until --max, --idle-timeout, -e or Ctrl-C (exit 130). With --group G, prints "
        "the partitions the group gives this member and commits what it printed.",
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
    consume.add_argument(
        "--group",
        metavar="G",
        help="read as a member of consumer group G: the partitions G gives it, from G's committed "
        "offsets (else the tail, or the log start with --from-beginning), committing what it "
        "printed (default: no group)",
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
                            delay_ms=args.delay,
                            deliver_at_ms=args.at,
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
            if meta.deliver_at_ms is None:
                out.write(f"{meta.partition} {meta.offset}\n")
            else:  # delayed: no offset until it is due
                out.write(f"{meta.partition} due {meta.deliver_at_ms}\n")
            written += 1
    finally:
        out.flush()
    return written


# -- consume ---------------------------------------------------------------------------------------


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
            if not start <= args.offset <= end:
                raise OffsetOutOfRange(
                    f"--offset {args.offset} is out of range for {args.topic}/{index}: valid "
                    f"offsets are {start}..{end} (the log start to the high watermark)"
                )
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
    """One partition's reader: its records from `offset` (to `end`, if set) into `found`.
    A subscription: the node pushes records as they commit and a keepalive when there are none,
    so a quiet tail costs little (a poll loop would ask replicas several times a second). It
    ends after `STOP_CHECK_S` without a record, so the reader sees `stop`, and starts again."""

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
            records = client.subscribe(
                args.topic, partition, offset, args.replica, stop_after_idle_s=STOP_CHECK_S
            )
            with contextlib.closing(records):
                for record in records:
                    if end is not None and record.offset >= end:
                        break
                    if not put((partition, record)):
                        return
                    offset = record.offset + 1
                    if stop.is_set():
                        return
    except FlotillaError as error:
        put(error)
    finally:
        put(_Done(partition))


def run_consume(client: Client, args: argparse.Namespace, out: IO[bytes], err: IO[str]) -> int:
    """Prints the records `args` asks for, merged in arrival order, one reader thread per
    partition; returns the exit status (KeyboardInterrupt is the caller's: it exits 130)."""
    formatter = compile_format(args.format)
    plan = start_offsets(client, args)
    found: queue.Queue[Any] = queue.Queue(QUEUE_RECORDS)
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
            partition, record = item
            out.write(formatter(args.topic, partition, record))
            printed += 1
            last_record = time.monotonic()
            if found.empty():  # a burst is written at once, a trickle as it comes
                out.flush()
            if args.max is not None and printed >= args.max:
                break
    finally:
        stop.set()
        with contextlib.suppress(BrokenPipeError):
            out.flush()
        deadline = time.monotonic() + 3  # a reader at a quiet tail sees the stop within 1 s
        for reader in readers:
            if reader.is_alive():
                reader.join(max(0.0, deadline - time.monotonic()))
        err.write(f"consumed {printed} records\n")
        err.flush()
    return 0
