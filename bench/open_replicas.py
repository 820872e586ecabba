"""Opening replicas, in one process, without a cluster: the CPU a node spends per replica when
a topic's partitions are created here (new directories) and when a restart opens them again
(existing directories, after a clean stop or after a crash).

    python -m bench.open_replicas [--replicas 2000] [--profile out.prof]

It drives `cluster.opener.ReplicaOpener` as a node does (`open_pending`, on the storage thread,
in batches), with a real state journal, real files and fsync (`fsync = "always"`), then:
- `new`: N replicas of one new topic;
- `clean`: the same N opened again after each was closed (a clean stop: `durable`);
- `crash`: the same N opened again without the clean-stop marker (each active segment is
  fsynced again before it is served).
Each replica holds one entry (a leader's no-op), as an idle partition's does. Prints the CPU
seconds and wall seconds per phase and, last, one JSON line (`cpu_ms_per_replica` per phase).
`--profile FILE`: cProfile of the three phases (`python -m pstats FILE`), the storage thread's
work run on the event loop's thread for it.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable

from cluster.multiraft import MultiRaft
from cluster.opener import ReplicaOpener
from cluster.topic_spec import TopicSpec
from raft.config import RaftConfig
from raft.types import Configuration, Entry, EntryKind
from storage import FileHandles, FsyncPolicy, HardState, LogConfig, StateJournal

NODES = ("n1", "n2", "n3")


def _spec(partitions: int) -> TopicSpec:
    return TopicSpec(
        name="open",
        partitions=partitions,
        replication_factor=3,
        assignment=tuple(NODES for _ in range(partitions)),
        uid="0123456789abcdef0123456789abcdef",
    )


class _Bench:
    def __init__(self, root: str, partitions: int) -> None:
        self.root = root
        self.spec = _spec(partitions)
        self.clock = 0.0
        self.inline = False

    def opener(self, cleanly_closed: set[str]) -> tuple[ReplicaOpener, MultiRaft]:
        journal = StateJournal(os.path.join(self.root, "state.journal"))
        multiraft = MultiRaft("n1", lambda *a: None, 0.05, journal)
        if self.inline:  # the storage thread's work on this one, where cProfile sees it

            async def inline(work: Callable[[], object], what: str = "") -> object:
                return work()

            multiraft.run_storage = inline  # type: ignore[method-assign]
        opener = ReplicaOpener(
            node_id="n1",
            partitions_dir=os.path.join(self.root, "partitions"),
            journal=journal,
            raft_config=RaftConfig(election_ticks=10, heartbeat_ticks=2),
            log_config=LogConfig(fsync=FsyncPolicy.parse("always")),
            handles=FileHandles(10_000),
            multiraft=multiraft,
            topics=lambda: {self.spec.name: self.spec},
            clock=lambda: self.clock,
        )
        opener.cleanly_closed = cleanly_closed
        return opener, multiraft

    async def open_all(self, cleanly_closed: set[str]) -> tuple[ReplicaOpener, MultiRaft]:
        opener, multiraft = self.opener(cleanly_closed)
        bootstrap = Configuration(voters=frozenset(NODES))
        for index in range(self.spec.partitions):
            opener.queue(self.spec, index, bootstrap)
        while opener.pending:
            self.clock += 60.0  # every replica opened so far counts as settled
            await opener.open_pending()
        return opener, multiraft


def _close(multiraft: MultiRaft, *, noop: bool) -> None:
    """Closes every replica (flushed: a clean stop); `noop`: each first gets a term-1 no-op
    entry and hard state, as an elected idle group's replicas hold."""
    states: dict[str, HardState | None] = {}
    for replica in multiraft.replicas.values():
        if noop and replica.segmented.last_index == 0:
            replica.log.append([Entry(1, 1, EntryKind.NOOP, 0, b"", 0)])
            states[replica.group] = HardState(1, "n1", 1)
        replica.segmented.close()
    multiraft.journal.save_many(states)
    multiraft.journal.close()


def _phase(
    bench: _Bench, name: str, cleanly: bool, profile: cProfile.Profile | None
) -> dict[str, float]:
    groups = {f"open/{i}" for i in range(bench.spec.partitions)} if cleanly else set()
    cpu, wall = time.process_time(), time.perf_counter()
    if profile is not None:
        profile.enable()
    _, multiraft = asyncio.run(bench.open_all(groups))
    if profile is not None:
        profile.disable()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    _close(multiraft, noop=name == "new")
    count = len(multiraft.replicas)
    print(f"{name:>6}: {count} replicas, {cpu:.2f} CPU s, {wall:.2f} s", file=sys.stderr)
    return {"cpu_ms_per_replica": round(cpu * 1000 / count, 3), "wall_s": round(wall, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2000)
    parser.add_argument("--profile", help="write a cProfile of the phases here")
    args = parser.parse_args(argv)
    profile = cProfile.Profile(time.thread_time) if args.profile else None  # CPU, not waits
    with tempfile.TemporaryDirectory(prefix="flotilla-open-", dir=os.getcwd()) as root:
        bench = _Bench(root, args.replicas)
        bench.inline = profile is not None
        figures = {
            "new": _phase(bench, "new", False, profile),
            "clean": _phase(bench, "clean", True, profile),
            "crash": _phase(bench, "crash", False, profile),
        }
    if profile is not None:
        profile.dump_stats(args.profile)
    print(json.dumps({"replicas": args.replicas, **figures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
