"""Flame graphs of a produce: py-spy on the leader, a follower and the client under the load of
`bench.produce`, and where the samples go by stage of "The path of a produce" (ARCHITECTURE.md).

    python -m bench.profile [--duration-s 12] [--rate 97] [--out bench/profiles]

Needs py-spy (`.venv/bin/pip install py-spy`; a tool, not a dependency of the project) and the
right to attach to the nodes (root, or ptrace_scope 0). One 3-node cluster as `bench.produce`
starts it (RF 3, acks=all, fsync always, 1 KiB records), plaintext, one topic of ONE partition
so that "leader" and "follower" name one role each. Two loads, each for `--duration-s`:
- `sync`: `Client.produce`, one record in flight, one after another;
- `batch`: the batching producer with 1 MiB batches (linger 5 ms, 16 in flight).
For each, three py-spy recorders run at once, non-blocking (the process is not paused): one per
process, each writing a flame graph (`<load>-<role>.svg`) and the collapsed stacks, from which
this prints the share of samples per stage and the top functions by own time.
"""

from __future__ import annotations

import argparse
import collections
import html
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.produce import CONFIG, RECORD, process_cpu_s
from cluster.local import LocalCluster
from flotilla import Client

# The stage a file belongs to; a sample counts for the innermost frame of ours (so a library
# called from our code counts for the stage that called it); samples with no frame of ours go
# to the library they are in.
STAGES = [
    ("1 SDK: producer, plan, router", ("flotilla/",)),
    ("1/3 batch encode (client) or check (service): proto/", ("proto/",)),
    ("2 admission", ("cluster/ingress.py",)),
    ("3 service + idempotence", ("cluster/service.py", "cluster/idempotence.py",
                                 "cluster/producers.py", "cluster/replica.py",
                                 "cluster/node.py", "cluster/acl_")),
    ("4 raft + multiraft", ("cluster/multiraft.py", "raft/core", "raft/log", "raft/progress",
                            "raft/quorum", "raft/ready", "raft/types", "raft/")),
    ("5 disk: persist, log, segment", ("cluster/persist.py", "cluster/storage_thread.py",
                                       "raft/storage_log.py", "storage/")),
    ("6 peers: transport, frames", ("cluster/transport.py", "cluster/frames.py",
                                    "cluster/peer_service.py", "cluster/raft_link.py",
                                    "cluster/raft_inbox.py")),
    ("other cluster/", ("cluster/",)),
    ("bench driver", ("bench/",)),
]  # fmt: skip
# the load's first round (its producer set up, its connections open) is acknowledged within this
WARM_UP_TIMEOUT_S = 60.0
LIBRARIES = [
    ("grpc", ("grpc/", "grpc_")),
    ("asyncio loop", ("asyncio/", "uvloop")),
    ("threads, queues, futures", ("threading.py", "queue.py", "concurrent/")),
]


def _frame_file(frame: str) -> str:
    # py-spy's raw frame: "function (path/to/file.py:line)"
    start = frame.rfind(" (")
    return frame[start + 2 : -1] if start >= 0 else frame


def _ours(path: str) -> str | None:
    root = str(Path(__file__).resolve().parent.parent) + "/"
    if ".venv" in path or "site-packages" in path:
        return None
    relative = path[len(root) :] if path.startswith(root) else path
    if relative.startswith(("flotilla/cli.py", "flotilla/cli_node.py", "flotilla/__main__")):
        return None  # a node's entry point: under every sample, the stage of none
    for stage, prefixes in STAGES:
        if relative.startswith(prefixes):
            return stage
    return None


def stage_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        stage = _ours(_frame_file(frame))
        if stage is not None:
            return stage
    for frame in reversed(stack):
        path = _frame_file(frame)
        for name, markers in LIBRARIES:
            if any(marker in path for marker in markers):
                return name
    return "other"


def summarize(raw: Path, top: int = 12) -> str:
    """Shares of samples by stage and the top functions by own samples, from collapsed stacks."""
    stages: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text:
            continue
        count = int(count_text)
        stack = [f for f in stack_text.split(";") if not f.startswith(("process ", "thread "))]
        total += count
        stages[stage_of(stack)] += count
        if stack:  # own time by function (file, no line): lines of one function summed
            leaf = stack[-1]
            own[leaf[: leaf.rfind(":")] + ")" if ":" in leaf else leaf] += count
    leaves = collections.Counter(
        next((name for name, markers in LIBRARIES if any(m in _frame_file(f) for m in markers)),
             "ours or other")
        for f, n in own.items() for _ in range(n)
    )  # fmt: skip
    lines = [f"  {total} samples"]
    lines += [f"  {count / total:6.1%}  {stage}" for stage, count in stages.most_common()]
    lines.append("  own time (the innermost frame) in a library:")
    lines += [f"  {count / total:6.1%}  {name}" for name, count in leaves.most_common()]
    lines.append("  top own time:")
    lines += [f"  {count / total:6.1%}  {frame}" for frame, count in own.most_common(top)]
    return "\n".join(lines)


