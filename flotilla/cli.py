"""The `flotilla` command line.

    flotilla node --id ID --listen HOST:PORT --data-dir DIR
                  [--advertise HOST:PORT] [--join HOST:PORT ...] [--event-loop auto|uvloop|asyncio]
                  [--controllers ID=HOST:PORT,...] [--weight W] [--rack R]
                  [--config FILE] [--dial-map FILE] [--metrics HOST:PORT]
    flotilla dev [--nodes 3] [--data-dir DIR]      a local cluster on loopback (Ctrl-C stops it)
    flotilla demo [--count N]                      the main job (see flotilla.demo)
    flotilla topic create NAME [--partitions P] [--replication-factor R] [--max-delay 40d]
    flotilla topic list | flotilla topic describe NAME
    flotilla topic alter NAME [--partitions P] [--retention-ms MS] [--max-delay 7d] ...
    flotilla produce TOPIC [FILE] [--key K | --key-separator SEP] [-H NAME=VALUE ...]
                     [--partition N] [--acks all|leader]      one record per line
                     [--delay 10s | --at 2026-12-01T09:00:00Z]  delayed delivery
    flotilla consume TOPIC [--partition N]
                     [--from-beginning | --offset N | --last N | --since TIME]
                     [-f FORMAT | -f json] [--max N] [--idle-timeout S] [-e] [--replica ID]
    flotilla consume TOPIC --group G [--from-beginning] [-f FORMAT] [--max N] [--idle-timeout S]
    flotilla group list | describe G | reset G TOPIC --to earliest|latest|N | delete G
    flotilla queue receive GROUP TOPIC [--ack] [-n N] [--invisible 30s] [-f text|json]
    flotilla status [--json]                       members, partitions, ACLs
    flotilla acl add|remove PRINCIPAL --allow|--deny OP[,OP] --topic NAME|PREFIX* | acl list
    flotilla token add PRINCIPAL | token list | token remove TOKEN_ID
    flotilla whoami
    flotilla certs init | issue NODE [--host H ...] | client NAME      [--dir D]
    flotilla --version

Client commands take `--bootstrap HOST:PORT[,HOST:PORT...]` (default: $FLOTILLA_BOOTSTRAP, else
the local dev cluster at 127.0.0.1:7001); `produce` and `consume` are described in
`flotilla.cli_records`, `group` and `consume --group` in `flotilla.cli_groups`, `queue` in
`flotilla.cli_queue`, `acl`, `token`, `whoami`, `certs` and the TLS and token options
(`--tls-ca --tls-cert --tls-key --token --tls-server-name`, or $FLOTILLA_TLS_CA,
$FLOTILLA_TLS_CERT, $FLOTILLA_TLS_KEY, $FLOTILLA_TOKEN) in `flotilla.cli_security`. The first node started without `--join` bootstraps the cluster.
Ctrl-C or SIGTERM stops a node gracefully: its leaderships move away first, then it leaves the
membership.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, NoReturn

from flotilla.cli_format import InputError, max_delay, non_negative, positive
from flotilla.cli_groups import add_group_parsers, run_group, run_group_consume
from flotilla.cli_node import DEV_BASE_PORT, EVENT_LOOPS, add_server_parsers, run_server_command
from flotilla.cli_queue import add_queue_parsers, run_queue
from flotilla.cli_records import add_record_parsers, run_consume, run_produce
from flotilla.cli_security import (
    add_certs_parser,
    add_security_parsers,
    add_tls_options,
    run_acl,
    run_certs,
    run_token,
    run_whoami,
    tls_settings,
)

__all__ = ["EVENT_LOOPS", "main"]

SERVER_COMMANDS = ("node", "dev", "demo")
LOCAL_COMMANDS = ("certs",)  # files only: no cluster


def bootstrap_addresses(text: str) -> list[str]:
    """`--bootstrap`'s comma list of HOST:PORT (argparse: a bad one is a usage error)."""
    addresses = [part.strip() for part in text.split(",")]
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(
                f"{address!r} in {text!r} is not HOST:PORT: give one or more node addresses "
                "separated by commas, e.g. 127.0.0.1:7001,127.0.0.2:7001"
            )
    return addresses


