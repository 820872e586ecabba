"""What a node settles before anything starts: a lone node's own control plane, and addresses
that resolve, do not clash and can be bound.

A node started with neither `--controllers` nor `--join` is a cluster of one, as a lone Redpanda
or NATS server is: it runs a single-node control plane on its own host at the gRPC port + 100
(the layout `flotilla dev` and the README use), authenticated with `FLOTILLA_CLUSTER_SECRET` or,
when that is not set, a secret it makes once and keeps in `<data_dir>/cluster.secret` (mode
0600; with no other controller nobody else needs it). `--join` without `--controllers` is
refused: such a node could never find a controller, so every admin call would fail later.

Address checks, each a `ConfigError` naming the flag and the value (exit 2): every host resolves;
`--listen`, `--metrics` and the node's own control-plane address are pairwise apart (not the same
port on a common or wildcard address); an address that is not this machine's cannot be bound. An
address another process holds is `AddressInUse` (exit 1). gRPC and pysyncobj bind later for real;
checking first turns their bind failures (gRPC logs its own, pysyncobj swallows them) into one
line that says what is wrong.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import socket
from dataclasses import replace

from cluster.config import ConfigError, NodeConfig, parse_address
from cluster.ownership import AddressInUse

__all__ = ["SECRET_FILE", "check_addresses", "standalone"]

SECRET_FILE = "cluster.secret"
CONTROL_PORT_OFFSET = 100  # a lone node's control plane: its gRPC port + this
_WILDCARDS = {"0.0.0.0", "::", ""}


def standalone(config: NodeConfig) -> tuple[NodeConfig, str]:
    """(the config to start with, a line saying what was decided, or "")."""
    if config.controllers:
        return config, ""
    if config.join:
        raise ConfigError(
            "--join without --controllers: a node reads topics from the controllers; pass the "
            "cluster's --controllers ID=HOST:PORT,... (the same list every node gets)"
        )
    host, port = parse_address(config.listen, "listen")
    control_port = port + CONTROL_PORT_OFFSET
    if control_port > 65535:
        raise ConfigError(
            f"listen={config.listen!r}: a lone node runs its control plane on the port + "
            f"{CONTROL_PORT_OFFSET}, {control_port}, which is not a port; use a listen port "
            f"up to {65535 - CONTROL_PORT_OFFSET} or pass --controllers"
        )
    control = f"{host}:{control_port}"
    secret = config.cluster_secret or _kept_secret(config.data_dir)
    advertised_host = parse_address(config.advertised, "advertise")[0]
    note = (
        f"no --controllers and no --join: {config.node_id} runs a single-node control plane on "
        f"{control}; to add nodes start them with --join {config.advertised} --controllers "
        f"{config.node_id}={advertised_host}:{control_port}"
    )
    solo = replace(config, controllers={config.node_id: control}, cluster_secret=secret)
    return solo.validate(), note


def _kept_secret(data_dir: str) -> str:
    """The secret in `<data_dir>/cluster.secret`, made (and fsynced) the first time."""
    path = os.path.join(data_dir, SECRET_FILE)
    os.makedirs(data_dir, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
        if not text:
            raise ConfigError(
                f"{path} is empty: delete it (a new secret is made) or set FLOTILLA_CLUSTER_SECRET"
            ) from None
        return text
    text = secrets.token_hex(16)
    try:
        os.write(fd, f"{text}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return text


def _resolve(flag: str, address: str) -> tuple[str, int, frozenset[str]]:
    host, port = parse_address(address, flag)
    if host in _WILDCARDS:
        return host, port, frozenset({"*"})
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ConfigError(
            f"{flag}={address!r}: host {host!r} does not resolve ({error.strerror}); use an "
            "address of this machine, e.g. 127.0.0.1"
        ) from None
    return host, port, frozenset(str(info[4][0]) for info in infos)


def check_addresses(config: NodeConfig) -> None:
    """Raises `ConfigError` or `AddressInUse` (see the module docstring)."""
    wanted = [("listen", config.listen, "gRPC")]
    if config.raft_listen:
        wanted.append(("raft_listen", config.raft_listen, "raft"))
    if config.metrics:
        wanted.append(("metrics", config.metrics, "metrics"))
    if config.is_controller:
        wanted.append(
            (f"controllers[{config.node_id}]", config.controllers[config.node_id], "control-plane")
        )
    resolved = [(flag, address, role, *_resolve(flag, address)) for flag, address, role in wanted]
    for n, (flag, address, _, _, port, ips) in enumerate(resolved):
        for other_flag, other, _, _, other_port, other_ips in resolved[:n]:
            shared = ips & other_ips or "*" in ips or "*" in other_ips
            if port == other_port and shared:
                raise ConfigError(
                    f"{flag}={address!r} clashes with {other_flag}={other!r}: both would bind "
                    f"port {port} on the same address; give each its own port"
                )
    for flag, address, role, host, port, _ in resolved:
        _check_bindable(flag, address, role, host, port)


def _check_bindable(flag: str, address: str, role: str, host: str, port: int) -> None:
    with contextlib.ExitStack() as stack:
        try:
            infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
            family, kind, proto, _, sockaddr = infos[0]
            sock = stack.enter_context(socket.socket(family, kind, proto))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
            sock.bind(sockaddr)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise AddressInUse(role, address) from None
            raise ConfigError(
                f"{flag}={address!r} cannot be bound on this machine ({error.strerror}): use "
                "one of its own addresses"
            ) from None
