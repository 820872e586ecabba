"""`flotilla acl|token|whoami|certs ...` and the client commands' TLS and token options: who may
do what, from a shell, in the manner of `rpk acl` and `kafka-acls`.

    flotilla acl add PRINCIPAL (--allow OP[,OP] | --deny OP[,OP]) --topic NAME|PREFIX* [--topic ...]
    flotilla acl remove PRINCIPAL (--allow OP[,OP] | --deny OP[,OP]) --topic NAME|PREFIX* ...
    flotilla acl list [--principal P] [--json]
    flotilla token add PRINCIPAL           prints the token (only now: the cluster keeps a hash)
    flotilla token list [--principal P] [--json]
    flotilla token remove TOKEN_ID         (or the token itself)
    flotilla whoami [--json]               the principal the cluster takes you for
    flotilla certs init [--dir D]          a new CA: D/ca.pem, D/ca.key (default D: ./certs)
    flotilla certs issue NODE [--host H ...] [--dir D]     a node's certificate and key
    flotilla certs client NAME [--dir D]   a client's certificate and key (mutual TLS)

OP is produce, consume (reads, consumer groups and queues), admin (create, alter, delete topics;
reset group offsets) or all. A resource is a topic name or a prefix ending in '*' ('orders.*';
quote it from the shell); '*' is every topic; admin on '*' also covers ACLs and tokens. A
PRINCIPAL is a client's name (its certificate's CN, or the name a token was made for), or '*'
for every authenticated one. Deny wins over allow. One binding is made per OP and resource given:
`acl add bob --allow produce,consume --topic 'orders.*' --topic audit` makes four.

Every client command takes `--tls-ca FILE --tls-cert FILE --tls-key FILE --token TOKEN
--tls-server-name NAME`, before or after the command's name; each falls back to its environment
variable (FLOTILLA_TLS_CA, FLOTILLA_TLS_CERT, FLOTILLA_TLS_KEY, FLOTILLA_TOKEN). A token is sent
over plaintext only to loopback addresses. A refusal prints the node's message on one line and
exits 1; a bad argument exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import IO, Any

from flotilla._security_plans import OPERATIONS
from flotilla.client import Client
from flotilla.types import AclBinding

__all__ = [
    "DEFAULT_CERTS_DIR",
    "TLS_OPTIONS",
    "add_certs_parser",
    "add_security_parsers",
    "add_tls_options",
    "operations",
    "run_acl",
    "run_certs",
    "run_token",
    "run_whoami",
    "tls_settings",
]

DEFAULT_CERTS_DIR = "certs"
# option dest -> Client keyword
TLS_OPTIONS = {
    "tls_ca": "tls_ca",
    "tls_cert": "tls_cert",
    "tls_key": "tls_key",
    "token": "token",
    "tls_server_name": "tls_server_name",
}


def operations(text: str) -> list[str]:
    """`--allow`/`--deny`'s comma list of operations (argparse: a bad one is a usage error)."""
    ops = [part.strip().lower() for part in text.split(",") if part.strip()]
    bad = [op for op in ops if op not in OPERATIONS]
    if bad or not ops:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of operations: use one or more of {', '.join(OPERATIONS)}, "
            "separated by commas"
        )
    return list(dict.fromkeys(ops))


