"""`python -m cluster.healthcheck [HOST:PORT]`: is the node at HOST:PORT serving?

For container health checks (the Dockerfile's HEALTHCHECK and each compose node's healthcheck).
It calls `flotilla.v1.Flotilla/Health` once with a 2 s deadline and exits

    0  the node answered `serving = true`;
    1  anything else: it answered `serving = false`, nothing listens there, the deadline passed,
       or HOST:PORT is malformed (Docker reserves exit code 2, so it is never used).

One line on stdout (healthy) or stderr (not) says why; Docker keeps it in `docker inspect`.
It imports only grpc and the generated stubs, so that a check every few seconds stays cheap.

TLS: with FLOTILLA_TLS_CA, FLOTILLA_TLS_CERT and FLOTILLA_TLS_KEY set (a node's container has
its own: the node certificate serves as a client certificate too) it connects with TLS,
verifying the name every node certificate carries (`flotilla-node`), whatever address it dials.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import grpc

from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

__all__ = ["DEFAULT_ADDRESS", "TIMEOUT_S", "check", "main"]

DEFAULT_ADDRESS = "127.0.0.1:7001"
TIMEOUT_S = 2.0


TLS_ENV = ("FLOTILLA_TLS_CA", "FLOTILLA_TLS_CERT", "FLOTILLA_TLS_KEY")
NODE_SERVER_NAME = "flotilla-node"  # cluster.certs: in every node certificate


def _channel(address: str, tls: Sequence[str] | None) -> grpc.Channel:
    if not tls:
        return grpc.insecure_channel(address)
    ca, cert, key = (open(path, "rb").read() for path in tls)  # noqa: SIM115 (three small files)
    credentials = grpc.ssl_channel_credentials(ca, key, cert)
    options = [("grpc.ssl_target_name_override", NODE_SERVER_NAME)]
    return grpc.secure_channel(address, credentials, options=options)


def check(
    address: str, timeout_s: float = TIMEOUT_S, tls: Sequence[str] | None = None
) -> tuple[bool, str]:
    """(healthy, one-line reason) for the node at `address`; `tls`: (CA, certificate, key)
    files to connect with, or None (plaintext)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return False, f"{address!r} is not HOST:PORT with a port in 1..65535"
    try:
        channel = _channel(address, tls)
    except OSError as error:
        return False, f"{address}: the TLS files cannot be read: {error}"
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
    tls = [os.environ.get(name, "") for name in TLS_ENV]
    healthy, reason = check(args[0] if args else DEFAULT_ADDRESS, tls=tls if all(tls) else None)
    print(reason, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
