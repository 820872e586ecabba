"""`flotilla group ...` and `flotilla consume TOPIC --group G`: consumer groups from a shell, in
the manner of kafka-consumer-groups and rpk group.

    flotilla group list                          every group's name
    flotilla group describe G                    members; per partition: committed, end, lag, owner
                                                 (a queue group: acked floor, in flight, ...)
    flotilla group reset G TOPIC --to earliest|latest|N   (refused while G has members)
    flotilla group delete G                      (refused while G has members)
    flotilla consume TOPIC --group G [--from-beginning] [-f FORMAT] [--max N] [--idle-timeout S]

`consume --group` joins G as one member: it prints the records of the partitions it is given
(where G committed, else at the tail, or at the log start with --from-beginning, as
kafka-console-consumer) and commits each poll's records once they are written out, so a consume
run again (or another member) goes on after the last record printed. Ctrl-C commits and leaves.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import IO, Any

from flotilla.cli_format import InputError, compile_format
from flotilla.client import Client
from flotilla.types import GroupInfo

__all__ = ["add_group_parsers", "reset_target", "run_group", "run_group_consume"]

POLL_RECORDS = 500
# consume options that name partitions or offsets: a group decides those (exit 2 if given)
NOT_WITH_GROUP = {
    "partition": "--partition",
    "offset": "--offset",
    "last": "--last",
    "since": "--since",
    "exit_at_end": "-e",
    "replica": "--replica",
}


def reset_target(text: str) -> str | int:
    """`--to`'s value: earliest, latest, or an offset (argparse: anything else is a usage
    error naming it)."""
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a place to reset to: use earliest, latest or an offset (an integer >= 0)"
    )


def add_group_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "group", help="list, describe, reset or delete consumer groups"
    ).add_subparsers(dest="action", required=True)
    group.add_parser("list", parents=parents, help="every consumer group's name")
    describe = group.add_parser(
        "describe",
        parents=parents,
        help="members, and per partition the committed offset, end, lag and owner",
    )
    describe.add_argument("name")
    reset = group.add_parser(
        "reset",
        parents=parents,
        help="set a group's committed offsets of a topic (refused while it has members)",
    )
    reset.add_argument("name")
    reset.add_argument("topic")
    reset.add_argument(
        "--to",
        type=reset_target,
        required=True,
        metavar="earliest|latest|N",
        help="each partition's log start, its end, or this offset (default: none; required)",
    )
    delete = group.add_parser(
        "delete",
        parents=parents,
        help="forget a group and its offsets (refused while it has members)",
    )
    delete.add_argument("name")


def run_group(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    if args.action == "list":
        for name in client.list_groups():
            out.write(f"{name}\n")
    elif args.action == "describe":
        out.write(describe_text(client.describe_group(args.name)))
    elif args.action == "reset":
        offsets = client.reset_group_offsets(args.name, args.topic, to=args.to)
        rows = [("TOPIC", "PARTITION", "NEW-OFFSET")]
        rows += [(args.topic, str(p), str(o)) for p, o in sorted(offsets.items())]
        out.write(columns(rows))
    else:
        client.delete_group(args.name)
        out.write(f"deleted group {args.name}\n")
    out.flush()
    return 0


def columns(rows: Sequence[Sequence[str]]) -> str:
    """Rows as left-aligned columns, two spaces apart (as rpk's tables)."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def describe_text(info: GroupInfo) -> str:
    """A group as kafka-consumer-groups --describe shows one: a summary, then a row per
    partition (committed "-" where nothing is); a queue group's as `queue_text`."""
    if info.kind == "queue":
        return queue_text(info)
    owners = {m.id: m.instance_id or "-" for m in info.members}
    lag = sum(p.lag for p in info.partitions)
    head = (
        f"GROUP        {info.name}\nKIND         {info.kind}\nCOORDINATOR  {info.coordinator}\n"
        f"MEMBERS      {len(info.members)}\nTOTAL-LAG    {lag}\n\n"
    )
    rows = [("TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MEMBER", "INSTANCE")]
    for p in sorted(info.partitions, key=lambda p: (p.topic, p.partition)):
        rows.append(
            (
                p.topic,
                str(p.partition),
                "-" if p.committed is None else str(p.committed),
                str(p.high_watermark),
                str(p.lag),
                p.owner or "-",
                owners.get(p.owner or "", "-"),
            )
        )
    return head + columns(rows)


def queue_text(info: GroupInfo) -> str:
    """A queue group: its options, then per partition the end, the acked floor, the next
    offset never handed out, how many records are in flight, waiting and pending dead-letter,
    and how many were acked and dead-lettered."""
    options = info.queue
    rows = [
        ("TOPIC", "PARTITION", "END", "ACKED-FLOOR", "NEXT", "IN-FLIGHT", "WAITING", "ACKED",
         "DEAD-LETTERED", "DLQ-PENDING"),
    ]  # fmt: skip
    in_flight = dead = 0
    for p in sorted(info.partitions, key=lambda p: (p.topic, p.partition)):
        q = p.queue
        if q is None:
            rows.append((p.topic, str(p.partition), str(p.high_watermark), *("-",) * 7))
            continue
        in_flight += q.in_flight
        dead += q.dead_lettered
        rows.append(
            (p.topic, str(p.partition), str(p.high_watermark), str(q.acked_floor),
             str(q.next_offset), str(q.in_flight), str(q.waiting), str(q.acked),
             str(q.dead_lettered), str(q.dead_letters_pending))
        )  # fmt: skip
    head = (
        f"GROUP           {info.name}\nKIND            queue\n"
        f"COORDINATOR     {info.coordinator}\nMEMBERS         {len(info.members)}\n"
    )
    if options is not None:
        head += (
            f"MAX-DELIVERIES  {options.max_deliveries}\nORDERING        {options.ordering}\n"
            f"DEAD-LETTERS    {options.dead_letter_topic or '<topic>.' + info.name + '.dlq'}\n"
        )
    head += f"IN-FLIGHT       {in_flight}\nDEAD-LETTERED   {dead}\n\n"
    return head + columns(rows)


def run_group_consume(
    client: Client, args: argparse.Namespace, out: IO[bytes], err: IO[str]
) -> int:
    """Consumes `args.topic` as a member of `args.group`, committing what it printed."""
    given = [
        flag
        for name, flag in NOT_WITH_GROUP.items()
        if getattr(args, name, None) is not None and getattr(args, name) is not False
    ]
    if given:
        raise InputError(
            f"{', '.join(given)} cannot be used with --group: the group decides which partitions "
            "this member reads and from where (use --from-beginning for partitions the group "
            "has no committed offset for)"
        )
    formatter = compile_format(args.format)
    client.describe_topic(args.topic)  # TopicNotFound, or no cluster there, before joining
    printed = 0
    last_record = time.monotonic()
    start = "earliest" if args.from_beginning else "latest"
    try:
        # no auto-commit: it would commit records polled but not yet written out (Ctrl-C while
        # printing); each poll's records are committed once written, and only then
        with client.consumer(args.group, [args.topic], start=start, auto_commit=False) as consumer:
            while args.max is None or printed < args.max:
                wait_s = 1.0
                if args.idle_timeout is not None:
                    wait_s = args.idle_timeout - (time.monotonic() - last_record)
                    if wait_s <= 0:
                        break
                wanted = POLL_RECORDS if args.max is None else min(POLL_RECORDS, args.max - printed)
                records = consumer.poll(max_records=wanted, timeout_s=min(wait_s, 1.0))
                if not records:
                    continue
                for record in records:
                    out.write(formatter(record.topic, record.partition, record))
                out.flush()
                printed += len(records)
                last_record = time.monotonic()
                consumer.commit()  # what was written out, and only that
    finally:
        err.write(f"consumed {printed} records\n")
        err.flush()
    return 0