def add_tls_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The TLS and token options. `suppress`: the option sets nothing unless given (a
    subcommand's copy must not overwrite what was given before the command's name)."""
    default = argparse.SUPPRESS if suppress else None
    group = parser.add_argument_group("security (each falls back to its environment variable)")
    group.add_argument(
        "--tls-ca",
        default=default,
        metavar="FILE",
        help="the cluster CA's certificate (PEM): turns TLS on (default: $FLOTILLA_TLS_CA, "
        "else none: plaintext)",
    )
    group.add_argument(
        "--tls-cert",
        default=default,
        metavar="FILE",
        help="this client's certificate, for mutual TLS (default: $FLOTILLA_TLS_CERT, else none)",
    )
    group.add_argument(
        "--tls-key",
        default=default,
        metavar="FILE",
        help="its private key (default: $FLOTILLA_TLS_KEY, else none)",
    )
    group.add_argument(
        "--token",
        default=default,
        metavar="TOKEN",
        help="a bearer token from `flotilla token add` (default: $FLOTILLA_TOKEN, else none)",
    )
    group.add_argument(
        "--tls-server-name",
        default=default,
        metavar="NAME",
        help="the name to check the nodes' certificates for, e.g. flotilla-node (default: the "
        "host dialled)",
    )


def tls_settings(args: argparse.Namespace) -> dict[str, str | None]:
    """The Client keywords the options give (None: the environment's)."""
    return {keyword: getattr(args, dest, None) for dest, keyword in TLS_OPTIONS.items()}


def add_security_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    acl = sub.add_parser(
        "acl", help="add, list or remove access-control entries (who may do what)"
    ).add_subparsers(dest="action", required=True)
    for action, text in (
        ("add", "allow or deny a principal operations on topics"),
        ("remove", "remove the entries equal to the ones given"),
    ):
        change = acl.add_parser(action, parents=parents, help=text)
        change.add_argument("principal", help="a client's name, or '*' for every one")
        how = change.add_mutually_exclusive_group(required=True)
        how.add_argument(
            "--allow",
            type=operations,
            metavar="OP[,OP]",
            help=f"{', '.join(OPERATIONS)} (default: none; give --allow or --deny)",
        )
        how.add_argument(
            "--deny", type=operations, metavar="OP[,OP]", help="as --allow (default: none)"
        )
        change.add_argument(
            "--topic",
            action="append",
            required=True,
            metavar="NAME|PREFIX*",
            help="a topic, a prefix ending in '*' (quote it), or '*' for every topic; repeatable "
            "(default: none; required)",
        )
    listing = acl.add_parser("list", parents=parents, help="every entry, or one principal's")
    listing.add_argument(
        "--principal", default=None, help="only this principal's entries (default: every one's)"
    )
    listing.add_argument("--json", action="store_true", help="machine-readable output")

    token = sub.add_parser("token", help="make, list or revoke bearer tokens").add_subparsers(
        dest="action", required=True
    )
    add = token.add_parser(
        "add", parents=parents, help="make a token for a principal (printed only now)"
    )
    add.add_argument("principal")
    tokens = token.add_parser("list", parents=parents, help="tokens' ids, principals, ages")
    tokens.add_argument(
        "--principal", default=None, help="only this principal's tokens (default: every one's)"
    )
    tokens.add_argument("--json", action="store_true", help="machine-readable output")
    remove = token.add_parser("remove", parents=parents, help="revoke a token")
    remove.add_argument("token_id", metavar="TOKEN_ID", help="its id (or the token itself)")

    whoami = sub.add_parser(
        "whoami", parents=parents, help="the principal the cluster takes you for"
    )
    whoami.add_argument("--json", action="store_true", help="machine-readable output")


def add_certs_parser(sub: Any) -> None:
    certs = sub.add_parser(
        "certs", help="make a local CA, node and client certificates"
    ).add_subparsers(dest="action", required=True)
    directory = argparse.ArgumentParser(add_help=False)
    directory.add_argument(
        "--dir",
        default=os.environ.get("FLOTILLA_CERTS_DIR", DEFAULT_CERTS_DIR),
        metavar="D",
        help="the certificate directory (default: $FLOTILLA_CERTS_DIR, else ./certs)",
    )
    certs.add_parser("init", parents=[directory], help="a new CA: D/ca.pem and D/ca.key")
    issue = certs.add_parser(
        "issue", parents=[directory], help="a node's certificate and key, signed by D's CA"
    )
    issue.add_argument("node", metavar="NODE", help="the node's id")
    issue.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="H",
        help="an IP address or DNS name clients dial the node by; repeatable "
        "(default: none; localhost, 127.0.0.1 and the node's id are always in)",
    )
    client = certs.add_parser(
        "client", parents=[directory], help="a client's certificate and key, signed by D's CA"
    )
    client.add_argument("name", metavar="NAME", help="the client's name: its principal")


# -- running ------------------------------------------------------------------------------------
def _table(rows: Sequence[tuple[str, ...]], out: IO[str]) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [f"{cell:<{widths[n]}}" for n, cell in enumerate(row[:-1])]
        out.write("  ".join([*cells, row[-1]]) + "\n")


