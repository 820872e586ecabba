"""Shared test helpers: free ports, waiting on conditions with deadlines (never fixed sleeps), a
bare replica on disk, a MultiRaft host driven by hand, and raw record batches."""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import xxhash

from cluster.local import free_port as local_free_port
from cluster.multiraft import MultiRaft
from cluster.replica import Replica
from flotilla._core import Plan, Rpc, Sleep
from proto import flotilla_pb2_grpc
from raft.codec import decode_message
from raft.config import RaftConfig
from raft.types import Configuration
from storage import FileHandles, HardState, LogConfig, StateJournal


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, from this worker's slice below the ephemeral range (as the
    local clusters' ports): a kernel-picked port (bind to 0) can be taken by any outgoing
    connection before the test's server binds it (CI once lost the chaos setup test so)."""
    return local_free_port(host)


# cluster.local draws node and proxy ports from 20000-32768 and remembers them per process only:
# two workers drawing from the whole range could both pick one port before either binds it
_PORTS = (20_000, 32_768)


def worker_port_range(worker: str, workers: int) -> tuple[int, int]:
    """The slice of 20000-32768 for xdist worker `worker` ("gw0", "gw1", ...) of `workers`."""
    index = int(worker.removeprefix("gw"))
    if not 0 <= index < workers:
        raise ValueError(f"worker {worker!r}: expected gw0..gw{workers - 1}")
    size = (_PORTS[1] - _PORTS[0]) // workers
    low = _PORTS[0] + index * size
    return low, low + size


def wait_until(
    condition: Callable[[], object],
    timeout_s: float = 20.0,
    what: str = "",
    detail: Callable[[], object] | None = None,
) -> None:
    """Polls `condition` until it holds; on timeout the error names `what` and shows `detail()`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            seen = f"; last seen: {detail()}" if detail is not None else ""
            raise AssertionError(
                f"timed out after {timeout_s} s waiting for {what or condition}{seen}"
            )
        time.sleep(0.02)


def holds_throughout(
    condition: Callable[[], object],
    window_s: float,
    what: str = "",
    detail: Callable[[], object] | None = None,
) -> None:
    """Polls `condition` for `window_s` and fails the moment it does not hold: the check that
    something does *not* happen, which can only be watched for a while."""
    deadline = time.monotonic() + window_s
    while time.monotonic() < deadline:
        if not condition():
            seen = f"; seen: {detail()}" if detail is not None else ""
            raise AssertionError(f"{what or condition} stopped holding{seen}")
        time.sleep(0.02)


def open_replica(root: Path, group: str = "t/0", node_id: str = "b") -> Replica:
    """A replica of `group` in a group of a, b and c, stored under `root/<topic>/<partition>`."""
    topic, _, partition = group.partition("/")
    return Replica.open(
        node_id=node_id,
        topic=topic,
        partition=int(partition),
        directory=str(root / topic / partition),
        bootstrap=Configuration(voters=frozenset({"a", "b", "c"})),
        hard_state=HardState(),
        raft_config=RaftConfig(),
        log_config=LogConfig(),
        handles=FileHandles(16),
        rng=random.Random(1),
    )


def hand_driven_host(
    root: Path, group: str = "t/0"
) -> tuple[MultiRaft, Replica, list[tuple[str, object]]]:
    """A MultiRaft host "b" (not started: driven with `run_round`, `tick`, `deliver`) holding
    one replica of `group` (`open_replica`), and the messages it sends, decoded, as
    (destination, message)."""
    sent: list[tuple[str, object]] = []
    multiraft = MultiRaft(
        "b",
        lambda to, group, parts: sent.append((to, decode_message(b"".join(parts)))),
        0.05,
        StateJournal(root / "journal"),
    )
    replica = open_replica(root, group)
    multiraft.add(replica)
    return multiraft, replica, sent


def batch_of_body(body: bytes, count: int) -> bytes:
    """A record batch whose header (record count, checksum) is right for `body`, whatever `body`
    holds: for tests of what the server does with a malformed body."""
    checksum = xxhash.xxh3_64_intdigest(body)
    return struct.pack("<BBHIQqqQ", 0xF1, 0, 0, count, 0, 0, 0, checksum) + body


def drive(plan: Plan[Any], answer: Callable[[Rpc], object]) -> tuple[Any, list[Rpc | Sleep]]:
    """Runs an SDK plan (`flotilla._core`) as a client would, `answer` standing in for the
    network; its value and the steps it asked for."""
    steps: list[Rpc | Sleep] = []
    try:
        step = next(plan)
        while True:
            steps.append(step)
            step = plan.send(answer(step) if isinstance(step, Rpc) else None)
    except StopIteration as done:
        return done.value, steps


async def serve_flotilla(
    servicers: dict[str, Any],
) -> tuple[list[Any], dict[str, str]]:
    """Starts one in-process gRPC server on loopback per servicer (a stand-in for a node's
    `flotilla.v1.Flotilla` service): the servers (stop each with `await server.stop(None)`) and
    each id's address."""
    servers, addresses = [], {}
    for node_id, servicer in servicers.items():
        server = grpc.aio.server()
        flotilla_pb2_grpc.add_FlotillaServicer_to_server(servicer, server)
        address = f"127.0.0.1:{free_port('127.0.0.1')}"
        server.add_insecure_port(address)
        await server.start()
        servers.append(server)
        addresses[node_id] = address
    return servers, addresses
