"""Nemeses: bounded faults on a running local cluster, on a schedule fixed by a seed.

`schedule(names, duration_s, seed)` is pure: alternating quiet gaps and fault windows, each fault
a nemesis name drawn (seeded) from `names`, every window ending before `duration_s`. `Nemesis`
runs it in a thread: at a window's start it injects the fault (choosing targets with a
`random.Random` seeded from the run seed and the window number), at its end it heals, and it logs
both to the history as `fault-start` / `fault-stop`. `heal_all()` undoes everything (links,
toxics, paused and killed nodes) and is called once more after the run, whatever happened.

Partitions cut proxies (chaos/network.py): isolate-one, isolate-leader (of partition 0),
majority-minority, bridge, ring; partition-random picks one of them. Processes: kill-leader and
kill-random (SIGKILL, restart at heal), pause (SIGSTOP of the leader, SIGCONT at heal),
rolling-restart (graceful stop + start of every node in turn), leave-join (a graceful stop leaves
the cluster, the restart at heal joins it again). Links: slow-links (latency), lossy-links
(timeout toxic on 30% of connections), flapping-links (random links cut and restored).

Moves: churn kills a node holding replicas and waits until placement has moved them all away
(past the nodes' `replace_after_s`: the node's replicas retire), then brings it back at heal, when
placement may add it again with wiped logs. It needs more nodes than the replication factor
(e.g. 5 nodes, replication 3) and a short `replace_after_s`; replicas that do not move within
`move_timeout_s` are a `fault-check` failure (the run did not test what it claims).
Disk: disk arms an I/O error (EIO or ENOSPC on write or fsync) in the storage of one node holding
replicas, through its fault-control file (chaos/disk.py), waits for the node to stop with exit
code 75 (fail-stop), clears the fault and restarts the node at heal. A node that does not stop is recorded as a
`fault-check` failure in the history, an anomaly for the checker.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chaos.disk import DISK_FAULTS, FAIL_STOP_EXIT_CODE, DiskFaultCluster
from chaos.history import EventType, HistoryWriter
from chaos.network import ChaosNetwork
from cluster.local import LocalCluster
from flotilla import Client
from flotilla.errors import FlotillaError

__all__ = ["NEMESES", "Fault", "Nemesis", "schedule"]

log = logging.getLogger("chaos.nemesis")
PARTITIONS = ("isolate-one", "isolate-leader", "majority-minority", "bridge", "ring")
PROCESS = ("kill-leader", "kill-random", "pause", "rolling-restart", "leave-join")
LINKS = ("slow-links", "lossy-links", "flapping-links")
MOVES = ("churn",)  # need more nodes than the replication factor
DISK = ("disk",)
NEMESES = ("partition-random", *PARTITIONS, *PROCESS, *LINKS, *MOVES, *DISK)


@dataclass(frozen=True, slots=True)
class Fault:
    number: int
    name: str
    start_s: float  # since the run started
    duration_s: float


def schedule(
    names: Sequence[str],
    duration_s: float,
    seed: int,
    *,
    quiet_s: tuple[float, float] = (1.0, 3.0),
    fault_s: tuple[float, float] = (2.0, 5.0),
    max_faults: int = 0,  # 0 = as many as fit in duration_s
) -> tuple[Fault, ...]:
    unknown = [n for n in names if n not in NEMESES]
    if unknown or not names:
        raise ValueError(f"unknown nemeses {unknown or names}; choose from {list(NEMESES)}")
    rng = random.Random(seed)
    faults: list[Fault] = []
    at = rng.uniform(*quiet_s)
    order = list(names)
    rng.shuffle(order)
    while not max_faults or len(faults) < max_faults:
        name = order[len(faults) % len(order)]
        length = rng.uniform(*fault_s)
        if at + length > duration_s - 1.0 and faults:
            break
        length = max(0.5, min(length, duration_s - 1.0 - at))
        faults.append(Fault(len(faults), name, round(at, 3), round(length, 3)))
        at += length + rng.uniform(*quiet_s)
    return tuple(faults)


class Nemesis:
    def __init__(
        self,
        cluster: LocalCluster,
        network: ChaosNetwork,
        client: Client,
        topic: str,
        history: HistoryWriter,
        seed: int,
        *,
        move_timeout_s: float = 90.0,
        fail_stop_timeout_s: float = 30.0,
    ) -> None:
        """`move_timeout_s`: how long churn waits for a killed node's replicas to move away;
        `fail_stop_timeout_s`: how long disk waits for a node to stop after arming its fault."""
        self.move_timeout_s = move_timeout_s
        self.fail_stop_timeout_s = fail_stop_timeout_s
        self.cluster = cluster
        self.network = network
        self.client = client
        self.topic = topic
        self.history = history
        self.seed = seed
        self.paused: set[str] = set()
        self.killed: set[str] = set()
        self._stop = threading.Event()
        self._flapping: threading.Thread | None = None
        self._flap_stop = threading.Event()

    # -- targets ---------------------------------------------------------------------------------
    def leader(self, rng: random.Random, partition: int = 0) -> str:
        with contextlib.suppress(FlotillaError, IndexError):
            leader = self.client.describe_topic(self.topic).partitions[partition].leader
            if leader in self.cluster.nodes:
                return leader
        return rng.choice(sorted(self.cluster.nodes))

    def placed(self) -> dict[int, tuple[str, ...]]:
        """The replicas of each partition of the topic, as the cluster reports them now."""
        return {
            p.index: tuple(p.replicas) for p in self.client.describe_topic(self.topic).partitions
        }

    # -- faults ----------------------------------------------------------------------------------
    def inject(self, name: str, rng: random.Random) -> tuple[str, Callable[[], None]]:
        """Starts fault `name`; returns what it did and the function that heals it."""
        nodes = sorted(self.cluster.nodes)
        net = self.network
        if name == "partition-random":
            name = rng.choice(PARTITIONS)
        if name in ("isolate-one", "isolate-leader"):
            target = rng.choice(nodes) if name == "isolate-one" else self.leader(rng)
            net.partition([[target], [n for n in nodes if n != target]])
            return f"{name} {target}", net.heal
        if name == "majority-minority":
            shuffled = rng.sample(nodes, len(nodes))
            minority = shuffled[: (len(nodes) - 1) // 2]
            net.partition([minority, shuffled[len(minority) :]])
            return f"{name} minority={minority}", net.heal
        if name == "bridge":  # two halves that only the bridge node joins
            shuffled = rng.sample(nodes, len(nodes))
            bridge, rest = shuffled[0], shuffled[1:]
            half = len(rest) // 2
            net.partition([[bridge, *rest[:half]], [bridge, *rest[half:]]])
            return f"{name} via {bridge}", net.heal
        if name == "ring":  # each node sees only its ring neighbours: every majority differs
            ring = rng.sample(nodes, len(nodes))
            groups = [[ring[i], ring[(i + 1) % len(ring)]] for i in range(len(ring))]
            net.partition(groups)
            return f"{name} {ring}", net.heal
        if name in ("kill-leader", "kill-random"):
            target = self.leader(rng) if name == "kill-leader" else rng.choice(nodes)
            self.cluster.kill(target)
            self.killed.add(target)
            return f"{name} {target}", lambda: self._restart(target)
        if name == "pause":
            target = self.leader(rng)
            self.cluster.pause(target)
            self.paused.add(target)
            return f"pause {target}", lambda: self._resume(target)
        if name == "leave-join":  # a graceful stop leaves the cluster; the restart joins again
            target = rng.choice(nodes)
            self.cluster.stop(target, timeout_s=15)
            return f"leave-join {target}", lambda: self._restart(target)
        if name == "rolling-restart":
            for node_id in nodes:
                if self._stop.is_set():
                    break
                self.cluster.stop(node_id, timeout_s=10)
                self._restart(node_id)
            return "rolling-restart " + ",".join(nodes), lambda: None
        if name == "slow-links":
            for a in nodes:
                for b in nodes:
                    if a != b:
                        net.add_toxic(a, b, "latency", {"latency": 60, "jitter": 40})
            return "slow-links latency=60±40ms", net.heal
        if name == "lossy-links":
            for a in nodes:
                for b in nodes:
                    if a != b:
                        net.add_toxic(a, b, "timeout", {"timeout": 500}, toxicity=0.3)
            return "lossy-links timeout toxicity=0.3", net.heal
        if name == "flapping-links":
            self._flap_stop.clear()
            self._flapping = threading.Thread(
                target=self._flap, args=(random.Random(rng.random()),), name="flap", daemon=True
            )
            self._flapping.start()
            return "flapping-links", self._stop_flapping
        if name == "churn":
            return self._churn(rng)
        if name == "disk":
            return self._disk(rng)
        raise ValueError(f"unknown nemesis {name!r}; choose from {list(NEMESES)}")

    def _churn(self, rng: random.Random) -> tuple[str, Callable[[], None]]:
        """Kills a node holding replicas and blocks until placement has moved them all away."""
        placed = self.placed()
        factor = max(len(replicas) for replicas in placed.values())
        if len(self.cluster.nodes) <= factor:
            raise ValueError(
                f"churn needs more nodes than the replication factor {factor}, "
                f"not {len(self.cluster.nodes)}: e.g. --nodes {factor + 2}"
            )
        holders = sorted({node for replicas in placed.values() for node in replicas})
        target = rng.choice(holders)
        self.cluster.kill(target)
        self.killed.add(target)
        started = time.monotonic()
        deadline = started + self.move_timeout_s
        moved = False
        while not self._stop.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(FlotillaError):
                moved = all(target not in r for r in self.placed().values())
            if moved:
                break
            self._stop.wait(0.2)
        waited = time.monotonic() - started
        state = "moved away" if moved else "NOT moved away"
        what = f"churn {target}: its replicas {state} after {waited:.1f} s"
        if not moved and not self._stop.is_set():  # the run would not have tested what it says
            problem = f"{target}'s replicas were not moved away {waited:.1f} s after its kill"
            self.history.record("nemesis", EventType.FAIL, "fault-check", value=problem)
        return what, lambda: self._restart(target)

    def _disk(self, rng: random.Random) -> tuple[str, Callable[[], None]]:
        """Arms a disk fault on one node; it must stop with exit code 75 within the deadline."""
        if not isinstance(self.cluster, DiskFaultCluster):
            raise ValueError("disk needs nodes started with fault-control files: DiskFaultCluster")
        # a node holding replicas: the workload's writes reach its disk (one that holds none
        # may write nothing for as long as the deadline)
        running = {n for n in self.cluster.nodes if self.cluster.is_running(n)}
        holders = running
        with contextlib.suppress(FlotillaError):
            holders = {n for replicas in self.placed().values() for n in replicas} & running
        target = rng.choice(sorted(holders or running))
        fault = rng.choice(DISK_FAULTS)
        self.killed.add(target)
        self.cluster.arm(target, fault)
        try:
            code = self.cluster.wait_exit(target, self.fail_stop_timeout_s)
        finally:
            self.cluster.clear(target)
        if code != FAIL_STOP_EXIT_CODE:
            seen = "was still running" if code is None else f"exited with {code}"
            problem = (
                f"{target} {seen} {self.fail_stop_timeout_s:g} s after {fault} was armed; a "
                f"node must stop with exit code {FAIL_STOP_EXIT_CODE} on a storage error"
            )
            log.warning("nemesis disk: %s", problem)
            self.history.record("nemesis", EventType.FAIL, "fault-check", value=problem)
            self.cluster.kill(target)
        return f"disk {target} {fault}: exit code {code}", lambda: self._restart(target)

    def _flap(self, rng: random.Random) -> None:
        nodes = sorted(self.cluster.nodes)
        while not self._flap_stop.wait(rng.uniform(0.2, 0.6)):
            a, b = rng.sample(nodes, 2)
            with contextlib.suppress(Exception):
                self.network.set_link(a, b, (a, b) in self.network.cut)

    def _stop_flapping(self) -> None:
        self._flap_stop.set()
        if self._flapping is not None:
            self._flapping.join(timeout=10)
        self.network.heal()

    def _restart(self, node_id: str) -> None:
        self.cluster.start(node_id, wait=False)
        with contextlib.suppress(TimeoutError, RuntimeError):
            self.cluster.wait_serving(node_id, timeout_s=30)
        self.killed.discard(node_id)

    def _resume(self, node_id: str) -> None:
        self.cluster.resume(node_id)
        self.paused.discard(node_id)

    # -- running ---------------------------------------------------------------------------------
    def run(self, faults: Sequence[Fault], started_at: float) -> None:
        """Runs the schedule (blocking); `stop()` ends it early. Always heals what it started.
        A fault that overruns its window shifts the rest: every window keeps its duration."""
        for fault in faults:
            if self._stop.wait(max(0.0, started_at + fault.start_s - time.monotonic())):
                break
            # an injection that overran its window (rolling-restart) delays the later ones
            started_at = max(started_at, time.monotonic() - fault.start_s)
            rng = random.Random(f"{self.seed}/{fault.number}")
            window = f"{fault.name}#{fault.number}"  # fault-start/-stop carry the same value
            self.history.record("nemesis", EventType.INFO, "fault-start", value=window)
            heal: Callable[[], None] = self.heal_all
            try:
                what, heal = self.inject(fault.name, rng)
            except Exception as error:  # a nemesis that fails to inject is logged, not fatal
                log.warning("nemesis %s failed to inject: %s", fault.name, error)
                what = f"{fault.name} (failed: {error})"
            self.history.record("nemesis", EventType.INFO, "fault-target", value=what)
            end = started_at + fault.start_s + fault.duration_s
            self._stop.wait(max(0.0, end - time.monotonic()))
            started_at = max(started_at, time.monotonic() - fault.start_s - fault.duration_s)
            try:
                heal()
            finally:
                self.history.record("nemesis", EventType.INFO, "fault-stop", value=window)

    def stop(self) -> None:
        self._stop.set()

    def heal_all(self) -> None:
        self._flap_stop.set()
        if self._flapping is not None:
            self._flapping.join(timeout=10)
        self.network.heal()
        for node_id in sorted(self.paused):
            self._resume(node_id)
        for node_id in sorted(self.cluster.nodes):
            if not self.cluster.is_running(node_id):
                self._restart(node_id)
