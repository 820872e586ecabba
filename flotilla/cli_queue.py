"""`flotilla queue receive GROUP TOPIC`: a queue group's records from a shell, one receiver.

    flotilla queue receive G TOPIC [--ack] [-n N] [--invisible 30s] [-f text|json]
                                   [--idle-timeout S]

It joins queue group G on TOPIC and prints each record handed to it, one line each: partition,
offset, delivery count, key and value, tab-separated (`-f json`: one JSON object per line, as
`consume -f json` prints a record, with `delivery_count` and `deadline_ms` added). With `--ack`
each receive's records are acked once written out (a worker that only logs; SQS's
receive-and-delete); without, they are held until it exits, then released at once, so others
get them again (a peek: their delivery counts grew by one). It stops after `-n N` records,
`--idle-timeout` seconds without one, or Ctrl-C; a summary goes to stderr. `flotilla group
describe G` shows the queue's state per partition.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import IO, Any

from flotilla.cli_format import compile_format, duration_ms, positive, seconds
from flotilla.client import Client
from flotilla.errors import LeaseLost
from flotilla.types import Delivery

__all__ = ["add_queue_parsers", "duration_ms", "run_queue"]

RECEIVE_RECORDS = 100


def invisible(text: str) -> int:
    """`--invisible`'s DURATION, 1 s to 12 h (the coordinator's range)."""
    value = duration_ms(text)
    if not 1_000 <= value <= 43_200_000:
        raise argparse.ArgumentTypeError(
            f"--invisible {text!r} is out of range: use 1s to 12h (e.g. 30s, 5m)"
        )
    return value


def add_queue_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    queue = sub.add_parser(
        "queue", help="receive a queue group's records (competing receivers, leases)"
    ).add_subparsers(dest="action", required=True)
    receive = queue.add_parser(
        "receive",
        parents=parents,
        help="print records handed to this receiver; --ack acks them, else released at exit",
        description="Joins queue group GROUP on TOPIC and prints each record handed to it "
        "(partition, offset, delivery count, key, value; tab-separated). With --ack they are "
        "acked once printed; without, released when it exits.",
    )
    receive.add_argument("group")
    receive.add_argument("topic")
    receive.add_argument(
        "--ack", action="store_true", help="ack each record once printed (default: release at exit)"
    )
    receive.add_argument(
        "-n", "--max", type=positive, metavar="N", help="stop after N records (default: no limit)"
    )
    receive.add_argument(
        "--invisible",
        type=invisible,
        default=30_000,
        metavar="DURATION",
        help="how long a record stays this receiver's: 1s to 12h (default: 30s)",
    )
    receive.add_argument(
        "-f",
        "--format",
        choices=("text", "json"),
        default="text",
        help="text (tab-separated) or json (one object per line) (default: %(default)s)",
    )
    receive.add_argument(
        "--idle-timeout",
        type=seconds,
        metavar="S",
        help="stop after S seconds without a record (default: wait for ever)",
    )


def delivery_line(d: Delivery, as_json: bool) -> bytes:
    """One delivery as `queue receive` prints it."""
    if as_json:
        line = json.loads(compile_format("json")(d.topic, d.partition, d.record))
        line["delivery_count"] = d.delivery_count
        line["deadline_ms"] = d.deadline_ms
        return json.dumps(line, ensure_ascii=False).encode() + b"\n"
    head = f"{d.partition}\t{d.offset}\t{d.delivery_count}\t".encode()
    return head + (d.record.key or b"") + b"\t" + d.record.value + b"\n"


def run_queue(client: Client, args: argparse.Namespace, out: IO[bytes], err: IO[str]) -> int:
    """Receives from queue group `args.group` on `args.topic`, printing (and acking) records."""
    client.describe_topic(args.topic)  # TopicNotFound, or no cluster there, before joining
    as_json = args.format == "json"
    printed = 0
    last_record = time.monotonic()
    try:
        with client.queue(args.group, args.topic, invisible_ms=args.invisible) as queue:
            while args.max is None or printed < args.max:
                wait_s = 1.0
                if args.idle_timeout is not None:
                    wait_s = args.idle_timeout - (time.monotonic() - last_record)
                    if wait_s <= 0:
                        break
                wanted = RECEIVE_RECORDS
                if args.max is not None:
                    wanted = min(wanted, args.max - printed)
                deliveries = queue.receive(max_records=wanted, timeout_s=min(wait_s, 1.0))
                if not deliveries:
                    continue
                for d in deliveries:
                    out.write(delivery_line(d, as_json))
                out.flush()
                printed += len(deliveries)
                last_record = time.monotonic()
                if args.ack:
                    try:
                        queue.ack(deliveries)  # what was written out, and only that
                    except LeaseLost as lost:  # held past the deadline: another gets them
                        err.write(f"flotilla queue: {lost}\n")
    finally:
        done = "acked" if args.ack else "released"
        err.write(f"received {printed} records ({done})\n")
        err.flush()
    return 0
