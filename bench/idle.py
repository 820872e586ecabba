"""Idle benchmark: what thousands of idle partitions cost once they have quiesced.

    python -m bench.idle --partitions 1000                 (3 nodes)
    python -m bench.idle --nodes 5 --partitions 100000 --restart

`--nodes` local nodes (127.0.0.1..N), N partitions at replication factor 3 (in topics of at
most 10,000 partitions, a topic's limit), no traffic after creation. It times the creation call, then waits until every partition has a
leader (`leaders_s`, counted from the creation request), then until every group has quiesced (no
node is ticking any group) and leader balancing has settled (leaders unchanged for 15 s), then
samples each node's CPU time (/proc/<pid>/stat) over `--sample-s` seconds, its resident memory
and its open files (/proc/<pid>/fd), and counts each node's leaders. A sampler thread reads every
node's open files and RSS twice a second from creation on, so the peaks during creation and
election are reported beside the idle figures.

`--restart` then stops the last node gracefully (SIGTERM), starts it again and times it back to
serving all its replicas: "serving" means the node hosts again as many replicas as before the
stop (Health.partitions) and every one of them knows its group's leader (Health.replicas_led,
a leader counting itself). Health is cheap to poll (a count over the node's replicas), so the
polling does not slow the restart it measures.
`restart_s` is counted from the start of the new process (the stop's own time is reported apart).

`--keep DIR` runs the cluster in DIR and leaves it there (the nodes' logs, to read after a slow
run); while it waits for every leader it reports, every 30 s, how many replicas are hosted and
led and how many members each node counts alive.

`--profile DIR` records py-spy (`--gil`: Python-level CPU; py-spy must be installed, see
bench/profiles/README.md) on one node (`--profile-node`, default the first) from the creation
request until every partition is led, and with `--restart` on the restarted node from its start
until it serves again: `DIR/elect-<node>.txt` / `DIR/restart-<node>.txt` (collapsed stacks),
with a flame graph (`.svg`) and a summary of each (`bench.profile`'s).

Prints a table and, last, one JSON line with the goal's figures (issue 28: 100,000 partitions RF3
on 5 nodes: leaders within 120 s, idle < 5% of a core and < 1 GB RSS per node, open files under
the 20,000 cap, a restart back to serving within 60 s) and each figure's ratio to its goal
(`ratio_to_goal`, below 1.0 meets it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc

from bench.procfs import cpu_seconds, open_files, rss_mb
from cluster.local import LocalCluster
from flotilla import Client
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

# the /proc readers, where other benchmarks have imported them from
__all__ = ["cpu_seconds", "main", "open_files", "rss_mb"]

CONFIG = 'tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nfsync = "always"\n'
# leaders unchanged and every group quiesced this long before sampling: longer than the nodes'
# leader-balancing hold (`leader_balance_after_s`, 10 s, after a member's last busy second of
# campaigns: `cluster.steward`), so balancing yet to begin is not taken for a balanced cluster
STABLE_S = 15.0
PROGRESS_S = 30.0  # how often the wait for every leader reports how far it got
SAMPLE_EVERY_S = 0.5  # the open-files and RSS sampler's period
TOPIC = "idle"
MAX_TOPIC_PARTITIONS = 10_000  # a topic's limit: more partitions are spread over several topics
# issue 28's goals at 100,000 partitions on 5 nodes
GOALS = {
    "leaders_s": 120.0,
    "idle_cpu_pct_max": 5.0,
    "rss_mb_max": 1024.0,
    "open_files_max": 20_000.0,
    "restart_s": 60.0,
}


def stub_call(cluster: LocalCluster, node_id: str, call: Callable[[object], object]) -> object:
    """`call(stub)` on node `node_id`, or None if the node does not answer."""
    try:
        with grpc.insecure_channel(cluster.nodes[node_id].address) as channel:
            return call(flotilla_pb2_grpc.FlotillaStub(channel))
    except grpc.RpcError:
        return None


def health(cluster: LocalCluster, node_id: str) -> pb.HealthResponse | None:
    return stub_call(cluster, node_id, lambda s: s.Health(pb.HealthRequest(), timeout=10))  # type: ignore[attr-defined,return-value]


class Sampler:
    """A thread reading each node's open files and RSS every SAMPLE_EVERY_S; keeps the peaks
    (per node) since the last `reset`."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.peak_files: dict[str, int] = {}
        self.peak_rss: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def reset(self) -> tuple[dict[str, int], dict[str, float]]:
        """The peaks so far; starts counting afresh."""
        with self._lock:
            peaks = (dict(self.peak_files), dict(self.peak_rss))
            self.peak_files.clear()
            self.peak_rss.clear()
        return peaks

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            for node_id, spec in self.cluster.nodes.items():
                if spec.process is None or spec.process.poll() is not None:
                    continue
                try:
                    files, rss = open_files(spec.process.pid), rss_mb(spec.process.pid)
                except OSError:
                    continue  # exited between the check and the read
                with self._lock:
                    self.peak_files[node_id] = max(files, self.peak_files.get(node_id, 0))
                    self.peak_rss[node_id] = max(rss, self.peak_rss.get(node_id, 0.0))


