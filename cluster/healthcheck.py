"""`python -m cluster.healthcheck [HOST:PORT]`: is the node at HOST:PORT serving?

For container health checks (the Dockerfile's HEALTHCHECK and each compose node's healthcheck).
It calls `flotilla.v1.Flotilla/Health` once with a 2 s deadline and exits

    0  the node answered `serving = true`;
    1  anything else: it answered `serving = false`, nothing listens there, the deadline passed,
       or HOST:PORT is malformed (Docker reserves exit code 2, so it is never used).

One line on stdout (healthy) or stderr (not) says why; Docker keeps it in `docker inspect`.
It imports only grpc and the generated stubs, so that a check every few seconds stays cheap.

TLS: with `FLOTILLA_TLS_CA` set (as in a compose node's environment) it dials with TLS, trusting
that CA and presenting `FLOTILLA_TLS_CERT`/`FLOTILLA_TLS_KEY` when set (inside a node's container:
the node's own certificate, which names 127.0.0.1 and serves as a client certificate too).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import grpc

from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

__all__ = ["DEFAULT_ADDRESS", "TIMEOUT_S", "check", "main"]

DEFAULT_ADDRESS = "127.0.0.1:7001"
TIMEOUT_S = 2.0


def credentials(environ: Mapping[str, str]) -> grpc.ChannelCredentials | None:
    """TLS credentials from FLOTILLA_TLS_CA (+ _CERT, _KEY), or None (plaintext) without a CA.
    Raises OSError naming the variable whose file cannot be read."""
    files: dict[str, bytes | None] = {}
    for name in ("FLOTILLA_TLS_CA", "FLOTILLA_TLS_CERT", "FLOTILLA_TLS_KEY"):
        path = environ.get(name, "")
        try:
            files[name] = Path(path).read_bytes() if path else None
        except OSError as error:
            raise OSError(f"{name}={path!r} cannot be read: {error.strerror}") from None
    if files["FLOTILLA_TLS_CA"] is None:
        return None
    return grpc.ssl_channel_credentials(
        files["FLOTILLA_TLS_CA"], files["FLOTILLA_TLS_KEY"], files["FLOTILLA_TLS_CERT"]
    )


def check(
    address: str, timeout_s: float = TIMEOUT_S, environ: Mapping[str, str] | None = None
) -> tuple[bool, str]:
    """(healthy, one-line reason) for the node at `address`."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return False, f"{address!r} is not HOST:PORT with a port in 1..65535"
    try:
        tls = credentials(os.environ if environ is None else environ)
    except OSError as error:
        return False, str(error)
    channel = grpc.insecure_channel(address) if tls is None else grpc.secure_channel(address, tls)
    with channel:
        stub = flotilla_pb2_grpc.FlotillaStub(channel)
        try:
            response = stub.Health(pb.HealthRequest(), timeout=timeout_s)
        except grpc.RpcError as error:
            code = error.code().name if isinstance(error, grpc.Call) else type(error).__name__
            return False, f"{address}: no answer ({code})"
    summary = (
        f"node {response.node_id or '?'} at {address}: partitions={response.partitions} "
        f"leaders={response.leaders} members_alive={response.members_alive}"
        f"{f' quarantined={len(response.quarantined)}' if response.quarantined else ''}"
    )
    if not response.serving:
        return False, f"{summary}: not serving"
    return True, f"{summary}: serving"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1 or (args and args[0] in ("-h", "--help")):
        print("usage: python -m cluster.healthcheck [HOST:PORT]   (default 127.0.0.1:7001)")
        return 0 if args and args[0] in ("-h", "--help") else 1
    healthy, reason = check(args[0] if args else DEFAULT_ADDRESS)
    print(reason, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