def acl_rows(bindings: Sequence[AclBinding]) -> list[tuple[str, str, str, str]]:
    """`acl list`'s rows (a heading first), as `flotilla status` shows them too."""
    return [("PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE")] + [
        (b.principal, b.permission, b.operation, b.resource) for b in bindings
    ]


def run_acl(client: Client, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    if args.action == "list":
        bindings = client.list_acls(args.principal)
        if args.json:
            json.dump([asdict(b) for b in bindings], out, indent=2)
            out.write("\n")
        elif bindings:
            _table(acl_rows(bindings), out)
        else:
            err.write("no ACLs" + (f" for {args.principal!r}" if args.principal else "") + "\n")
        return 0
    permission = "allow" if args.allow is not None else "deny"
    ops = args.allow if args.allow is not None else args.deny
    total = 0
    for resource in dict.fromkeys(args.topic):
        for op in ops:
            if args.action == "add":
                b = client.add_acl(args.principal, op, resource, permission)
                out.write(f"added: {b.permission} {b.principal} {b.operation} on {b.resource}\n")
            else:
                removed = client.remove_acl(args.principal, op, resource, permission)
                total += removed
                if removed:
                    out.write(f"removed: {permission} {args.principal} {op} on {resource}\n")
                else:
                    err.write(f"no ACL {permission} {args.principal} {op} on {resource}\n")
    if args.action == "remove" and total == 0:
        err.write("flotilla acl remove: nothing matched; see `flotilla acl list`\n")
        return 1
    return 0


def _created(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ms else "-"


def run_token(client: Client, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    if args.action == "add":
        made = client.create_token(args.principal)
        out.write(made.token + "\n")
        err.write(
            f"token {made.token_id} for {made.principal!r}: shown only now (the cluster keeps "
            "its hash); give it as --token or $FLOTILLA_TOKEN\n"
        )
        return 0
    if args.action == "list":
        tokens = client.list_tokens(args.principal)
        if args.json:
            json.dump([asdict(t) for t in tokens], out, indent=2)
            out.write("\n")
        elif tokens:
            rows = [("TOKEN-ID", "PRINCIPAL", "CREATED")] + [
                (t.token_id, t.principal, _created(t.created_ms)) for t in tokens
            ]
            _table(rows, out)
        else:
            err.write("no tokens" + (f" for {args.principal!r}" if args.principal else "") + "\n")
        return 0
    if client.revoke_token(args.token_id) == 0:
        err.write(f"flotilla token remove: no token {args.token_id!r}; see `flotilla token list`\n")
        return 1
    out.write("revoked\n")
    return 0


def run_whoami(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    me = client.whoami()
    if args.json:
        json.dump(asdict(me), out, indent=2)
        out.write("\n")
        return 0
    who = me.principal if me.authenticated else "anonymous (not authenticated)"
    how = [f"via {me.via}"] if me.via else []
    how += ["superuser"] if me.superuser else []
    how.append(f"authorization {'on' if me.authorization else 'off'}")
    out.write(f"{who} ({', '.join(how)})\n")
    return 0


def run_certs(args: argparse.Namespace) -> int:
    """`flotilla certs ...`: files only, no cluster. One line and exit 1 on an error."""
    from flotilla.certs import CertError, init_ca, issue_client, issue_node  # noqa: PLC0415

    out = sys.stdout
    try:
        if args.action == "init":
            ca = init_ca(args.dir)
            out.write(f"CA: {ca.cert} (its key: {ca.key}, keep it private)\n")
        elif args.action == "issue":
            paths = issue_node(args.dir, args.node, tuple(args.host))
            out.write(
                f"node {args.node}: {paths.cert} {paths.key}\n"
                "  in its config file (flotilla node --config FILE):\n"
                f'  tls_ca = "{paths.ca}"\n  tls_cert = "{paths.cert}"\n  tls_key = "{paths.key}"\n'
            )
        else:
            paths = issue_client(args.dir, args.name)
            out.write(
                f"client {args.name}: {paths.cert} {paths.key}\n"
                f"  export FLOTILLA_TLS_CA={paths.ca} FLOTILLA_TLS_CERT={paths.cert} "
                f"FLOTILLA_TLS_KEY={paths.key}\n"
            )
    except CertError as error:
        print(f"flotilla certs {args.action}: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"flotilla certs {args.action}: {error}", file=sys.stderr)
        return 1
    return 0