def progress(text: str) -> None:
    """A line on stderr as each phase ends, so a run cut short still tells what it measured."""
    print(f"[bench.idle] {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _cluster_root(keep: str | None) -> Iterator[str]:
    """`keep` (made, and left afterwards), else a temporary directory removed afterwards."""
    if keep:
        os.makedirs(keep)
        progress(f"the cluster lives in {keep} (kept)")
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="flotilla-idle-", dir=os.getcwd()) as root:
        yield root


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.5)
    return time.monotonic() - started


class Profiler:
    """py-spy recording one process until `stop` (SIGINT: it then writes its collapsed stacks),
    which draws the flame graph and prints the summary. A no-op without a directory."""

    RATE = 99  # samples per second

    def __init__(self, out: str | None, name: str, pid: int) -> None:
        self.raw = os.path.join(out, f"{name}.txt") if out else None
        self.process: subprocess.Popen[bytes] | None = None
        if self.raw is None:
            return
        os.makedirs(os.path.dirname(self.raw), exist_ok=True)
        py_spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        command = [py_spy, "record", "--pid", str(pid), "--rate", str(self.RATE), "--gil", "--nonblocking",
                   "--format", "raw", "-o", self.raw]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)

    def stop(self, title: str) -> None:
        if self.process is None or self.raw is None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        if os.path.exists(self.raw):
            from bench.profile import flame_svg, summarize

            raw = Path(self.raw)
            flame_svg(raw, raw.with_suffix(".svg"), title)
            progress(f"profile {raw}:\n{summarize(raw, top=25)}")


