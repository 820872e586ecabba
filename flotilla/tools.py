"""What the CLI's topic and status commands do (with rich output); produce and consume are in
`flotilla.cli_records`.

Each function takes an open `Client` and the console to print on, so the CLI stays a thin
parser and the commands can be tested in-process.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import IO

from rich.console import Console
from rich.table import Table

from flotilla._status import AclView, ClusterStatus, gather
from flotilla.cli_format import duration_text
from flotilla.cli_security import acl_rows
from flotilla.client import Client
from flotilla.errors import FlotillaError
from proto import flotilla_pb2 as pb
from proto.groups import is_internal

__all__ = ["describe_topic", "list_topics", "partition_health", "status"]


def list_topics(client: Client, out: IO[str]) -> list[pb.TopicInfo]:
    """Every topic with its partition count and replication factor, as aligned columns (as
    rpk's `topic list`), sorted by name; the cluster's internal topics (`__groups`) are not
    listed, as rpk hides them."""
    topics = sorted(
        (t for t in client.metadata().topics if not is_internal(t.name)), key=lambda t: t.name
    )
    rows = [("NAME", "PARTITIONS", "REPLICATION-FACTOR")] + [
        (t.name, str(len(t.partitions)), str(t.replication_factor)) for t in topics
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(2)]
    for name, partitions, factor in rows:
        out.write(f"{name:<{widths[0]}}  {partitions:<{widths[1]}}  {factor}\n")
    out.flush()
    return topics


def partition_health(partition: pb.PartitionInfo, replication_factor: int, alive: set[str]) -> str:
    """ "offline" (no leader), "under-replicated" (fewer live voters than the topic's
    replication factor, or a replica still catching up as a learner) or "ok"."""
    if not partition.leader:
        return "offline"
    live_voters = [r for r in partition.replicas if r in alive]
    if len(live_voters) < replication_factor or partition.learners:
        return "under-replicated"
    return "ok"


def describe_topic(client: Client, name: str, console: Console) -> list[str]:
    """The topic's partitions: leader, voters, learners, offsets, and a status per partition
    (`partition_health`); under-replicated and offline ones are marked. Returns the statuses."""
    info = client.describe_topic(name)  # TopicNotFound, after the metadata grace, if none
    metadata = client.metadata()
    alive = {m.id for m in metadata.members if m.state == pb.ALIVE}
    found = [t for t in metadata.topics if t.name == name]
    partitions = found[0].partitions if found else []
    retention = ", ".join(
        f"{what} {value}"
        for what, value in (
            ("retention bytes", info.retention_bytes),
            ("retention ms", info.retention_ms),
            ("max delay", duration_text(info.max_delay_ms) if info.max_delay_ms else 0),
        )
        if value
    )
    table = Table(
        title=f"topic {info.name} (replication factor {info.replication_factor}"
        f"{', ' + retention if retention else ''})"
    )
    columns = ("partition", "leader", "replicas", "learners", "high watermark", "log start")
    for column in (*columns, "pending timers"):
        table.add_column(column)
    table.add_column("status", min_width=len("UNDER-REPLICATED"), no_wrap=True)
    statuses = []
    for p in partitions:
        health = partition_health(p, info.replication_factor, alive)
        statuses.append(health)
        shown = health if health == "ok" else f"[bold red]{health.upper()}[/]"
        replicas = ",".join(r if r in alive else f"{r}(down)" for r in p.replicas)
        table.add_row(
            str(p.index),
            p.leader or "-",
            replicas,
            ",".join(p.learners) or "-",
            str(p.high_watermark),
            str(p.log_start),
            str(p.pending_timers),
            shown,
        )
    console.print(table)
    marked = sum(status != "ok" for status in statuses)
    if marked:
        console.print(f"{marked} of {len(statuses)} partitions under-replicated or offline")
    return statuses


def acl_view(client: Client) -> AclView:
    """Every ACL, or why the caller cannot see them (it may not list them: that needs admin on
    "*"; or the nodes do not answer): the rest of the status stands without them."""
    try:
        return AclView(tuple(client.list_acls()))
    except FlotillaError as error:
        return AclView((), f"not shown: {error}")


def status(client: Client, console: Console, as_json: bool = False) -> ClusterStatus:
    """Members, the control plane (its leader, which controllers answer), every partition's
    leader, replicas and each replica's lag behind the leader (or why it has none), the
    replicas members report quarantined (stopped by an error of their own), and the ACLs
    (when the caller may list them)."""
    found = gather(client.metadata(), client._core.credentials, acl_view(client))
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
    if found.acls.bindings:
        acls = Table(title="ACLs")
        heading, *acl_table = acl_rows(found.acls.bindings)
        for column in heading:
            acls.add_column(column.lower())
        for acl in acl_table:
            acls.add_row(*acl)
        console.print(acls)
    else:
        console.print(f"ACLs: {found.acls.note or 'none'}")
    if found.quarantined:
        stopped = Table(title="quarantined replicas (stopped until their node restarts)")
        for column in ("node", "partition", "reason"):
            stopped.add_column(column)
        for q in found.quarantined:
            stopped.add_row(q.node, q.group, q.reason)
        console.print(stopped)
    return found