def _client_parsers(sub: Any) -> None:
    default_bootstrap = os.environ.get("FLOTILLA_BOOTSTRAP", f"127.0.0.1:{DEV_BASE_PORT}")
    bootstrap = argparse.ArgumentParser(add_help=False)
    bootstrap.add_argument(
        "--bootstrap",
        type=bootstrap_addresses,
        default=default_bootstrap,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="any nodes of the cluster, comma-separated (default: $FLOTILLA_BOOTSTRAP, else the "
        f"local dev cluster: {default_bootstrap})",
    )
    add_tls_options(bootstrap, suppress=True)
    topic = sub.add_parser(
        "topic", help="create, list, describe, alter or delete topics"
    ).add_subparsers(dest="action", required=True)
    create = topic.add_parser("create", parents=[bootstrap], help="create a topic")
    create.add_argument("name")
    create.add_argument(
        "--partitions", type=positive, default=1, help="how many (default: %(default)s)"
    )
    create.add_argument(
        "--replication-factor",
        type=non_negative,
        default=0,
        help="replicas per partition (default: %(default)s: the cluster's default, 3, "
        "or the live members if fewer)",
    )
    create.add_argument(
        "--retention-bytes",
        type=non_negative,
        default=0,
        help="per partition, oldest segments first (default: %(default)s, unlimited)",
    )
    create.add_argument(
        "--retention-ms",
        type=non_negative,
        default=0,
        help="drop segments older than this (default: %(default)s, unlimited)",
    )
    create.add_argument(
        "--max-delay",
        type=max_delay,
        default=None,
        metavar="DURATION",
        help="the longest delay a delayed produce may ask: 1s to 365d (default: 40d)",
    )
    topic.add_parser(
        "list", parents=[bootstrap], help="topics with their partitions and replication factor"
    )
    describe = topic.add_parser(
        "describe",
        parents=[bootstrap],
        help="partitions, leaders, replicas, learners; marks under-replicated ones",
    )
    describe.add_argument("name")
    alter = topic.add_parser(
        "alter",
        parents=[bootstrap],
        help="add partitions, or change retention (0: unlimited); what is not given stays",
    )
    alter.add_argument("name")
    alter.add_argument(
        "--partitions",
        type=positive,
        default=None,
        help="more than it has (default: unchanged)",
    )
    alter.add_argument(
        "--retention-bytes",
        type=non_negative,
        default=None,
        help="0: unlimited (default: unchanged)",
    )
    alter.add_argument(
        "--retention-ms", type=non_negative, default=None, help="0: unlimited (default: unchanged)"
    )
    alter.add_argument(
        "--max-delay",
        type=max_delay,
        default=None,
        metavar="DURATION",
        help="the longest delay a delayed produce may ask: 1s to 365d, 0: the default, 40d "
        "(default: unchanged)",
    )
    delete = topic.add_parser("delete", parents=[bootstrap], help="delete a topic")
    delete.add_argument("name")

    add_record_parsers(sub, [bootstrap])
    add_group_parsers(sub, [bootstrap])
    add_queue_parsers(sub, [bootstrap])
    add_security_parsers(sub, [bootstrap])
    add_certs_parser(sub)

    status = sub.add_parser("status", parents=[bootstrap], help="members, partitions and ACLs")
    status.add_argument("--json", action="store_true", help="machine-readable output")