def _stacks(raw: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in raw.read_text().splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if stack_text:
            frames = [f for f in stack_text.split(";") if not f.startswith(("process ", "thread "))]
            stacks.append((frames, int(count_text)))
    return stacks


def flame_svg(raw: Path, svg: Path, title: str, min_share: float = 0.002) -> None:
    """An SVG flame graph of collapsed stacks (root at the bottom, width = samples; a frame
    under `min_share` of the samples is left out so the file stays small), each frame coloured
    by its stage and titled with its samples and share."""
    tree: dict[str, list[Any]] = {}  # name -> [count, children]
    total = 0
    for frames, count in _stacks(raw):
        total += count
        level = tree
        for frame in frames:
            node = level.setdefault(frame, [0, {}])
            node[0] += count
            level = node[1]
    width, row = 1200.0, 16
    rects: list[str] = []
    depth_max = 0

    def draw(level: dict[str, list[Any]], x: float, depth: int) -> None:
        nonlocal depth_max
        for name, (count, children) in sorted(level.items()):
            if count < total * min_share:
                x += count / total * width
                continue
            w = count / total * width
            depth_max = max(depth_max, depth)
            stage = _ours(_frame_file(name)) or ""
            hue = 10 + 25 * (int(stage[0]) if stage[:1].isdigit() else 8)
            label = html.escape(name)
            text = label[: int(w / 7)] if w > 30 else ""
            rects.append(
                f"<g><title>{label} ({count} samples, {count / total:.1%})</title>"
                f'<rect x="{x:.1f}" y="{{y{depth}}}" width="{w:.1f}" height="{row - 1}" '
                f'fill="hsl({hue},70%,60%)"/><text x="{x + 2:.1f}" y="{{t{depth}}}">{text}'
                "</text></g>"
            )
            draw(children, x, depth + 1)
            x += w

    draw(tree, 0.0, 0)
    height = (depth_max + 3) * row
    body = "\n".join(rects)
    for depth in range(depth_max + 1):
        y = height - (depth + 2) * row
        body = body.replace(f"{{y{depth}}}", str(y)).replace(f"{{t{depth}}}", str(y + row - 4))
    svg.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
        'font-family="monospace" font-size="11">\n'
        f'<text x="4" y="12">{html.escape(title)}: {total} samples</text>\n{body}\n</svg>\n'
    )


def _load(client: Client, kind: str, stop: threading.Event, warm: threading.Event) -> int:
    """Produces until `stop`; the records acknowledged. Sets `warm` once the first round (one
    record, or a producer's first 4096) is acknowledged: from then on the load is steady."""
    done = 0
    if kind == "sync":
        while not stop.is_set():
            client.produce("profile", RECORD, partition=0)
            done += 1
            warm.set()
        return done
    with client.producer(linger_ms=5, batch_bytes=1 << 20, max_in_flight=16) as producer:
        while not stop.is_set():
            futures = [producer.send("profile", RECORD, partition=0) for _ in range(4096)]
            producer.flush()
            for future in futures:
                future.result()
            done += len(futures)
            warm.set()
    return done


def record(
    pids: dict[str, int], out: Path, kind: str, duration_s: int, rate: int, extra: list[str]
) -> None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    recorders = []
    for role, pid in pids.items():
        command = [py_spy, "record", "--pid", str(pid), "--duration", str(duration_s),
                   "--rate", str(rate), "--format", "raw", *extra,
                   "-o", str(out / f"{kind}-{role}.txt")]  # fmt: skip
        recorders.append(
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        )
    for recorder in recorders:
        try:
            recorder.wait(timeout=duration_s + 30)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=int, default=12)
    parser.add_argument("--rate", type=int, default=199, help="samples per second per process")
    parser.add_argument("--out", type=Path, default=Path("bench/profiles"))
    parser.add_argument("--loads", default="sync,batch")
    parser.add_argument("--summarize", action="store_true", help="only print --out's summaries")
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    args = parser.parse_args(argv)
    if args.summarize:
        for raw in sorted(args.out.glob("*.txt")):
            print(f"-- {raw.stem}\n{summarize(raw)}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="flotilla-profile-", dir=os.getcwd()) as root,
        LocalCluster(root, 3, config_text=CONFIG) as cluster,
    ):
        cluster.start()
        with Client(cluster.addresses(), timeout_s=60) as client:
            client.create_topic("profile", partitions=1, replication_factor=3)
            client.produce("profile", RECORD, partition=0)
            leader = client.describe_topic("profile").partitions[0].leader
            follower = next(node for node in cluster.nodes if node != leader)
            pids = {"client": os.getpid()}
            for role, node in (("leader", leader), ("follower", follower)):
                process = cluster.nodes[node].process
                assert process is not None
                pids[role] = process.pid
            for kind in args.loads.split(","):
                stop, warm = threading.Event(), threading.Event()
                counted: list[int] = []
                worker = threading.Thread(
                    target=lambda k=kind, c=counted, s=stop, w=warm: c.append(
                        _load(client, k, s, w)
                    )
                )
                began = time.perf_counter()
                worker.start()
                # past the first round's setup (producer, connections): profile the steady state
                if not warm.wait(timeout=WARM_UP_TIMEOUT_S):
                    stop.set()
                    raise SystemExit(f"{kind}: no record acknowledged in {WARM_UP_TIMEOUT_S} s")
                cpu_before = {role: process_cpu_s(pid) for role, pid in pids.items()}
                record(
                    pids,
                    args.out,
                    kind,
                    args.duration_s,
                    args.rate,
                    ["--gil", *(["--native"] if args.native else [])],
                )
                cpu = {role: process_cpu_s(pid) - cpu_before[role] for role, pid in pids.items()}
                stop.set()
                worker.join(timeout=120)
                elapsed = time.perf_counter() - began  # the warm-up's records are counted too
                print(f"== {kind}: {sum(counted):,} records in {elapsed:.1f} s")
                for role in pids:
                    raw = args.out / f"{kind}-{role}.txt"
                    flame_svg(raw, raw.with_suffix(".svg"), f"{kind} produce, {role}")
                    print(f"-- {kind} {role}: {cpu[role] / args.duration_s:.0%} of a core")
                    print(summarize(args.out / f"{kind}-{role}.txt"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
