"""What the CLI's client commands do: topics, produce, consume, status (with rich output).

Each function takes an open `Client` and the console to print on, so the CLI stays a thin
parser and the commands can be tested in-process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import IO

from rich.console import Console
from rich.table import Table

from flotilla._status import ClusterStatus, gather
from flotilla.client import Client
from flotilla.errors import OffsetOutOfRange

__all__ = ["consume", "describe_topic", "produce_lines", "status"]


def describe_topic(client: Client, name: str, console: Console) -> None:
    info = client.describe_topic(name)
    retention = ", ".join(
        f"{what} {value}"
        for what, value in (
            ("retention bytes", info.retention_bytes),
            ("retention ms", info.retention_ms),
        )
        if value
    )
    table = Table(
        title=f"topic {info.name} (replication factor {info.replication_factor}"
        f"{', ' + retention if retention else ''})"
    )
    for column in ("partition", "leader", "replicas", "high watermark", "log start"):
        table.add_column(column)
    for p in info.partitions:
        table.add_row(
            str(p.index),
            p.leader or "-",
            ",".join(p.replicas),
            str(p.high_watermark),
            str(p.log_start),
        )
    console.print(table)


def produce_lines(
    client: Client,
    topic: str,
    lines: Iterable[bytes],
    out: IO[str],
    key: bytes | None = None,
    partition: int | None = None,
) -> int:
    """One record per input line (without its newline); prints `partition offset` per record,
    in input order. Returns the number of records written."""
    count = 0
    with client.producer(linger_ms=5) as producer:
        pending = []
        for line in lines:
            pending.append(producer.send(topic, line.rstrip(b"\r\n"), key=key, partition=partition))
            if len(pending) >= 1000:
                count += _print_results(pending, out)
                pending = []
        producer.flush()
        count += _print_results(pending, out)
    return count


def _print_results(futures: list, out: IO[str]) -> int:  # type: ignore[type-arg]
    for future in futures:
        meta = future.result()
        out.write(f"{meta.partition} {meta.offset}\n")
    out.flush()
    return len(futures)


def consume(
    client: Client,
    topic: str,
    partition: int,
    start: str | int,
    limit: int | None,
    follow: bool,
    replica: str | None,
) -> Iterator[bytes]:
    """Values from `start` ('beginning', 'end' or an offset), at most `limit`, optionally
    following the tail."""
    info = client.describe_topic(topic)
    if not 0 <= partition < len(info.partitions):
        from flotilla.errors import TopicNotFound  # noqa: PLC0415

        raise TopicNotFound(
            f"partition {partition} of topic {topic!r} does not exist: valid partitions are 0..{len(info.partitions) - 1}"
        )
    state = info.partitions[partition]
    offset = (
        state.log_start
        if start == "beginning"
        else state.high_watermark
        if start == "end"
        else int(start)
    )
    seen = 0
    if follow:
        for record in client.subscribe(topic, partition, offset, replica=replica):
            yield record.value
            seen += 1
            if limit is not None and seen >= limit:
                return
        return
    while limit is None or seen < limit:
        try:
            batch = client.read(
                topic,
                partition,
                offset,
                max_records=min(10_000, (limit or 10**9) - seen),
                replica=replica,
            )
        except OffsetOutOfRange:
            if offset == state.high_watermark:
                return
            raise
        if not batch:
            return
        for record in batch:
            yield record.value
        seen += len(batch)
        offset = batch[-1].offset + 1


def status(client: Client, console: Console, as_json: bool = False) -> ClusterStatus:
    """Members, the control plane (its leader, which controllers answer), every partition's
    leader, replicas and each replica's lag behind the leader (or why it has none), and the
    replicas members report quarantined (stopped by an error of their own)."""
    found = gather(client.metadata())
    if as_json:
        json.dump(asdict(found), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return found
    member_table = Table(title="members")
    for column in ("id", "address", "state", "weight", "rack"):
        member_table.add_column(column)
    for m in found.members:
        state = (
            m.state
            if m.reachable or m.state not in ("ALIVE", "SUSPECT")
            else f"{m.state} (no answer)"
        )
        member_table.add_row(m.id, m.address, state, f"{m.weight:g}", m.rack or "-")
    console.print(member_table)
    plane = found.control_plane
    console.print(f"control plane: {plane.summary}")
    if plane.controllers:
        controllers = Table(title="controllers")
        for column in ("id", "address", "reachable", "sees leader", "links"):
            controllers.add_column(column)
        for c in plane.controllers:
            controllers.add_row(
                c.id,
                c.address,
                "yes" if c.reachable else "no",
                (c.leader or "none") if c.reachable else "-",
                ",".join(c.connected) if c.reachable else "-",
            )
        console.print(controllers)
    table = Table(title="partitions")
    for column in ("topic", "partition", "leader", "replicas", "high watermark", "lag"):
        table.add_column(column)
    for row in found.partitions:
        lag_text = ", ".join(
            [f"{r}:{n}" for r, n in sorted(row.lag.items())]
            + [f"{r}:- ({why})" for r, why in sorted(row.lag_unknown.items())]
        )
        table.add_row(
            row.topic,
            str(row.partition),
            row.leader or "-",
            ",".join(row.replicas),
            str(row.high_watermark),
            lag_text or "-",
        )
    console.print(table)
    if found.quarantined:
        stopped = Table(title="quarantined replicas (stopped until their node restarts)")
        for column in ("node", "partition", "reason"):
            stopped.add_column(column)
        for q in found.quarantined:
            stopped.add_row(q.node, q.group, q.reason)
        console.print(stopped)
    return found
