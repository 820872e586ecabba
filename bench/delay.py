"""Delayed-delivery benchmark: delayed produce against plain produce in one run, how late timers
fire, and what pending timers cost the timer leader's memory.

    python -m bench.delay [--records 10000] [--sync-records 300] [--timed 1500] [--pending 5000]
                          [--restart-timers 1000000]

Cluster: three local nodes, replication factor 3, acks=all, fsync always, one partition.
- accepted/s: synchronous produce (one record in flight) and the batching producer, plain and
  delayed, 1 KiB records; the delayed ones are due in an hour at second precision (records sent
  within one second share a due time, so the producer batches them: `Producer.send` groups a
  partition's delayed records by due time). The ratio delayed / plain for each.
- lateness: `--timed` delayed records due 1-4 s after they are sent, at millisecond precision
  (every one a batch of its own), at `--timed-rate` a second; a subscriber on the partition's
  leader (where a record is visible once committed; a follower's readers see every record, delayed
  or not, up to a tick later) notes each one's arrival. Lateness = arrival - the later of its due
  time and its acknowledgement; p50, p99, max.
- memory: `--pending` timers due at random times over the next 40 days (batches of one record:
  the worst case for the index) sent to the same partition; the growth of the timer leader's
  RSS (the node leading timer partition 0) from before to after they were all accepted,
  extrapolated linearly to one million pending timers (the issue's bound: <= 64 MB), and the
  partition's `pending_timers` as `describe_topic` reports it; then the baseline: the source
  leader's RSS growth for as many plain 100-byte records produced one at a time (a log entry
  each, as the timers), and the timers' growth beyond it, per million. Scaled down (5,000 by
  default; `--pending 100000` takes long while far timers are accepted slowly) and
  extrapolated: the output says from how many.
- restart: `--restart-timers` pending timers over 40 days on one node, which is killed and
  started again: seconds until it serves and until every timer is pending again
  (`bench.delay_restart`, in a cluster of its own; the issue's goal: <= 5 s for a million).
Prints a table and, last, one JSON line of the figures and ratios.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from bench import delay_restart
from bench.idle import rss_mb
from chaos.delay_checker import percentile
from chaos.delay_workload import timer_leaders, wall_ms
from cluster.local import LocalCluster
from flotilla import Client
from flotilla.errors import FlotillaError

TOPIC = "bench-delay"
RECORD = b"d" * 1024
CONFIG = 'tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nfsync = "always"\n'
DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def sync_rate(client: Client, count: int, delayed: bool) -> tuple[float, float]:
    """Records/s and p50 latency (ms) of `count` synchronous produces."""
    latencies = []
    started = time.perf_counter()
    for _ in range(count):
        begin = time.perf_counter()
        if delayed:
            client.produce(TOPIC, RECORD, partition=0, deliver_at_ms=wall_ms() + HOUR_MS)
        else:
            client.produce(TOPIC, RECORD, partition=0)
        latencies.append(time.perf_counter() - begin)
    elapsed = time.perf_counter() - started
    latencies.sort()
    return count / elapsed, latencies[len(latencies) // 2] * 1000


def batching_rate(client: Client, count: int, due: Callable[[], int] | None) -> float:
    """Records/s of the batching producer sending `count` records (delayed when `due` gives
    each one's due time), until every Future resolved."""
    started = time.perf_counter()
    with client.producer(linger_ms=5, batch_bytes=256 * 1024) as producer:
        for _ in range(count):
            if due is None:
                producer.send(TOPIC, RECORD, partition=0)
            else:
                producer.send(TOPIC, RECORD, partition=0, deliver_at_ms=due())
        producer.flush()
    return count / (time.perf_counter() - started)


def second_precision_hour_ahead() -> int:
    return (wall_ms() + HOUR_MS) // 1000 * 1000


@dataclass(frozen=True, slots=True)
class Lateness:
    sent: int
    seen: int
    lateness_ms: tuple[int, ...]  # sorted; of the acknowledged, an unseen one as of the end
    acked: int
    in_log: int  # of the records sent, how many the partition holds at the end
    errors: dict[str, tuple[int, str]]  # sends that failed: kind -> (how many, the first)


def lateness(
    client: Client, addresses: list[str], count: int, rate_per_s: float, seed: int
) -> Lateness:
    """`count` delayed records due 1-4 s after their send, at `rate_per_s`; a subscriber on
    partition 0 from its current end notes each one's arrival. Sends that fail are counted by
    kind (one whose due time is over 1 s past when it reaches the node is refused)."""
    rng = random.Random(seed)
    described = client.describe_topic(TOPIC).partitions[0]
    start_offset, leader = described.high_watermark, described.leader or None
    due: dict[bytes, int] = {}
    acked: dict[bytes, int] = {}
    arrived: dict[bytes, int] = {}
    errors: dict[str, tuple[int, str]] = {}  # a failed send's error kind -> (how many, the first)
    lock = threading.Lock()
    stop = threading.Event()

    def follow() -> None:
        with Client(addresses, timeout_s=10) as follower:
            cursor = start_offset
            while not stop.is_set():
                try:
                    # at the leader, where a record is visible once committed (a follower
                    # learns the commit index a tick later: a read-path lag every record has)
                    records = follower.subscribe(TOPIC, 0, cursor, leader, stop_after_idle_s=0.5)
                    for record in records:
                        now = wall_ms()
                        with lock:
                            arrived.setdefault(bytes(record.value[:16]), now)
                        cursor = record.offset + 1
                        if stop.is_set():
                            return
                except FlotillaError:
                    stop.wait(0.2)  # a retry interval

    follower = threading.Thread(target=follow, name="lateness-follower", daemon=True)
    follower.start()

    def noted(name: bytes) -> Callable[[Future[Any]], None]:
        def done(future: Future[Any]) -> None:
            error = future.exception()
            with lock:
                if error is None:
                    acked[name] = wall_ms()
                else:  # by kind, with the first one's text
                    kind = type(error).__name__
                    count, example = errors.get(kind, (0, repr(error)[:300]))
                    errors[kind] = (count + 1, example)

        return done

    pause_s = 1 / rate_per_s
    next_at = time.monotonic()
    with client.producer(linger_ms=2) as producer:
        for number in range(count):
            time.sleep(max(0.0, next_at - time.monotonic()))  # the send rate's pacing
            next_at += pause_s
            name = f"t{number:015d}".encode()
            due[name] = wall_ms() + rng.randint(1000, 4000)
            future = producer.send(TOPIC, name + RECORD[16:], partition=0,
                                   deliver_at_ms=due[name])  # fmt: skip
            future.add_done_callback(noted(name))
        producer.flush()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with lock:
            if len(arrived) >= len(acked) and wall_ms() > max(due.values()) + 1000:
                break
        stop.wait(0.1)  # a poll interval
    stop.set()
    follower.join(timeout=10)
    ended_ms = wall_ms()
    in_log = set()
    offset = start_offset
    while batch := client.read(TOPIC, 0, offset, 1000):  # the log itself: were they fired?
        in_log |= {bytes(r.value[:16]) for r in batch if bytes(r.value[:16]) in due}
        offset = batch[-1].offset + 1
    with lock:
        late = [arrived[n] - max(due[n], acked[n]) for n in acked if n in arrived]
        # one never seen counts as late as the wait's end, at least: the figures are floors
        unseen = [ended_ms - max(due[n], acked[n]) for n in acked if n not in arrived]
    return Lateness(count, len(late), tuple(sorted(late + unseen)), len(acked), len(in_log),
                    errors)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Memory:
    pending: int
    reported_pending: int
    leader: str
    rss_before_mb: float
    rss_after_mb: float
    noise_mb: float  # the widest spread of one sample set
    fill_per_s: float  # far timers accepted a second (batches of one record)
    baseline_mb: float = 0.0  # the source leader's growth for as many plain one-record batches

    @property
    def growth_mb(self) -> float:
        return self.rss_after_mb - self.rss_before_mb

    @property
    def mb_per_million(self) -> float:
        return self.growth_mb * 1_000_000 / max(1, self.pending)

    @property
    def beyond_baseline_mb_per_million(self) -> float:
        return (self.growth_mb - self.baseline_mb) * 1_000_000 / max(1, self.pending)


def plain_growth(client: Client, cluster: LocalCluster, count: int) -> float:
    """The RSS growth (MB) of the source partition's leader while `count` plain 100-byte
    records are produced one at a time (a batch each, as the far timers): what holding as many
    log entries costs a leader, the baseline for the timers' figure."""
    leader = client.describe_topic(TOPIC).partitions[0].leader
    process = cluster.nodes[leader].process
    assert process is not None
    before, _ = rss_samples(process.pid)
    for _ in range(count):
        client.produce(TOPIC, RECORD[:100], partition=0)
    after, _ = rss_samples(process.pid)
    return after - before


def pending_timers(client: Client) -> int:
    return int(getattr(client.describe_topic(TOPIC).partitions[0], "pending_timers", 0))


def memory(client: Client, cluster: LocalCluster, count: int, seed: int) -> Memory:
    """`count` timers over the next 40 days; the timer leader's RSS before and after."""
    rng = random.Random(seed)
    leader = timer_leaders(client, TOPIC)[0]
    process = cluster.nodes[leader].process
    assert process is not None
    before_pending = pending_timers(client)
    before, before_spread = rss_samples(process.pid)
    now = wall_ms()
    started = time.perf_counter()
    with client.producer(linger_ms=5, max_in_flight_per_partition=16) as producer:
        for _ in range(count):
            producer.send(TOPIC, RECORD[:100], partition=0,
                          deliver_at_ms=now + 3 * HOUR_MS + rng.randrange(40 * DAY_MS - 3 * HOUR_MS))  # fmt: skip
        producer.flush()
    fill_s = time.perf_counter() - started
    deadline = time.monotonic() + 60
    reported = pending_timers(client)
    while reported < before_pending + count and time.monotonic() < deadline:
        time.sleep(0.5)  # a poll interval: the gauge follows the timer log's commits
        reported = pending_timers(client)
    if timer_leaders(client, TOPIC).get(0) != leader:
        raise SystemExit(f"the timer leader moved from {leader} during the fill: run again")
    after, after_spread = rss_samples(process.pid)
    return Memory(count, reported - before_pending, leader, before, after,
                  max(before_spread, after_spread), count / fill_s)  # fmt: skip


def rss_samples(pid: int, samples: int = 7, every_s: float = 0.5) -> tuple[float, float]:
    """The median of `samples` RSS readings `every_s` apart (MB), and their spread: garbage
    collection and the allocator move RSS by a few MB either way."""
    readings = []
    for _ in range(samples):
        time.sleep(every_s)  # a sampling interval, not a wait on an outcome
        readings.append(rss_mb(pid))
    readings.sort()
    return readings[len(readings) // 2], readings[-1] - readings[0]


def progress(phase: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {phase}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000, help="batching producer, each")
    parser.add_argument("--sync-records", type=int, default=300, help="sync produce, each")
    parser.add_argument("--timed", type=int, default=1000, help="records whose lateness counts")
    parser.add_argument("--timed-rate", type=float, default=100.0, help="their sends a second")
    parser.add_argument("--pending", type=int, default=5_000,
                        help="timers over 40 days (acceptance slows as they grow: see README)")  # fmt: skip
    parser.add_argument("--restart-timers", type=int, default=1_000_000,
                        help="pending timers a restart recovers (bench.delay_restart; 0: skip)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="flotilla-bench-delay-") as root,
        LocalCluster(root, 3, config_text=CONFIG) as cluster,
    ):
        cluster.start()
        with Client(cluster.addresses(), timeout_s=30) as client:
            client.create_topic(TOPIC, partitions=1, replication_factor=3)
            client.produce(TOPIC, RECORD, partition=0, deliver_at_ms=wall_ms() + HOUR_MS)  # warm
            progress("sync produce")
            sync_plain, sync_plain_p50 = sync_rate(client, args.sync_records, delayed=False)
            sync_delayed, sync_delayed_p50 = sync_rate(client, args.sync_records, delayed=True)
            progress("batching producer")
            batch_plain = batching_rate(client, args.records, None)
            batch_delayed = batching_rate(client, args.records, second_precision_hour_ahead)
            progress("lateness")
            timed = lateness(client, cluster.addresses(), args.timed, args.timed_rate, args.seed)
            progress(f"{args.pending:,} far timers")
            mem = memory(client, cluster, args.pending, args.seed)
            progress(f"{args.pending:,} plain records, one a batch (the baseline)")
            mem = replace(mem, baseline_mb=plain_growth(client, cluster, args.pending))
    restart = None
    if args.restart_timers:
        progress(f"a restart with {args.restart_timers:,} pending timers (one node)")
        restart = delay_restart.measure(args.restart_timers, 100, args.seed)
    late = {name: percentile(timed.lateness_ms, q) for name, q in (("p50", 50), ("p99", 99),
                                                                    ("max", 100))}  # fmt: skip
    rows = [
        ("sync produce, plain (records/s)", f"{sync_plain:,.0f}", f"p50 {sync_plain_p50:.1f} ms"),
        ("sync produce, delayed (records/s)", f"{sync_delayed:,.0f}",
         f"p50 {sync_delayed_p50:.1f} ms"),
        ("  delayed / plain", f"{sync_delayed / sync_plain:.2f}x", ""),
        ("batching producer, plain (records/s)", f"{batch_plain:,.0f}", ""),
        ("batching producer, delayed (records/s)", f"{batch_delayed:,.0f}", "due 1 h, 1 s grain"),
        ("  delayed / plain", f"{batch_delayed / batch_plain:.2f}x", ""),
        ("lateness, due 1-4 s ahead (ms)", f"p50 {late['p50']}",
         f"p99 {late['p99']} max {late['max']} ({timed.seen}/{timed.acked} acked seen, "
         f"{timed.in_log}/{timed.sent} in the log{'; unseen count as late as the end' if timed.seen < timed.acked else ''})"),
        (f"timer leader RSS, {mem.pending:,} timers over 40 d (MB)",
         f"+{mem.growth_mb:.1f}",
         f"{mem.rss_before_mb:.0f} -> {mem.rss_after_mb:.0f} on {mem.leader}, "
         f"samples spread {mem.noise_mb:.1f}"),
        ("  far timers accepted (records/s)", f"{mem.fill_per_s:,.0f}", "one record a batch"),
        ("  per million pending timers (MB)", f"{mem.mb_per_million:.1f}",
         f"extrapolated linearly from {mem.pending:,}"),
        (f"source leader RSS, {mem.pending:,} plain one-record batches (MB)",
         f"+{mem.baseline_mb:.1f}", "the baseline: as many log entries"),
        ("  timers beyond the baseline, per million (MB)",
         f"{mem.beyond_baseline_mb_per_million:.1f}", "extrapolated"),
        ("  pending_timers reported", f"{mem.reported_pending:,}", ""),
    ]  # fmt: skip
    if restart is not None:
        rows += delay_restart.rows(restart)
    for name, value, note in rows:
        print(f"{name:<48}{value:>12}  {note}")
    for kind, (times, example) in timed.errors.items():
        print(f"  lateness phase: {times} sends failed with {kind}, the first: {example}")
    print(json.dumps({
        "sync_plain_records_per_s": round(sync_plain),
        "sync_delayed_records_per_s": round(sync_delayed),
        "sync_delayed_vs_plain": round(sync_delayed / sync_plain, 2),
        "batch_plain_records_per_s": round(batch_plain),
        "batch_delayed_records_per_s": round(batch_delayed),
        "batch_delayed_vs_plain": round(batch_delayed / batch_plain, 2),
        "lateness_ms": late, "lateness_seen": timed.seen, "lateness_sent": timed.sent,
        "lateness_acked": timed.acked, "lateness_send_errors": {k: n for k, (n, _) in timed.errors.items()}, "lateness_in_log": timed.in_log,
        "pending_timers": mem.pending, "pending_timers_reported": mem.reported_pending,
        "leader_rss_growth_mb": round(mem.growth_mb, 1),
        "plain_baseline_rss_growth_mb": round(mem.baseline_mb, 1),
        "rss_mb_per_million_timers_beyond_baseline": round(mem.beyond_baseline_mb_per_million, 1),
        "rss_mb_per_million_timers": round(mem.mb_per_million, 1),
        "rss_extrapolated_from": mem.pending,
        "rss_sample_spread_mb": round(mem.noise_mb, 1),
        "far_timers_accepted_per_s": round(mem.fill_per_s),
        "records": args.records, "sync_records": args.sync_records,
        "restart_timers": restart.timers if restart else 0,
        "restart_serving_s": round(restart.serving_s, 2) if restart else None,
        "restart_all_pending_s": round(restart.recovered_s, 2) if restart else None,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
