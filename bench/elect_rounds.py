"""The MultiRaft round's CPU per replica, in one process: three hosts electing N new groups.

    python -m bench.elect_rounds --groups 2000

Three `MultiRaft` hosts (a, b, c), each with a real replica (files, journal, fsync) of every
group, driven by hand on a common tick count: each tick, every host ticks and runs its rounds,
and the messages travel as the transport sends them (`encode_frame` / `parse_frame`: one frame
per node pair per round) until none is left in flight. As the node's opener does for new groups,
the first replica in each group's (rotated) placement campaigns at its first tick and the others
defer theirs; the replicas are opened before the clock starts and hosted `--admit` groups a tick
(as the opener admits them), so groups wait, tick and elect side by side. It counts the process CPU (every thread: the storage threads' writes too) from the
first tick until every group has a leader (`elect_cpu_ms_per_replica`), then until every group
has quiesced (`quiesce_cpu_ms_per_replica`), and the CPU of 100 ticks of the quiesced hosts
(`idle_cpu_ms_per_tick`).

Unlike `bench.idle` (real nodes, gRPC, SWIM, the control plane), this isolates what the rounds
cost (stepping, decoding, ticking, Readies, encoding), so before/after figures of the round are
stable on a shared machine: compare two trees in one window (`PYTHONPATH=<tree>`). Prints one
JSON line last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from cluster.frames import encode_frame, parse_frame
from cluster.multiraft import MultiRaft
from cluster.replica import Replica
from raft.config import RaftConfig
from raft.types import Configuration, Role
from storage import FileHandles, HardState, LogConfig, StateJournal

NODES = ("a", "b", "c")
TICK_S = 0.05
MAX_TICKS = 2000


class _Wire:
    """Per ordered node pair, the messages a round queued, sent as one frame."""

    def __init__(self) -> None:
        self.queued: dict[tuple[str, str], list[tuple[bytes, list[bytes], int]]] = defaultdict(list)
        self.sequence = 0
        self.messages = 0

    def sender(self, node_id: str) -> Callable[[str, str, list[bytes]], None]:
        def send(to: str, group: str, parts: list[bytes]) -> None:
            self.queued[(node_id, to)].append(
                (group.encode(), parts, sum(len(part) for part in parts))
            )

        return send

    def deliver(self, hosts: dict[str, MultiRaft]) -> bool:
        queued, self.queued = self.queued, defaultdict(list)
        for (from_node, to), messages in queued.items():
            self.sequence += 1
            self.messages += len(messages)
            frame = parse_frame(encode_frame(self.sequence, from_node, to, messages))
            hosts[to].deliver(frame.from_node, frame.messages)
        return bool(queued)


def _open(
    root: Path, node_id: str, group: int, handles: FileHandles, rng: random.Random
) -> Replica:
    directory = root / node_id / "t" / str(group)
    replica = Replica.open(
        node_id=node_id,
        topic="t",
        partition=group,
        directory=str(directory),
        bootstrap=Configuration(voters=frozenset(NODES)),
        hard_state=HardState(),
        raft_config=RaftConfig(),
        log_config=LogConfig(),
        handles=handles,
        rng=rng,
    )
    first = NODES[group % len(NODES)]
    if node_id == first:
        replica.node.hasten_campaign()
    else:
        replica.node.defer_campaign(2 * RaftConfig().election_ticks)
    return replica


async def _run(groups: int, admit: int, root: Path) -> dict[str, object]:
    wire = _Wire()
    for node_id in NODES:
        (root / node_id).mkdir(parents=True)
    hosts = {
        node_id: MultiRaft(
            node_id, wire.sender(node_id), TICK_S, StateJournal(root / node_id / "journal")
        )
        for node_id in NODES
    }
    rng = random.Random(1)
    handles = {node_id: FileHandles(256) for node_id in NODES}
    # opened before the clock starts (not measured), hosted `admit` groups a tick
    opened = {
        node_id: [_open(root, node_id, group, handles[node_id], rng) for group in range(groups)]
        for node_id in NODES
    }

    async def one_tick(tick: int) -> None:
        for node_id, host in hosts.items():
            for replica in opened[node_id][(tick - 1) * admit : tick * admit]:
                host.add(replica)
            host.tick(tick * TICK_S)
        for _ in range(50):  # rounds until nothing is in flight
            for host in hosts.values():
                await host.run_round()
            if not wire.deliver(hosts):
                break

    def led() -> int:
        return sum(
            1
            for host in hosts.values()
            for replica in host.replicas.values()
            if replica.node.role is Role.LEADER
        )

    started_cpu, started = time.process_time(), time.perf_counter()
    tick = 0
    while led() < groups and tick < MAX_TICKS:
        tick += 1
        await one_tick(tick)
    elect_cpu, elect_ticks = time.process_time() - started_cpu, tick
    while any(host.active_count for host in hosts.values()) and tick < 2 * MAX_TICKS:
        tick += 1
        await one_tick(tick)
    quiesce_cpu, quiesce_ticks = time.process_time() - started_cpu, tick
    wall = time.perf_counter() - started
    idle_started = time.process_time()
    for _ in range(100):
        tick += 1
        await one_tick(tick)
    idle_cpu = time.process_time() - idle_started
    replicas = groups * len(NODES)
    result: dict[str, object] = {
        "groups": groups,
        "admit_per_tick": admit,
        "replicas": replicas,
        "led": led(),
        "elect_ticks": elect_ticks,
        "quiesce_ticks": quiesce_ticks,
        "elect_cpu_ms_per_replica": round(1000 * elect_cpu / replicas, 3),
        "quiesce_cpu_ms_per_replica": round(1000 * quiesce_cpu / replicas, 3),
        "idle_cpu_ms_per_tick": round(1000 * idle_cpu / 100, 3),
        "messages": wire.messages,
        "wall_s": round(wall, 1),
    }
    for host in hosts.values():
        await host.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument(
        "--admit", type=int, default=0, help="groups hosted per tick (default: groups / 40)"
    )
    parser.add_argument("--dir", help="where the replicas' files go (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        admit = args.admit or max(1, args.groups // 40)
        result = asyncio.run(_run(args.groups, admit, Path(root)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
