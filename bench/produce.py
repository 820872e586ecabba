"""Produce benchmark: the SDK against a 3-node cluster, plaintext and with TLS, and our
transport's ceiling, in one run.

    python -m bench.produce [--records 50000] [--sync-records 500] [--event-loop asyncio]

Cluster: three local nodes, replication factor 3, acks=all, fsync always, 1 KiB records. The
cluster cases run on two clusters side by side, one plaintext, one with mutual TLS on every
connection (clients and peers; `LocalCluster(tls=True)`, the client with the `admin`
certificate), each case on one then the other, `--rounds` times (medians), so that load from
elsewhere on the machine weighs on both alike. What TLS costs: `tls_producer_throughput_ratio` (best batching producer, TLS over
plaintext; goal >= 0.8), `tls_sync_throughput_ratio` and `tls_sync_p50_delta_ms` (goal <= +0.3).
- synchronous produce, one record in flight: records/s, p50 and p99 latency, and where its
  time goes: the CPU each process (client, leader, followers) spends per request;
- the batching producer at several (linger_ms, batch_bytes) settings: records/s and MB/s;
- the ceiling: a bare grpc.aio bidirectional stream between two processes carrying the same
  batch sizes with an ack per message (what one gRPC hop costs in Python, no Raft, no disk),
  and the floor under a synchronous produce: a bare unary call's round trip, plus a bare stream
  round trip (leader to follower and back), plus one fdatasync (the follower's);
- the disk's ceiling for this workload: three writers (one per replica) appending the same
  bytes in batches of the same size to their own files on this disk, each fsyncing every batch.
Prints a table and, last, one JSON line with the figures, `produce_vs_grpc_ceiling` (best
batching-producer MB/s over the ceiling's MB/s at the same batch size) and
`produce_vs_disk_ceiling` (the same over the disk's ceiling).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import grpc

from bench.procfs import cpu_seconds
from cluster.local import LocalCluster, free_port
from flotilla import Client
from flotilla.cli import EVENT_LOOPS

RECORD = b"r" * 1024
CONFIG = 'tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nfsync = "always"\n'
SETTINGS = [(0, 64 * 1024), (5, 256 * 1024), (5, 1024 * 1024)]
_METHOD = "/bench.Ceiling/Stream"


# -- the ceiling: a bare bidirectional stream ---------------------------------------------------
async def _serve_ceiling(port: int) -> None:
    async def stream(requests, context):  # type: ignore[no-untyped-def]
        async for _ in requests:
            yield b"ok"

    async def ping(request, context):  # type: ignore[no-untyped-def]
        return b"ok"

    handler = grpc.method_handlers_generic_handler(
        "bench.Ceiling",
        {
            "Stream": grpc.stream_stream_rpc_method_handler(stream),
            "Ping": grpc.unary_unary_rpc_method_handler(ping),
        },
    )
    options = [
        ("grpc.max_receive_message_length", 64 << 20),
        ("grpc.max_send_message_length", 64 << 20),
    ]
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def _drive_ceiling(
    port: int, batch_bytes: int, total_bytes: int, in_flight: int = 4
) -> float:
    payload = os.urandom(batch_bytes)
    count = max(20, total_bytes // batch_bytes)
    options = [
        ("grpc.max_receive_message_length", 64 << 20),
        ("grpc.max_send_message_length", 64 << 20),
    ]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        call = channel.stream_stream(_METHOD)()
        started = time.perf_counter()
        sent = acked = 0
        while acked < count:
            while sent < count and sent - acked < in_flight:
                await call.write(payload)
                sent += 1
            await call.read()
            acked += 1
        elapsed = time.perf_counter() - started
        await call.done_writing()
    return count * batch_bytes / elapsed / 1e6


def unary_rtt_ms(port: int, count: int = 500) -> float:
    """p50 of a bare unary call carrying one record, sync client to grpc.aio server: the floor
    under a synchronous produce, which makes one such call plus the replication round trip."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        ping = channel.unary_unary("/bench.Ceiling/Ping")
        ping(RECORD)
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            ping(RECORD)
            latencies.append(time.perf_counter() - started)
    latencies.sort()
    return latencies[len(latencies) // 2] * 1000


async def _stream_rtt_ms(port: int, count: int = 500) -> float:
    """p50 of one record's round trip on a bare grpc.aio stream (write, then read the ack): the
    floor under the leader↔follower exchange a synchronous produce waits for."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream(_METHOD)()
        await call.write(RECORD)
        await call.read()
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            await call.write(RECORD)
            await call.read()
            latencies.append(time.perf_counter() - started)
        await call.done_writing()
    latencies.sort()
    return latencies[len(latencies) // 2] * 1000


def fdatasync_ms(directory: str, count: int = 300) -> float:
    """p50 of appending one record and fdatasync-ing it: the follower's disk wait under a
    synchronous produce (the leader's runs alongside the round trip)."""
    path = os.path.join(directory, "fdatasync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    latencies = []
    try:
        for _ in range(count):
            os.write(fd, RECORD)
            started = time.perf_counter()
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        os.unlink(path)
    latencies.sort()
    return latencies[len(latencies) // 2] * 1000


def ceiling(batch_sizes: list[int], total_bytes: int) -> tuple[dict[int, float], float, float]:
    port = free_port("127.0.0.1")
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.produce", "--ceiling-server", str(port)],
        stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
        limits = {
            size: asyncio.run(_drive_ceiling(port, size, total_bytes)) for size in batch_sizes
        }
        return limits, unary_rtt_ms(port), asyncio.run(_stream_rtt_ms(port))
    finally:
        server.kill()
        server.wait(timeout=10)


def disk_ceiling(directory: str, batch_bytes: int, total_bytes: int, writers: int = 3) -> float:
    """MB/s of records when `writers` threads (one per replica: os.write and fsync release the
    GIL) each append `total_bytes` in `batch_bytes` writes, fsyncing each, to a file of their own
    on this disk: what the disk allows a replicated, fsynced log, before any software."""
    payload = os.urandom(batch_bytes)
    count = max(20, total_bytes // batch_bytes)

    def write(number: int) -> None:
        path = os.path.join(directory, f"disk-ceiling-{number}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for _ in range(count):
                os.write(fd, payload)
                os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(path)

    started = time.perf_counter()
    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return count * batch_bytes / (time.perf_counter() - started) / 1e6


# -- the cluster -----------------------------------------------------------------------------------
def sync_latencies(client: Client, count: int) -> tuple[list[float], float]:
    """`count` synchronous produces one after another: each one's latency (s), and the total."""
    latencies = []
    started = time.perf_counter()
    for _ in range(count):
        t = time.perf_counter()
        client.produce("bench", RECORD, partition=0)
        latencies.append(time.perf_counter() - t)
    return latencies, time.perf_counter() - started


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) a process has used so far."""
    if pid == os.getpid():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    return cpu_seconds(pid)


def sync_cpu_per_produce(
    client: Client, cluster: LocalCluster, count: int
) -> tuple[dict[str, float], float]:
    """Where a synchronous produce's time goes: the CPU each process spends per request (ms),
    client and leader and followers of partition 0, over `count` requests one at a time; and
    the mean latency over the same requests. With every process on 2 cores, a request cannot
    finish faster than the CPU it costs divided by the cores that run it."""
    leader = client.describe_topic("bench").partitions[0].leader
    pids = {"client": os.getpid()}
    for node_id, spec in cluster.nodes.items():
        assert spec.process is not None
        role = "leader" if node_id == leader else f"follower {node_id}"
        pids[role] = spec.process.pid
    before = {role: process_cpu_s(pid) for role, pid in pids.items()}
    started = time.perf_counter()
    for _ in range(count):
        client.produce("bench", RECORD, partition=0)
    mean_ms = (time.perf_counter() - started) / count * 1000
    return (
        {role: (process_cpu_s(pid) - before[role]) / count * 1000 for role, pid in pids.items()},
        mean_ms,
    )


def batching_produce(client: Client, count: int, linger_ms: int, batch_bytes: int) -> float:
    started = time.perf_counter()
    with client.producer(
        linger_ms=linger_ms, batch_bytes=batch_bytes, max_in_flight=16
    ) as producer:
        futures = [producer.send("bench", RECORD) for _ in range(count)]
        producer.flush()
        for future in futures:
            future.result()
    return count / (time.perf_counter() - started)


@dataclass(frozen=True, slots=True)
class ClusterFigures:
    """The cluster cases on one side (plaintext or TLS), medians over the rounds."""

    sync_rate: float  # records/s, one in flight
    p50_ms: float  # over every round's requests
    p99_ms: float
    cpu_ms: dict[str, float]  # CPU per sync produce, by process role
    mean_ms: float
    batching: dict[tuple[int, int], float]  # (linger_ms, batch_bytes) -> records/s

    @property
    def best(self) -> tuple[tuple[int, int], float]:
        return max(self.batching.items(), key=lambda item: item[1])


def _percentile(latencies: list[float], share: float) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000


def cluster_cases(args: argparse.Namespace) -> tuple[ClusterFigures, ClusterFigures]:
    """The sync and batching cases on two 3-node clusters running side by side, one plaintext,
    one with mutual TLS: each case runs on one, then the other, `args.rounds` times, the first
    alternating, so that what else the machine does in the meantime weighs on both alike (the
    ratio is what this measures; medians over the rounds)."""
    with contextlib.ExitStack() as stack:
        sides: dict[bool, tuple[LocalCluster, Client]] = {}
        for tls in (False, True):
            root = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="flotilla-produce-", dir=os.getcwd())
            )
            cluster = stack.enter_context(
                LocalCluster(root, 3, config_text=CONFIG, tls=tls,
                             node_args=["--event-loop", args.event_loop])
            )  # fmt: skip
            cluster.start()
            paths = cluster.tls
            security = (
                {"tls_ca": str(paths.ca), "tls_cert": str(paths.cert), "tls_key": str(paths.key)}
                if paths is not None
                else {}
            )
            client = stack.enter_context(Client(cluster.addresses(), timeout_s=60, **security))
            client.create_topic("bench", partitions=3, replication_factor=3)
            client.produce("bench", RECORD, partition=0)
            sides[tls] = (cluster, client)
        latencies: dict[bool, list[float]] = {False: [], True: []}
        busy_s: dict[bool, float] = {False: 0.0, True: 0.0}
        rates: dict[bool, dict[tuple[int, int], list[float]]] = {False: {}, True: {}}
        per_round = max(1000, args.records // args.rounds)
        for number in range(args.rounds):
            order = (False, True) if number % 2 == 0 else (True, False)
            for tls in order:
                spent, took = sync_latencies(sides[tls][1], args.sync_records)
                latencies[tls] += spent
                busy_s[tls] += took
            for linger_ms, batch_bytes in SETTINGS:
                for tls in order:
                    rate = batching_produce(sides[tls][1], per_round, linger_ms, batch_bytes)
                    rates[tls].setdefault((linger_ms, batch_bytes), []).append(rate)
        cpu = {tls: sync_cpu_per_produce(sides[tls][1], sides[tls][0], args.sync_records)
               for tls in (False, True)}  # fmt: skip
    return tuple(  # type: ignore[return-value]
        ClusterFigures(
            sync_rate=len(latencies[tls]) / busy_s[tls],
            p50_ms=_percentile(latencies[tls], 0.5),
            p99_ms=_percentile(latencies[tls], 0.99),
            cpu_ms=cpu[tls][0],
            mean_ms=cpu[tls][1],
            batching={k: statistics.median(v) for k, v in rates[tls].items()},
        )
        for tls in (False, True)
    )


def _cluster_rows(figures: ClusterFigures, suffix: str) -> list[tuple[str, float, float]]:
    rate = figures.sync_rate
    rows = [(f"sync produce (1 in flight){suffix}", rate, rate * len(RECORD) / 1e6)]
    for (linger_ms, batch_bytes), rate in figures.batching.items():
        name = f"producer linger={linger_ms}ms batch={batch_bytes // 1024}KiB{suffix}"
        rows.append((name, rate, rate * len(RECORD) / 1e6))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--sync-records", type=int, default=500, help="per round")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="each cluster case runs this many times on each side, alternating (default 3); "
        "--records is split over them",
    )
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="auto",
        help="the nodes' event loop (compare: the same run on each)",
    )
    parser.add_argument("--ceiling-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ceiling_server:
        asyncio.run(_serve_ceiling(args.ceiling_server))
        return 0
    plain, secure = cluster_cases(args)
    rows = _cluster_rows(plain, "") + _cluster_rows(secure, ", TLS")
    sync_rate, p50_ms, p99_ms = plain.sync_rate, plain.p50_ms, plain.p99_ms
    cpu_ms, mean_ms = plain.cpu_ms, plain.mean_ms
    sizes = sorted({b for _, b in SETTINGS})
    limits, rtt_ms, stream_ms = ceiling(sizes, total_bytes=args.records * len(RECORD))
    for size, mb_s in limits.items():
        rows.append((f"grpc ceiling, {size // 1024}KiB messages", mb_s * 1e6 / len(RECORD), mb_s))
    with tempfile.TemporaryDirectory(prefix="flotilla-disk-", dir=os.getcwd()) as scratch:
        disk = {size: disk_ceiling(scratch, size, args.records * len(RECORD)) for size in sizes}
        sync_ms = fdatasync_ms(scratch)
    floor_ms = rtt_ms + stream_ms + sync_ms
    for size, mb_s in disk.items():
        rows.append((f"disk ceiling, 3 x {size // 1024}KiB+fsync", mb_s * 1e6 / len(RECORD), mb_s))
    print(f"{'case':<42}{'records/s':>12}{'MB/s':>10}")
    for name, rate, mb_s in rows:
        print(f"{name:<42}{rate:>12,.0f}{mb_s:>10.1f}")
    print(f"sync produce latency: p50 {p50_ms:.2f} ms, p99 {p99_ms:.2f} ms")
    print(f"sync produce latency with TLS: p50 {secure.p50_ms:.2f} ms, p99 {secure.p99_ms:.2f} ms")
    print(f"bare gRPC unary round trip (sync client, aio server, 1 KiB): p50 {rtt_ms:.2f} ms")
    print(
        f"floor under a sync produce, no work at all: unary {rtt_ms:.2f} + stream round trip "
        f"{stream_ms:.2f} + fdatasync {sync_ms:.2f} = {floor_ms:.2f} ms (p50s)"
    )
    cores = os.cpu_count() or 1
    total_cpu_ms = sum(cpu_ms.values())
    print(
        "CPU per sync produce (ms): "
        + ", ".join(f"{role} {ms:.2f}" for role, ms in sorted(cpu_ms.items()))
        + f"; total {total_cpu_ms:.2f} over {cores} cores = {total_cpu_ms / cores:.2f} ms "
        f"against a mean latency of {mean_ms:.2f} ms"
    )
    (best_linger, best_batch), best_rate = plain.best
    best_mb_s = best_rate * len(RECORD) / 1e6
    tls_setting, tls_rate = secure.best
    tls_ratio = tls_rate / best_rate
    tls_sync_ratio = secure.sync_rate / plain.sync_rate
    tls_p50_delta_ms = secure.p50_ms - plain.p50_ms
    tls_cpu_ms = sum(secure.cpu_ms.values())
    print(
        f"TLS cost: best producer {tls_rate:,.0f} vs {best_rate:,.0f} records/s = {tls_ratio:.2f}x "
        f"(goal >= 0.8); sync {tls_sync_ratio:.2f}x, p50 {tls_p50_delta_ms:+.2f} ms (goal <= +0.3); "
        f"CPU per sync produce {tls_cpu_ms:.2f} vs {total_cpu_ms:.2f} ms"
    )
    print(json.dumps({
        "sync_records_per_s": round(sync_rate), "sync_p50_ms": round(p50_ms, 2), "sync_p99_ms": round(p99_ms, 2),
        "producer_records_per_s": round(best_rate), "producer_mb_per_s": round(best_mb_s, 1),
        "producer_best_setting": {"linger_ms": best_linger, "batch_bytes": best_batch},
        "grpc_ceiling_mb_per_s": {str(k): round(v, 1) for k, v in limits.items()},
        "produce_vs_grpc_ceiling": round(best_mb_s / limits[best_batch], 3),
        "disk_ceiling_mb_per_s": {str(k): round(v, 1) for k, v in disk.items()},
        "produce_vs_disk_ceiling": round(best_mb_s / disk[best_batch], 3),
        "sync_p50_vs_target_1ms": round(p50_ms / 1.0, 2),
        "grpc_unary_rtt_p50_ms": round(rtt_ms, 2),
        "grpc_stream_rtt_p50_ms": round(stream_ms, 2), "fdatasync_p50_ms": round(sync_ms, 2),
        "sync_floor_ms": round(floor_ms, 2),
        "sync_cpu_ms_per_produce": {role: round(ms, 2) for role, ms in sorted(cpu_ms.items())},
        "sync_cpu_ms_total_per_core": round(total_cpu_ms / cores, 2),
        "sync_mean_ms": round(mean_ms, 2),
        "tls": {
            "sync_records_per_s": round(secure.sync_rate), "sync_p50_ms": round(secure.p50_ms, 2),
            "sync_p99_ms": round(secure.p99_ms, 2), "producer_records_per_s": round(tls_rate),
            "producer_best_setting": {"linger_ms": tls_setting[0], "batch_bytes": tls_setting[1]},
            "sync_cpu_ms_per_produce": {role: round(ms, 2) for role, ms in sorted(secure.cpu_ms.items())},
        },
        "tls_producer_throughput_ratio": round(tls_ratio, 3),
        "tls_sync_throughput_ratio": round(tls_sync_ratio, 3),
        "tls_sync_p50_delta_ms": round(tls_p50_delta_ms, 2),
        "tls_goals_met": tls_ratio >= 0.8 and tls_p50_delta_ms <= 0.3,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