def restart(
    cluster: LocalCluster,
    node_id: str,
    timeout_s: float,
    profile: str | None = None,
    number: int = 0,
) -> dict[str, float]:
    """Stops `node_id` gracefully, starts it again and times it back to serving every replica
    it held (see the module docstring)."""
    before = health(cluster, node_id)
    assert before is not None, f"{node_id} does not answer Health before its restart"
    replicas = before.partitions
    started = time.monotonic()
    cluster.stop(node_id, timeout_s=timeout_s)
    stop_s = time.monotonic() - started
    progress(f"{node_id} ({replicas} replicas) stopped in {stop_s:.1f} s; starting it again")
    started = time.monotonic()
    cluster.start(node_id, wait=False)
    process = cluster.nodes[node_id].process
    assert process is not None
    name = f"restart-{node_id}" + (f"-{number + 1}" if number else "")
    profiler = Profiler(profile, name, process.pid)

    def hosting() -> bool:
        view = health(cluster, node_id)
        return view is not None and view.partitions >= replicas

    def serving() -> bool:
        view = health(cluster, node_id)
        return view is not None and view.replicas_led >= replicas

    hosting_s = wait_for(hosting, timeout_s, f"{node_id} hosting its {replicas} replicas again")
    progress(f"{node_id} hosts its replicas again {hosting_s:.1f} s after its start")
    wait_for(serving, timeout_s, f"every replica of {node_id} knowing its leader")
    serving_s = time.monotonic() - started
    profiler.stop(f"restart of {node_id} ({replicas} replicas) until serving")
    return {
        "replicas": replicas,
        "stop_s": stop_s,
        "hosting_s": hosting_s,
        "restart_s": serving_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3, help="local nodes, 127.0.0.1..N")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="bound on each wait")
    parser.add_argument("--restart", action="store_true", help="time a restart of the last node")
    parser.add_argument(
        "--restarts",
        type=int,
        default=1,
        help="with --restart: how many restarts in turn, each once the cluster has settled again"
        " (the JSON line reports the slowest)",
    )
    parser.add_argument("--profile", help="a directory: py-spy records a node (module doc)")
    parser.add_argument("--profile-node", default="n1", help="the node --profile records")
    parser.add_argument(
        "--keep",
        help="a directory (made, must not exist) for the cluster, kept afterwards: the nodes' "
        "logs and data (default: a temporary directory, removed)",
    )
    args = parser.parse_args(argv)
    if args.nodes < 3:
        parser.error(f"--nodes {args.nodes}: replication factor 3 needs at least 3 nodes")
    if args.keep and os.path.exists(args.keep):
        parser.error(f"--keep {args.keep}: exists already; name a new directory")
    with (
        _cluster_root(args.keep) as root,
        LocalCluster(root, args.nodes, config_text=CONFIG) as cluster,
        Sampler(cluster) as sampler,
    ):
        cluster.start()
        nodes = list(cluster.nodes)
        pids = {n: cluster.nodes[n].process.pid for n in nodes}  # type: ignore[union-attr]
        # CPU the nodes spend creating and electing: a figure the machine's other load moves less
        # than the wall-clock time (still by a third between runs on a shared machine)
        cpu_at_start = sum(cpu_seconds(pid) for pid in pids.values())
        created_at = time.monotonic()
        profiler = Profiler(args.profile, f"elect-{args.profile_node}", pids[args.profile_node])
        with Client(cluster.addresses(), timeout_s=args.timeout_s) as client:
            for number, start in enumerate(range(0, args.partitions, MAX_TOPIC_PARTITIONS)):
                count = min(MAX_TOPIC_PARTITIONS, args.partitions - start)
                client.create_topic(f"{TOPIC}-{number}", partitions=count, replication_factor=3)
        create_s = time.monotonic() - created_at
        progress(f"created in {create_s:.1f} s")
        replicas = args.partitions * 3

        told = {"at": time.monotonic()}

        def all_led() -> bool:
            views = [health(cluster, n) for n in nodes]
            hosted = sum(v.partitions for v in views if v is not None)
            led = sum(v.leaders for v in views if v is not None)
            if time.monotonic() - told["at"] >= PROGRESS_S:  # the curve, for a slow election
                told["at"] = time.monotonic()
                alive = [v.members_alive if v is not None else "-" for v in views]
                progress(
                    f"{time.monotonic() - created_at:.0f} s: {hosted}/{replicas} replicas "
                    f"hosted, {led}/{args.partitions} led; members alive per node {alive}"
                )
            return (
                all(v is not None for v in views) and hosted >= replicas and led == args.partitions
            )

        leaders: dict[str, int] = {}

        def all_quiet() -> bool:
            views = [health(cluster, n) for n in nodes]
            leaders.update({n: v.leaders for n, v in zip(nodes, views, strict=True) if v})
            return all(v is not None and v.active_groups == 0 for v in views)

        # leader balancing moves leaders for a while after the first quiet moment (each move
        # wakes its group): sample only once the leaders have stayed put, all quiet, STABLE_S
        seen: dict[str, object] = {"leaders": None, "since": 0.0}

        def settled() -> bool:
            now, current = time.monotonic(), dict(leaders) if all_quiet() else None
            if current is None or current != seen["leaders"]:
                seen.update(leaders=current, since=now)
                return False
            return now - seen["since"] >= STABLE_S  # type: ignore[operator]

        wait_for(all_led, args.timeout_s, "every partition electing a leader")
        leaders_s = time.monotonic() - created_at
        elect_cpu_s = sum(cpu_seconds(pid) for pid in pids.values()) - cpu_at_start
        profiler.stop(f"{args.profile_node}, creation of {args.partitions} partitions until led")
        progress(
            f"every partition led {leaders_s:.1f} s after the creation request, the nodes"
            f" spending {elect_cpu_s:.1f} CPU s"
        )
        quiet_s = wait_for(settled, args.timeout_s, "every group quiescing, leaders settled")
        progress(f"quiesced and balanced {quiet_s:.1f} s later; sampling {args.sample_s} s")
        busy_files, busy_rss = sampler.reset()
        before = {n: cpu_seconds(pid) for n, pid in pids.items()}
        time.sleep(args.sample_s)
        cpu_pct = {
            n: (cpu_seconds(pid) - before[n]) / args.sample_s * 100 for n, pid in pids.items()
        }
        memory = {n: rss_mb(pid) for n, pid in pids.items()}
        files = {n: open_files(pid) for n, pid in pids.items()}
        progress(
            f"idle: CPU % { {n: round(v, 2) for n, v in cpu_pct.items()} }, RSS MB "
            f"{ {n: round(v) for n, v in memory.items()} }, open files {files},"
            f" peak files while busy {busy_files}"
        )
        sampler.reset()
        restarts: list[dict[str, float]] = []
        for number in range(args.restarts if args.restart else 0):
            if number:  # the leaderships balanced back and every group quiet again first
                seen.update(leaders=None, since=0.0)
                settle_s = wait_for(settled, args.timeout_s, "the cluster settling again")
                progress(f"settled {settle_s:.1f} s after restart {number}")
            restarts.append(restart(cluster, nodes[-1], args.timeout_s, args.profile, number))
        restarted = max(restarts, key=lambda each: each["restart_s"]) if restarts else None
        restart_files, restart_rss = sampler.reset()
    with open("/proc/loadavg") as file:
        loadavg = file.read().split()[:3]
    print(
        f"{args.partitions} partitions x RF 3 on {args.nodes} nodes (load average {' '.join(loadavg)}):"
        f" created in {create_s:.1f} s, every leader {leaders_s:.1f} s after the request,"
        f" quiesced and balanced {quiet_s:.1f} s later"
    )  # fmt: skip
    header = ("node", "idle CPU %", "RSS MB", "peak RSS MB", "open files", "peak files", "leaders")
    print(f"{header[0]:<6}" + "".join(f"{h:>13}" for h in header[1:]))
    for node in nodes:
        print(
            f"{node:<6}{cpu_pct[node]:>13.2f}{memory[node]:>13.1f}{busy_rss.get(node, 0):>13.1f}"
            f"{files[node]:>13}{busy_files.get(node, 0):>13}{leaders.get(node, 0):>13}"
        )
    for each in restarts:
        print(
            f"restart of {nodes[-1]} ({each['replicas']:.0f} replicas): stopped in"
            f" {each['stop_s']:.1f} s; hosting them all {each['hosting_s']:.1f} s after"
            f" its start, every one knowing its leader after {each['restart_s']:.1f} s;"
            f" peak open files {restart_files.get(nodes[-1], 0)},"
            f" peak RSS {restart_rss.get(nodes[-1], 0):.1f} MB"
        )  # fmt: skip
    rss_max = max([*memory.values(), *busy_rss.values(), *restart_rss.values()])
    files_max = max([*files.values(), *busy_files.values(), *restart_files.values()])
    figures: dict[str, float] = {
        "leaders_s": round(leaders_s, 1),
        "idle_cpu_pct_max": round(max(cpu_pct.values()), 2),
        "rss_mb_max": round(rss_max, 1),  # the busiest node's peak, creation and restart included
        "open_files_max": files_max,
    }
    if restarted is not None:
        figures["restart_s"] = round(restarted["restart_s"], 1)  # the slowest of them
    each_s = {"restart_s_each": [round(each["restart_s"], 1) for each in restarts]}
    print(json.dumps({
        "nodes": args.nodes,
        "partitions": args.partitions,
        "loadavg": float(loadavg[0]),
        "create_s": round(create_s, 1),
        # CPU seconds of all nodes from the creation request to every leader, per replica
        "elect_cpu_ms_per_replica": round(elect_cpu_s * 1000 / replicas, 2),
        **figures,
        "quiesce_s": round(leaders_s + quiet_s, 1),
        "idle_rss_mb_max": round(max(memory.values()), 1),
        "idle_open_files_max": max(files.values()),
        "leaders_per_node": leaders,
        # the busiest node's leaders over an even share (1.0: perfectly balanced)
        "leader_imbalance": round(max(leaders.values()) * len(nodes) / args.partitions, 3),
        **(each_s if restarts else {}),
        "ratio_to_goal": {k: round(v / GOALS[k], 3) for k, v in figures.items()},
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