def _run_client_command(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415 (keep `flotilla node` start-up lean)

    from flotilla import tools  # noqa: PLC0415
    from flotilla.client import Client  # noqa: PLC0415
    from flotilla.errors import FlotillaError  # noqa: PLC0415

    # piped or captured output is never cut to 80 columns (a table's cells would end in "…")
    console = Console(width=None if sys.stdout.isatty() else 250)
    acks = getattr(args, "acks", "all")
    try:
        with Client(args.bootstrap, timeout_s=15, acks=acks, **tls_settings(args)) as client:
            if args.command == "topic":
                if args.action == "create":
                    created = client.create_topic(
                        args.name,
                        args.partitions,
                        args.replication_factor,
                        retention_bytes=args.retention_bytes,
                        retention_ms=args.retention_ms,
                        max_delay_ms=args.max_delay,
                    )
                    if created.note:  # e.g. the default replication factor lowered
                        print(f"flotilla: {created.note}", file=sys.stderr)
                    tools.describe_topic(client, args.name, console)
                elif args.action == "list":
                    tools.list_topics(client, sys.stdout)
                elif args.action == "describe":
                    tools.describe_topic(client, args.name, console)
                elif args.action == "alter":
                    client.alter_topic(
                        args.name,
                        partitions=args.partitions,
                        retention_bytes=args.retention_bytes,
                        retention_ms=args.retention_ms,
                        max_delay_ms=args.max_delay,
                    )
                    tools.describe_topic(client, args.name, console)
                else:
                    client.delete_topic(args.name)
                    print(f"deleted {args.name}")
            elif args.command == "produce":
                return run_produce(client, args, sys.stdout, sys.stderr)
            elif args.command == "consume" and args.group is not None:
                return run_group_consume(client, args, sys.stdout.buffer, sys.stderr)
            elif args.command == "consume":
                try:
                    return run_consume(client, args, sys.stdout.buffer, sys.stderr)
                except KeyboardInterrupt:
                    _exit_now(130)
            elif args.command == "group":
                return run_group(client, args, sys.stdout)
            elif args.command == "queue":
                return run_queue(client, args, sys.stdout.buffer, sys.stderr)
            elif args.command == "acl":
                return run_acl(client, args, sys.stdout, sys.stderr)
            elif args.command == "token":
                return run_token(client, args, sys.stdout, sys.stderr)
            elif args.command == "whoami":
                return run_whoami(client, args, sys.stdout)
            elif args.command == "status":
                tools.status(client, console, as_json=args.json)
    except InputError as error:
        print(f"flotilla {args.command}: {error}", file=sys.stderr)
        return 2
    except FlotillaError as error:
        print(f"flotilla: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `flotilla consume ... | head`: the reader left; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second complaint when Python flushes at exit
        return 0
    return 0


def _glue_since(argv: list[str]) -> list[str]:
    """`--since -5m` as `--since=-5m`: argparse takes a value starting with '-' for an option."""
    glued: list[str] = []
    for arg in argv:
        if glued and glued[-1] == "--since" and arg.startswith("-"):
            glued[-1] = f"--since={arg}"
        else:
            glued.append(arg)
    return glued


def _exit_now(status: int) -> NoReturn:
    """Ends the process at once, its output flushed: for Ctrl-C of a command whose reader
    threads may be inside a gRPC stream (`consume`). Closing the client and the interpreter's
    own shutdown then wait on those threads' calls, and under load that outlasted any
    reasonable wait for a Ctrl-C (seen: over 30 s)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def _version() -> str:
    from flotilla import __version__  # noqa: PLC0415

    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="flotilla", description="Flotilla: a replicated, partitioned log."
    )
    parser.add_argument("--version", action="version", version=f"flotilla {_version()}")
    add_tls_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True)
    add_server_parsers(sub)
    _client_parsers(sub)
    args = parser.parse_args(_glue_since(sys.argv[1:] if argv is None else argv))
    if args.command in SERVER_COMMANDS:
        return run_server_command(args)
    if args.command in LOCAL_COMMANDS:
        return run_certs(args)
    try:
        return _run_client_command(args)
    except KeyboardInterrupt:  # Ctrl-C before or after the command proper: no traceback either
        return 130
