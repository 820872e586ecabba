"""Idle benchmark: what thousands of idle partitions cost once they have quiesced.

    python -m bench.idle --partitions 1000        (and 10000)

Three local nodes, one topic of N partitions at replication factor 3, no traffic after creation.
It waits until every partition has a leader, then until every group has quiesced (no node is
ticking any group) and leader balancing has settled (leaders unchanged for 5 s), then samples
each node's CPU time (/proc/<pid>/stat) over `--sample-s` seconds and its resident memory, and
counts each node's leaders. Prints a table and, last, one
JSON line: idle_cpu_pct_max (per cent of one core, busiest node), quiesce_s, rss_mb_max,
leaders_per_node, leader_imbalance (the busiest node's leaders over an even share). Target:
< 5% of one core per node at 10,000 partitions.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import grpc

from cluster.local import LocalCluster
from flotilla import Client
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

CONFIG = 'tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nfsync = "always"\n'
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STABLE_S = 5.0  # leaders unchanged and every group quiesced this long before sampling


def health(cluster: LocalCluster, node_id: str) -> pb.HealthResponse | None:
    try:
        with grpc.insecure_channel(cluster.nodes[node_id].address) as channel:
            return flotilla_pb2_grpc.FlotillaStub(channel).Health(pb.HealthRequest(), timeout=5)
    except grpc.RpcError:
        return None


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def wait_for(condition, timeout_s: float, what: str) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.5)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="flotilla-idle-", dir=os.getcwd()) as root,
        LocalCluster(root, 3, config_text=CONFIG) as cluster,
    ):
        cluster.start()
        with Client(cluster.addresses(), timeout_s=120) as client:
            client.create_topic("idle", partitions=args.partitions, replication_factor=3)
        nodes = list(cluster.nodes)

        def all_led() -> bool:
            views = [health(cluster, n) for n in nodes]
            return (
                all(v is not None and v.partitions == args.partitions for v in views)
                and sum(v.leaders for v in views if v is not None) == args.partitions
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

        led_s = wait_for(all_led, args.timeout_s, "every partition electing a leader")
        quiet_s = wait_for(settled, args.timeout_s, "every group quiescing, leaders settled")
        pids = {n: cluster.nodes[n].process.pid for n in nodes}  # type: ignore[union-attr]
        before = {n: cpu_seconds(pid) for n, pid in pids.items()}
        time.sleep(args.sample_s)
        cpu_pct = {
            n: (cpu_seconds(pid) - before[n]) / args.sample_s * 100 for n, pid in pids.items()
        }
        memory = {n: rss_mb(pid) for n, pid in pids.items()}
    print(
        f"{args.partitions} partitions x RF 3 on 3 nodes: leaders after {led_s:.1f} s, quiesced and balanced {quiet_s:.1f} s later"
    )
    print(f"{'node':<6}{'idle CPU % of a core':>22}{'RSS MB':>10}{'leaders':>10}")
    for node in nodes:
        print(f"{node:<6}{cpu_pct[node]:>22.2f}{memory[node]:>10.1f}{leaders[node]:>10}")
    print(json.dumps({
        "partitions": args.partitions,
        "idle_cpu_pct_max": round(max(cpu_pct.values()), 2),
        "quiesce_s": round(led_s + quiet_s, 1),
        "rss_mb_max": round(max(memory.values()), 1),
        "leaders_per_node": leaders,
        # the busiest node's leaders over an even share (1.0: perfectly balanced)
        "leader_imbalance": round(max(leaders.values()) * len(nodes) / args.partitions, 3),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
