"""`flotilla node`, `flotilla dev` and `flotilla demo`: the commands that run servers.

`flotilla.cli` parses the command line and hands these commands here; the client commands
(topic, produce, consume, status) stay in `flotilla.cli`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["DEV_BASE_PORT", "EVENT_LOOPS", "add_server_parsers", "run_server_command"]

UNSAFE_ENV = "FLOTILLA_ALLOW_UNSAFE"
DEV_BASE_PORT = 7001
# a client's security settings (flotilla.client): never passed on to the dev cluster's nodes
CLIENT_ENV = (
    "FLOTILLA_TLS_CA", "FLOTILLA_TLS_CERT", "FLOTILLA_TLS_KEY", "FLOTILLA_TOKEN",
    "FLOTILLA_TLS_SERVER_NAME",
)  # fmt: skip
CLIENT_ENV_FILE = "client.env"  # `flotilla dev` writes the client settings here (`. FILE`)

EVENT_LOOPS = ("auto", "uvloop", "asyncio")  # a node's --event-loop choices


def _node_parser(sub: Any) -> None:
    node = sub.add_parser("node", help="run a node", description="Run a Flotilla node.")
    node.add_argument("--id", dest="node_id", required=True, help="unique member id (required)")
    node.add_argument(
        "--listen", required=True, metavar="HOST:PORT", help="gRPC listen address (required)"
    )
    node.add_argument(
        "--data-dir", required=True, metavar="DIR", help="where data lives (required)"
    )
    node.add_argument(
        "--advertise", metavar="HOST:PORT", help="address others dial (default: --listen)"
    )
    node.add_argument(
        "--join",
        nargs="+",
        default=None,
        metavar="HOST:PORT",
        help="seed members to join (default: none; this node starts the cluster)",
    )
    node.add_argument(
        "--controllers",
        metavar="ID=HOST:PORT,...",
        help="control-plane members and their control-plane addresses, the same list on every "
        "node (default: with no --join either, a control plane of this node alone on the "
        "--listen port + 100)",
    )
    node.add_argument(
        "--raft-listen",
        metavar="HOST:PORT",
        help="a second port, raw TCP, for peers' Raft frames (default: none; Raft rides the "
        "gRPC port)",
    )
    node.add_argument(
        "--raft-advertise",
        metavar="HOST:PORT",
        help="where peers dial --raft-listen (default: --raft-listen)",
    )
    node.add_argument("--weight", type=float, metavar="W", help="placement weight (default: 1.0)")
    node.add_argument("--rack", help="failure domain for rack-aware placement (default: none)")
    node.add_argument(
        "--config", metavar="FILE", help="TOML file of settings (default: none, built-ins)"
    )
    node.add_argument(
        "--dial-map",
        metavar="FILE",
        help="JSON {member id: HOST:PORT} overriding where peers are dialled (default: none)",
    )
    node.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics here (default: none, not served)",
    )
    node.add_argument(
        "--metrics-public",
        action="store_true",
        default=None,
        help="allow --metrics on a non-loopback address (plain HTTP, no authentication; "
        "default: loopback only)",
    )
    _security_arguments(node)
    node.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error", "critical"),
        help="log level (default: $FLOTILLA_LOG, else info; the flag wins)",
    )
    node.add_argument(
        "--log-format",
        choices=("logfmt", "json"),
        default="logfmt",
        help="one line per event: key=value (logfmt) or one JSON object (default: logfmt)",
    )
    node.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="auto",
        help="the node's event loop (default: auto, uvloop where installed; a node on it spends "
        "15-40%% less CPU per request than on asyncio's own loop)",
    )
    node.add_argument("--unsafe-ack-before-commit", action="store_true", help=argparse.SUPPRESS)
    # test-only (chaos mutation test): serve reads above the commit index
    node.add_argument("--unsafe-read-uncommitted", action="store_true", help=argparse.SUPPRESS)


def _security_arguments(node: argparse.ArgumentParser) -> None:
    """TLS and authorization flags (the secrets themselves come from the environment:
    FLOTILLA_CLUSTER_SECRET, FLOTILLA_CLUSTER_SECRET_PREVIOUS, FLOTILLA_BOOTSTRAP_TOKEN)."""
    node.add_argument(
        "--tls-ca", metavar="FILE", help="the cluster CA (PEM; default: none, no TLS)"
    )
    node.add_argument(
        "--tls-cert", metavar="FILE", help="this node's certificate (PEM; default: none)"
    )
    node.add_argument("--tls-key", metavar="FILE", help="this node's key (PEM; default: none)")
    node.add_argument(
        "--tls-client-auth",
        choices=("on", "off"),
        help="with TLS, require a certificate the CA signed from every caller (default: on; "
        "off: clients use TLS with a token, peers the cluster secret)",
    )
    node.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="allow listening on a non-loopback address without TLS (default: refused)",
    )
    node.add_argument(
        "--authorization",
        choices=("auto", "on", "off"),
        help="enforce ACLs (default: auto, on with TLS)",
    )
    node.add_argument(
        "--superusers",
        metavar="NAME,...",
        help="principals allowed everything (default: admin)",
    )


def _run_node(args: argparse.Namespace) -> int:
    from cluster import allocator, logs  # noqa: PLC0415
    from cluster.config import ConfigError, NodeConfig  # noqa: PLC0415 (the SDK never loads cluster)
    from cluster.controller import ControlPlaneError  # noqa: PLC0415
    from cluster.node import Node  # noqa: PLC0415
    from cluster.startup import standalone  # noqa: PLC0415

    if args.unsafe_ack_before_commit and os.environ.get(UNSAFE_ENV) != "1":
        print(
            f"flotilla: --unsafe-ack-before-commit is for tests only and loses acknowledged writes; "
            f"it is refused unless {UNSAFE_ENV}=1",
            file=sys.stderr,
        )
        return 2
    if args.unsafe_read_uncommitted and os.environ.get(UNSAFE_ENV) != "1":
        print(
            f"flotilla: --unsafe-read-uncommitted is for tests only and serves uncommitted reads; "
            f"it is refused unless {UNSAFE_ENV}=1",
            file=sys.stderr,
        )
        return 2
    overrides = {
        "node_id": args.node_id,
        "listen": args.listen,
        "data_dir": args.data_dir,
        "advertise": args.advertise,
        "raft_listen": args.raft_listen,
        "raft_advertise": args.raft_advertise,
        "join": tuple(args.join) if args.join else None,
        "controllers": args.controllers,
        "weight": args.weight,
        "rack": args.rack,
        "dial_map": args.dial_map,
        "metrics": args.metrics,
        "metrics_public": args.metrics_public,
        "tls_ca": args.tls_ca,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "tls_client_auth": None if args.tls_client_auth is None else args.tls_client_auth == "on",
        "insecure": args.insecure,
        "authorization": args.authorization,
        "superusers": args.superusers,
    }
    try:
        config, decided = standalone(NodeConfig.load(file=args.config, overrides=overrides))
    except ConfigError as error:
        print(f"flotilla: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # an address in use (cluster.ownership.StartRefused), a data dir
        print(f"flotilla: cannot start node {args.node_id}: {error}", file=sys.stderr)
        return 1
    if decided:
        print(f"flotilla: {decided}", flush=True)
    try:
        logs.configure(config.node_id, args.log_level, args.log_format)
    except logs.LogConfigError as error:
        print(f"flotilla: {error}", file=sys.stderr)
        return 2

    allocator.tune()  # large buffers from the heap, not fresh mappings (see cluster.allocator)
    allocator.tune_collector()  # a round's objects die young (see cluster.allocator)
    allocator.watch_collector()  # long old-generation collections are logged (`gc_pause`)
    try:
        loop_name = _event_loop(args.event_loop)
    except ImportError as error:
        print(f"flotilla: --event-loop {args.event_loop}: {error}", file=sys.stderr)
        return 2

    async def serve() -> None:
        node = Node(config)
        node.unsafe_ack_before_commit = args.unsafe_ack_before_commit
        node.unsafe_read_uncommitted = args.unsafe_read_uncommitted  # test-only
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        reloads: set[asyncio.Task[bool]] = set()

        def reload_tls() -> None:  # SIGHUP: re-read the TLS files now
            task = loop.create_task(node.reload_tls())
            reloads.add(task)
            task.add_done_callback(reloads.discard)

        loop.add_signal_handler(signal.SIGHUP, reload_tls)
        await node.start()
        print(
            f"flotilla node {config.node_id} serving on {config.listen} (event loop: {loop_name})",
            flush=True,
        )
        await stop.wait()
        await node.stop(graceful=True)
        print(f"flotilla node {config.node_id} stopped", flush=True)
        # Everything is durable and closed, the data directory released: the process ends
        # now. Tearing down the interpreter (the loop's executors, gRPC's threads, the objects
        # of tens of thousands of replicas) took longer than the whole stop at 6,000 replicas
        # (9.5 s of 14.6 s), and a restart waits for it.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(0)

    try:
        if loop_name == "uvloop":
            import uvloop  # noqa: PLC0415 (optional: not on every platform)

            uvloop.run(serve())
        else:
            asyncio.run(serve())
    except ConfigError as error:  # an address that does not resolve or clashes (Node.start)
        print(f"flotilla: {error}", file=sys.stderr)
        return 2
    except (OSError, ControlPlaneError) as error:
        print(f"flotilla: cannot start node {config.node_id}: {error}", file=sys.stderr)
        return 1
    return 0


def _event_loop(choice: str) -> str:
    """The loop a node runs on: `auto` takes uvloop where it is installed (the default
    install has it on Linux and macOS), else asyncio's own. Raises ImportError when uvloop
    was asked for by name and is missing."""
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401, PLC0415
    except ImportError:
        if choice == "uvloop":
            raise ImportError("uvloop is not installed (pip install uvloop)") from None
        return "asyncio"
    return "uvloop"


def add_server_parsers(sub: Any) -> None:
    """Register `node`, `dev` and `demo` on the top-level subparsers."""
    _node_parser(sub)
    dev = sub.add_parser("dev", help="run a local cluster on loopback until Ctrl-C")
    dev.add_argument(
        "--nodes", type=int, default=3, help="nodes on 127.0.0.1..N, 1..9 (default: %(default)s)"
    )
    dev.add_argument(
        "--base-port",
        type=int,
        default=DEV_BASE_PORT,
        metavar="PORT",
        help="node i listens on 127.0.0.i:PORT, its controller on PORT+100, its raft port on "
        "PORT+200 (default: %(default)s)",
    )
    dev.add_argument(
        "--data-dir",
        default=".flotilla-dev",
        metavar="DIR",
        help="where the nodes keep their data, and the CA and certificates (default: %(default)s)",
    )
    dev.add_argument(
        "--insecure",
        "--no-tls",
        dest="insecure",
        action="store_true",
        help="plaintext, no certificates (default: mutual TLS with a CA made under --data-dir "
        "once, and the client settings printed)",
    )

    demo = sub.add_parser("demo", help="the end-to-end demo on a temporary local cluster")
    demo.add_argument(
        "--count", type=int, default=100_000, help="records to produce (default 100,000)"
    )
    demo.add_argument(
        "--no-spark", action="store_true", help="skip the closing Spark job (default: run it)"
    )


def _run_dev(args: argparse.Namespace) -> int:
    from cluster.certs import CertError  # noqa: PLC0415
    from cluster.local import LocalCluster  # noqa: PLC0415

    if not 1 <= args.nodes <= 9:
        print(f"flotilla: --nodes {args.nodes}: use 1..9", file=sys.stderr)
        return 2
    if not 1 <= args.base_port <= 65535 - 200:
        print(f"flotilla: --base-port {args.base_port}: use 1..{65535 - 200}", file=sys.stderr)
        return 2
    # the nodes inherit this environment: the client settings this command prints, exported in
    # the shell that runs it again, must not become the nodes' own (FLOTILLA_TLS_CERT is a node's
    # certificate to a node, the admin's to a client)
    for name in CLIENT_ENV:
        os.environ.pop(name, None)
    tls = not args.insecure
    try:
        cluster = LocalCluster(args.data_dir, args.nodes, base_port=args.base_port, tls=tls)
    except (CertError, OSError) as error:
        print(f"flotilla: the dev cluster's certificates: {error}", file=sys.stderr)
        return 1
    with cluster:
        # SIGTERM stops the nodes as Ctrl-C does, from the first moment (it replaces the
        # cluster's own SIGTERM exit, which would stop them too, but with status 143)
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            cluster.start()
        except (RuntimeError, TimeoutError) as error:
            print(f"flotilla: the dev cluster did not start: {error}", file=sys.stderr)
            return 1
        security = "mutual TLS" if tls else "plaintext (--insecure)"
        print(
            f"flotilla dev cluster of {args.nodes} node(s) is up ({security}); "
            f"bootstrap {cluster.bootstrap}",
            flush=True,
        )
        settings = ""
        if cluster.tls is not None:
            exports = _client_exports(cluster.tls)
            env_file = Path(args.data_dir) / CLIENT_ENV_FILE
            env_file.write_text(exports + "\n")
            print(f"  client settings (the admin certificate; also in {env_file}):", flush=True)
            print(f"  {exports}", flush=True)
            settings = f". {shlex.quote(str(env_file))}; "
        bootstrap = "" if args.base_port == DEV_BASE_PORT else f" --bootstrap {cluster.bootstrap}"
        print(
            f"  try: {settings}flotilla topic create orders --partitions 3{bootstrap}; "
            f"echo hello | flotilla produce orders{bootstrap}",
            flush=True,
        )
        print("press Ctrl-C to stop every node", flush=True)
        stop = threading.Event()
        status = 0
        try:
            while not stop.wait(0.5):
                for node_id in cluster.nodes:
                    if not cluster.is_running(node_id):
                        print(
                            f"flotilla: node {node_id} exited; see {cluster.nodes[node_id].log_path}",
                            file=sys.stderr,
                        )
                        status = 1
                        stop.set()
        except KeyboardInterrupt:
            pass
        print("stopping ...", flush=True)
        for node_id in cluster.nodes:
            cluster.stop(node_id)
    return status


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _client_exports(paths: Any) -> str:
    """`export FLOTILLA_TLS_CA=... FLOTILLA_TLS_CERT=... FLOTILLA_TLS_KEY=...`: absolute paths,
    so the line works from any directory."""
    files = {"FLOTILLA_TLS_CA": paths.ca, "FLOTILLA_TLS_CERT": paths.cert,
             "FLOTILLA_TLS_KEY": paths.key}  # fmt: skip
    return "export " + " ".join(
        f"{name}={shlex.quote(str(Path(path).resolve()))}" for name, path in files.items()
    )


def _run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415

    from flotilla.demo import run_demo, tls_settings  # noqa: PLC0415

    console = Console()
    if args.no_spark:
        run_demo(args.count, console)
        return 0
    from flotilla.spark_demo import run_spark_demo  # noqa: PLC0415 (pyspark is an extra)

    run_demo(
        args.count,
        console,
        after=lambda cluster, client: run_spark_demo(
            cluster.bootstrap, console=console, security=tls_settings(cluster)
        ),
    )
    return 0


def run_server_command(args: argparse.Namespace) -> int:
    """Run `node`, `dev` or `demo` (whichever `args.command` names); the exit status."""
    if args.command == "node":
        return _run_node(args)
    if args.command == "dev":
        return _run_dev(args)
    return _run_demo(args)
