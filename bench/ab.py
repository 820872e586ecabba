"""The batching producer against two versions of the node, alternated in one run: the nodes
of a git revision (A) and this work tree's (B) or another revision's (`--head`), so that the
machine's other load weighs on both alike.

    python -m bench.ab --base main [--head REV] [--records 60000] [--rounds 4] [--batch-kib 1024]
                       [--sync 500]

Two 3-node clusters side by side (bench.produce's: RF 3, acks=all, fsync always, 1 KiB
records), A's nodes run from `git archive <base>` unpacked in a scratch directory (PYTHONPATH),
B's from this tree (or `--head`'s); the client is this tree's for both. Each round runs the batching producer
(`linger_ms=5`, `max_in_flight=16`) on A then B, or B then A in alternate rounds. Printed per
side: records/s and MB/s (medians), their ratio to the disk's ceiling at the same batch size
(three writers fsyncing every batch, measured between the rounds), and the nodes' CPU (user +
system, all three nodes) per MiB produced. With `--sync N`, each round first runs N sync
produces (one in flight) on each side: their p50 and the CPU per produce of the client, the
leader of partition 0 and each follower (medians over the rounds). Last, one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.idle import cpu_seconds
from bench.produce import (
    CONFIG,
    RECORD,
    batching_produce,
    disk_ceiling,
    sync_cpu_per_produce,
    sync_latencies,
)
from cluster.local import LocalCluster
from flotilla import Client

SIDES = ("A", "B")


def export(revision: str, into: Path) -> str:
    """The tree of `revision` unpacked under `into`; its commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", revision], check=True, capture_output=True, text=True
    ).stdout.strip()
    archive = subprocess.run(["git", "archive", commit], check=True, capture_output=True)
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return commit


def side_env(tree: Path) -> dict[str, str]:
    """The environment that makes a node (`python -m flotilla`, started in this tree's
    directory) run the code of `tree`: PYTHONPATH alone does not, since `-m` puts the working
    directory first on sys.path, ahead of PYTHONPATH (PYTHONSAFEPATH leaves it out)."""
    return {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}


def nodes_cpu_s(cluster: LocalCluster) -> float:
    return sum(
        cpu_seconds(spec.process.pid) for spec in cluster.nodes.values() if spec.process is not None
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="git revision of side A's nodes")
    parser.add_argument("--head", help="git revision of side B's nodes (default: this tree)")
    parser.add_argument("--records", type=int, default=60_000, help="per round and side")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch-kib", type=int, default=1024)
    parser.add_argument(
        "--sync",
        type=int,
        default=0,
        help="also this many sync produces per round and side (one in flight): their p50 and "
        "the CPU each process spends per produce (0: none)",
    )
    args = parser.parse_args(argv)
    sync_cpu: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    sync_p50: dict[str, list[float]] = {side: [] for side in SIDES}
    batch_bytes = args.batch_kib * 1024
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu_per_mib: dict[str, list[float]] = {side: [] for side in SIDES}
    disks: list[float] = []
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flotilla-ab-")))
        trees = {"A": scratch / "tree-A", "B": scratch / "tree-B"}
        names = {"A": export(args.base, trees["A"]), "B": "this tree"}
        if args.head:
            names["B"] = export(args.head, trees["B"])
        sides: dict[str, tuple[LocalCluster, Client]] = {}
        for side in SIDES:
            exported = side == "A" or bool(args.head)
            env = side_env(trees[side]) if exported else {}
            cluster = stack.enter_context(
                LocalCluster(scratch / side, 3, config_text=CONFIG, env=env)
            )
            cluster.start()
            client = stack.enter_context(Client(cluster.addresses(), timeout_s=60))
            client.create_topic("bench", partitions=3, replication_factor=3)
            client.produce("bench", RECORD, partition=0)
            sides[side] = (cluster, client)
        for number in range(args.rounds):
            for side in SIDES if number % 2 == 0 else SIDES[::-1]:
                cluster, client = sides[side]
                if args.sync:
                    latencies, _ = sync_latencies(client, args.sync)
                    sync_p50[side].append(statistics.median(latencies) * 1000)
                    by_role, _ = sync_cpu_per_produce(client, cluster, args.sync)
                    # followers by role, not by id (which node leads may differ per side)
                    followers = sorted(ms for role, ms in by_role.items() if role.startswith("f"))
                    roles = {"client": by_role["client"], "leader": by_role["leader"]}
                    roles.update({f"follower {n + 1}": ms for n, ms in enumerate(followers)})
                    sync_cpu[side].append(roles)
                cpu_before = nodes_cpu_s(cluster)
                rate = batching_produce(client, args.records, 5, batch_bytes)
                mib = args.records * len(RECORD) / (1 << 20)
                rates[side].append(rate)
                cpu_per_mib[side].append((nodes_cpu_s(cluster) - cpu_before) / mib * 1000)
            disks.append(disk_ceiling(str(scratch), batch_bytes, args.records * len(RECORD)))
    disk = statistics.median(disks)
    figures: dict[str, dict[str, Any]] = {}
    medians = {side: statistics.median(rates[side]) for side in SIDES}
    print(f"A = nodes at {names['A']}, B = {names['B']}; 1 KiB records, {args.batch_kib} KiB")
    print(f"batches, {args.rounds} alternated rounds of {args.records:,} records (medians)")
    print(f"{'side':<6}{'records/s':>12}{'MB/s':>9}{'vs disk':>9}{'node CPU ms/MiB':>17}")
    for side in SIDES:
        rate = statistics.median(rates[side])
        mb_s = rate * len(RECORD) / 1e6
        cpu = statistics.median(cpu_per_mib[side])
        figures[side] = {"records_per_s": round(rate), "mb_per_s": round(mb_s, 1),
                         "vs_disk_ceiling": round(mb_s / disk, 3), "node_cpu_ms_per_mib": round(cpu, 1),
                         "rounds_records_per_s": [round(r) for r in rates[side]]}  # fmt: skip
        print(f"{side:<6}{rate:>12,.0f}{mb_s:>9.1f}{mb_s / disk:>8.2f}x{cpu:>17.1f}")
    print(
        f"disk ceiling, 3 x {args.batch_kib} KiB + fsync: {disk:.1f} MB/s (median of {len(disks)})"
    )
    for side in SIDES if args.sync else ():
        roles = {
            role: statistics.median(r[role] for r in sync_cpu[side]) for role in sync_cpu[side][0]
        }
        total = sum(roles.values())
        figures[side]["sync_p50_ms"] = round(statistics.median(sync_p50[side]), 2)
        figures[side]["sync_cpu_ms_per_produce"] = {r: round(ms, 3) for r, ms in roles.items()}
        figures[side]["sync_cpu_ms_total"] = round(total, 3)
        figures[side]["rounds_sync_cpu_ms_total"] = [
            round(sum(r.values()), 3) for r in sync_cpu[side]
        ]
        print(
            f"{side}: sync p50 {figures[side]['sync_p50_ms']:.2f} ms; CPU per sync produce "
            + ", ".join(f"{role} {ms:.2f}" for role, ms in roles.items())
            + f"; total {total:.2f} ms (medians of {len(sync_cpu[side])} rounds)"
        )
    print(json.dumps({"revisions": names, "batch_bytes": batch_bytes, "disk_ceiling_mb_per_s": round(disk, 1),
                      "B_over_A": round(medians["B"] / medians["A"], 3),
                      **figures}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
