"""The `flotilla` command line.

    flotilla node --id ID --listen HOST:PORT --data-dir DIR
                  [--advertise HOST:PORT] [--join HOST:PORT ...] [--event-loop auto|uvloop|asyncio]
                  [--controllers ID=HOST:PORT,...] [--weight W] [--rack R]
                  [--config FILE] [--dial-map FILE] [--metrics HOST:PORT]
    flotilla dev [--nodes 3] [--data-dir DIR]      a local cluster on loopback (Ctrl-C stops it)
    flotilla demo [--count N]                      the main job (see flotilla.demo)
    flotilla topic create NAME [--partitions P] [--replication-factor R]
    flotilla topic list | flotilla topic describe NAME
    flotilla produce TOPIC [--key K] [--partition N]     one record per stdin line
    flotilla consume TOPIC --partition N [--from-beginning | --offset O] [--max N] [--follow]
                     [--replica ID]
    flotilla status [--json]

Client commands take `--bootstrap HOST:PORT` (default: $FLOTILLA_BOOTSTRAP, else the local dev
cluster at 127.0.0.1:7001). The first node started without `--join` bootstraps the cluster.
Ctrl-C or SIGTERM stops a node gracefully: its leaderships move away first, then it leaves the
membership.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from flotilla.cli_node import DEV_BASE_PORT, EVENT_LOOPS, add_server_parsers, run_server_command

__all__ = ["EVENT_LOOPS", "main"]

SERVER_COMMANDS = ("node", "dev", "demo")


def _client_parsers(sub: Any) -> None:
    bootstrap = argparse.ArgumentParser(add_help=False)
    bootstrap.add_argument(
        "--bootstrap",
        default=os.environ.get("FLOTILLA_BOOTSTRAP", f"127.0.0.1:{DEV_BASE_PORT}"),
        metavar="HOST:PORT",
        help="any node of the cluster (default: $FLOTILLA_BOOTSTRAP or the local dev cluster)",
    )
    topic = sub.add_parser(
        "topic", help="create, list, describe, alter or delete topics"
    ).add_subparsers(dest="action", required=True)
    create = topic.add_parser("create", parents=[bootstrap], help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument(
        "--replication-factor",
        type=int,
        default=0,
        help="default: 3, or the live members if fewer (0)",
    )
    create.add_argument("--retention-bytes", type=int, default=0)
    create.add_argument("--retention-ms", type=int, default=0)
    topic.add_parser("list", parents=[bootstrap], help="list topics")
    describe = topic.add_parser(
        "describe", parents=[bootstrap], help="partitions, leaders, replicas"
    )
    describe.add_argument("name")
    alter = topic.add_parser(
        "alter",
        parents=[bootstrap],
        help="add partitions, or change retention (0: unlimited); what is not given stays",
    )
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, default=None, help="more than it has")
    alter.add_argument("--retention-bytes", type=int, default=None)
    alter.add_argument("--retention-ms", type=int, default=None)
    delete = topic.add_parser("delete", parents=[bootstrap], help="delete a topic")
    delete.add_argument("name")

    produce = sub.add_parser("produce", parents=[bootstrap], help="write stdin lines as records")
    produce.add_argument("topic")
    produce.add_argument("--key", help="key for every record (default: none, round-robin)")
    produce.add_argument("--partition", type=int)

    consume = sub.add_parser("consume", parents=[bootstrap], help="print records' values")
    consume.add_argument("topic")
    consume.add_argument("--partition", type=int, required=True)
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start")
    start.add_argument("--offset", type=int, help="start at this offset")
    consume.add_argument("--max", type=int, help="stop after this many records")
    consume.add_argument("--follow", action="store_true", help="keep following the tail")
    consume.add_argument("--replica", help="read from this member (default: any replica)")

    status = sub.add_parser("status", parents=[bootstrap], help="members and partitions")
    status.add_argument("--json", action="store_true", help="machine-readable output")


def _run_client_command(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415 (keep `flotilla node` start-up lean)

    from flotilla import tools  # noqa: PLC0415
    from flotilla.client import Client  # noqa: PLC0415
    from flotilla.errors import FlotillaError  # noqa: PLC0415

    console = Console()
    try:
        with Client(args.bootstrap, timeout_s=15) as client:
            if args.command == "topic":
                if args.action == "create":
                    client.create_topic(
                        args.name,
                        args.partitions,
                        args.replication_factor,
                        retention_bytes=args.retention_bytes,
                        retention_ms=args.retention_ms,
                    )
                    tools.describe_topic(client, args.name, console)
                elif args.action == "list":
                    for name in client.list_topics():
                        print(name)
                elif args.action == "describe":
                    tools.describe_topic(client, args.name, console)
                elif args.action == "alter":
                    client.alter_topic(
                        args.name,
                        partitions=args.partitions,
                        retention_bytes=args.retention_bytes,
                        retention_ms=args.retention_ms,
                    )
                    tools.describe_topic(client, args.name, console)
                else:
                    client.delete_topic(args.name)
                    print(f"deleted {args.name}")
            elif args.command == "produce":
                key = args.key.encode() if args.key is not None else None
                tools.produce_lines(
                    client,
                    args.topic,
                    sys.stdin.buffer,
                    sys.stdout,
                    key=key,
                    partition=args.partition,
                )
            elif args.command == "consume":
                start: str | int = (
                    "beginning"
                    if args.from_beginning
                    else args.offset
                    if args.offset is not None
                    else "end"
                )
                out = sys.stdout.buffer
                for value in tools.consume(
                    client, args.topic, args.partition, start, args.max, args.follow, args.replica
                ):
                    out.write(value + b"\n")
                    if args.follow:
                        out.flush()
                out.flush()
            elif args.command == "status":
                tools.status(client, console, as_json=args.json)
    except FlotillaError as error:
        print(f"flotilla: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="flotilla", description="Flotilla: a replicated, partitioned log."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_server_parsers(sub)
    _client_parsers(sub)
    args = parser.parse_args(argv)
    if args.command in SERVER_COMMANDS:
        return run_server_command(args)
    return _run_client_command(args)
