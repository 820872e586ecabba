"""Queues through the SDK and the CLI on a real three-node cluster (one for the module): two
receivers compete for a topic's records and no record is handed to both before its deadline,
every record acked once, the records read from followers; an ack after the deadline raises
LeaseLost and the record comes back with its count grown; a release with a delay is not seen
before the delay; a reject lands in the dead-letter topic with the source's key, value and
headers and the flotilla-dlq-* headers; close() releases at once; a silent receiver's leases
go to another and its own ack is LeaseLost; the asyncio twin; the CLI's `queue receive` (a peek
releases at exit, --ack acks) and `group describe`; describe_group's queue fields; bad arguments."""

from __future__ import annotations

import asyncio
import functools
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import (
    Client,
    Delivery,
    FlotillaError,
    InvalidArgument,
    LeaseLost,
    TopicNotFound,
    aio,
    cli,
)
from flotilla._core import Rpc

pytestmark = pytest.mark.integration

CONFIG = (
    "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
    "group_partitions = 2\nleader_balance_after_s = 0\n"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("queue-sdk"), 3, config_text=CONFIG) as local:
        local.start()
        yield local


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap, timeout_s=30) as c:
        yield c


def topic_with(client: Client, topic: str, partitions: int, count: int) -> None:
    """`count` records spread over the partitions round-robin (no key); partition p's
    records are b"<n>" for n = p, p + partitions, ... in order."""
    client.create_topic(topic, partitions=partitions, replication_factor=3)
    for p in range(partitions):
        values = [b"%d" % n for n in range(count) if n % partitions == p]
        client.produce_batch(topic, values, partition=p)


def has(client: Client, topic: str, partition: int, offset: int, replica: str) -> bool:
    """Does `replica` serve the offset (it committed that far)?"""
    try:
        return bool(client.read(topic, partition, offset, 1, replica=replica))
    except FlotillaError:
        return False


def receive_until(
    q: Any, wanted: int, timeout_s: float = 30.0, max_records: int = 100
) -> list[Delivery]:
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < wanted:
        assert time.monotonic() < deadline, f"{len(got)} of {wanted} received in {timeout_s} s"
        got.extend(q.receive(max_records=max_records, timeout_s=0.5))
    return got


def test_two_receivers_compete_each_record_once_read_from_followers(client: Client) -> None:
    topic, count = "jobs", 60
    topic_with(client, topic, 3, count)
    info = client.describe_topic(topic)
    addresses = {m.id: m.address for m in client.members()}
    leaders = {p.index: addresses[p.leader] for p in info.partitions}
    for p in info.partitions:  # every follower has the records: none is read from a leader
        for replica in p.replicas:
            wait_until(
                functools.partial(has, client, topic, p.index, p.high_watermark - 1, replica),
                20,
                f"{replica} has {topic}/{p.index}",
            )
    fetches: list[tuple[int, str]] = []  # (partition, the replica asked)
    plain = client._call

    def spy(rpc: Rpc) -> Any:
        if rpc.method == "Fetch":
            fetches.append((rpc.request.partition, rpc.address))
        return plain(rpc)

    client._call = spy  # type: ignore[method-assign]
    seen: dict[tuple[int, int], int] = {}
    with client.queue("competing", topic) as a, client.queue("competing", topic) as b:
        deadline = time.monotonic() + 60
        while len(seen) < count:
            assert time.monotonic() < deadline, f"{len(seen)} of {count} acked"
            for q in (a, b):
                ds = q.receive(max_records=7, timeout_s=0.2)
                for d in ds:
                    place = (d.partition, d.offset)
                    assert place not in seen, f"{place} handed out twice before its deadline"
                    assert d.delivery_count == 1
                    assert d.record.value == b"%d" % (d.offset * 3 + d.partition)
                    seen[place] = id(q)
                q.ack(ds)
    assert len(set(seen.values())) == 2, "both receivers got records"
    assert sorted(seen) == sorted(
        (p, o) for p in range(3) for o in range(len([n for n in range(count) if n % 3 == p]))
    )
    to_leaders = [(p, address) for p, address in fetches if address == leaders[p]]
    assert fetches and not to_leaders, f"reads went to a leader: {to_leaders} of {fetches}"
    group = client.describe_group("competing")
    assert group.kind == "queue" and group.queue is not None
    assert sum(p.queue.acked for p in group.partitions if p.queue) == count
    assert all(p.queue and p.queue.in_flight == 0 and p.queue.acked_floor == p.high_watermark
               for p in group.partitions)  # fmt: skip


def test_an_ack_after_the_deadline_is_lease_lost_and_the_record_comes_back(
    client: Client,
) -> None:
    topic = "late"
    topic_with(client, topic, 1, 1)
    with client.queue("latecomers", topic, invisible_ms=1_000, backoff_ms=[0]) as q:
        (d,) = receive_until(q, 1)
        wait_until(lambda: time.time() * 1000 > d.deadline_ms + 200, 5, "the deadline passes")
        with pytest.raises(LeaseLost) as lost:
            q.ack(d)
        assert lost.value.deliveries == [d]
        (again,) = receive_until(q, 1)
        assert (again.offset, again.delivery_count) == (d.offset, 2)
        q.ack(again)


def test_a_receive_acks_the_last_deliveries_in_the_same_call(client: Client) -> None:
    """`receive(ack=...)`: the acks ride on the receive (one call, one coordinator write); a
    lost one raises LeaseLost as `ack` would, and nothing new is leased meanwhile."""
    topic = "carried"
    topic_with(client, topic, 1, 6)
    with client.queue("carriers", topic, invisible_ms=2_000, backoff_ms=[0]) as q:
        first = receive_until(q, 2, max_records=2)
        second = q.receive(max_records=2, timeout_s=5, ack=first)
        assert [d.record.value for d in second] == [b"2", b"3"]
        info = client.describe_group("carriers")
        assert sum(p.queue.acked for p in info.partitions if p.queue) == 2
        wait_until(lambda: time.time() * 1000 > second[0].deadline_ms + 200, 5, "the deadline")
        with pytest.raises(LeaseLost) as lost:
            q.receive(max_records=2, timeout_s=5, ack=second)
        assert {d.offset for d in lost.value.deliveries} == {2, 3}
        # both come back (nothing was leased by the refused call: none stranded), then 4, 5
        again = receive_until(q, 4, max_records=4)
        assert sorted((d.offset, d.delivery_count) for d in again) == [(2, 2), (3, 2), (4, 1),
                                                                       (5, 1)]  # fmt: skip
        assert q.receive(max_records=2, timeout_s=0.5, ack=again) == []  # acked; none left
    info = client.describe_group("carriers")
    assert sum(p.queue.acked for p in info.partitions if p.queue) == 6


def test_a_release_with_delay_is_not_seen_before_the_delay(client: Client) -> None:
    topic = "later"
    topic_with(client, topic, 1, 1)
    with client.queue("delayers", topic) as q:
        (d,) = receive_until(q, 1)
        q.release(d, delay_ms=2_000)
        released_at = time.monotonic()
        assert q.receive(timeout_s=1.0) == []
        (again,) = receive_until(q, 1, timeout_s=15)
        assert time.monotonic() - released_at >= 1.9
        assert (again.offset, again.delivery_count) == (d.offset, 2)
        q.ack(again)


def test_a_reject_lands_in_the_dead_letter_topic_with_its_headers(client: Client) -> None:
    topic = "poison"
    client.create_topic(topic, partitions=2, replication_factor=3)
    client.produce(topic, b"bad", key=b"k7", partition=1, headers=[("trace", b"t1")])
    with client.queue("rejecters", topic, max_deliveries=3, ordering="key") as q:
        (d,) = receive_until(q, 1)
        q.reject(d)
        options = client.describe_group("rejecters").queue  # as the join gave them
        assert options is not None
        assert (options.max_deliveries, options.ordering) == (3, "key")
    dlq = f"{topic}.rejecters.dlq"
    wait_until(lambda: dlq in client.list_topics(), 30, f"{dlq} created")
    assert len(client.describe_topic(dlq).partitions) == 2
    wait_until(lambda: client.read(dlq, 1, 0, 10), 30, "the dead letter lands")
    (letter,) = client.read(dlq, 1, 0, 10)
    assert (letter.key, letter.value) == (b"k7", b"bad")
    assert dict(letter.headers) == {
        "trace": b"t1",
        "flotilla-dlq-topic": topic.encode(),
        "flotilla-dlq-partition": b"1",
        "flotilla-dlq-offset": b"0",
        "flotilla-dlq-deliveries": b"1",
        "flotilla-dlq-reason": b"rejected",
    }
    wait_until(
        lambda: sum(p.queue.dead_lettered for p in client.describe_group("rejecters").partitions
                    if p.queue) == 1,
        30, "describe counts the dead letter",
    )  # fmt: skip


def test_close_releases_at_once(client: Client) -> None:
    topic = "handover"
    topic_with(client, topic, 2, 6)
    holder = client.queue("handovers", topic, invisible_ms=600_000)
    held = receive_until(holder, 6)
    holder.close()
    holder.close()  # idempotent
    with client.queue("handovers", topic) as taker:
        started = time.monotonic()
        again = receive_until(taker, 6, timeout_s=10)
        assert time.monotonic() - started < 10, "released at once, not after the deadline"
        assert sorted((d.partition, d.offset) for d in again) == sorted(
            (d.partition, d.offset) for d in held
        )
        assert {d.delivery_count for d in again} == {2}
        taker.ack(again)
    with pytest.raises(InvalidArgument, match="closed"):
        holder.receive()


def test_a_silent_receivers_leases_go_to_another_and_its_ack_is_lease_lost(
    client: Client,
) -> None:
    """A receiver whose heartbeats stop (a paused process) loses its session: the coordinator
    releases its leases at once, and the receiver itself forgets them (its ack is LeaseLost,
    nothing sent for it)."""
    topic = "silent"
    topic_with(client, topic, 1, 1)
    zombie = client.queue("silents", topic, session_timeout_ms=2_000, invisible_ms=600_000)
    (d,) = receive_until(zombie, 1)
    zombie._stop.set()  # its heartbeat thread stops, as in a paused process
    zombie._wake.set()
    assert zombie._thread is not None
    zombie._thread.join(5)
    with client.queue("silents", topic) as other:
        (again,) = receive_until(other, 1, timeout_s=15)
        assert (again.offset, again.delivery_count) == (d.offset, 2)
        with pytest.raises(LeaseLost) as lost:
            zombie.ack(d)
        assert lost.value.deliveries == [d]
        other.ack(again)
    zombie.close()


def test_the_asyncio_queue(cluster: LocalCluster) -> None:
    async def main() -> None:
        async with aio.Client(cluster.bootstrap, timeout_s=30) as c:
            await c.create_topic("async-jobs", partitions=2, replication_factor=3)
            await c.produce_batch("async-jobs", [b"a", b"b", b"c"], partition=0)
            async with c.queue("async-workers", "async-jobs") as q:
                got: list[Delivery] = []
                deadline = time.monotonic() + 30
                while len(got) < 3:
                    assert time.monotonic() < deadline
                    got.extend(await q.receive(timeout_s=0.5))
                assert [d.record.value for d in got] == [b"a", b"b", b"c"]
                (extended,) = await q.extend(got[0], 120_000)
                assert extended.deadline_ms > got[0].deadline_ms
                await q.ack(got)
                with pytest.raises(LeaseLost):
                    await q.ack(got[1])
            info = await c.describe_group("async-workers")
            assert sum(p.queue.acked for p in info.partitions if p.queue) == 3

    asyncio.run(main())


def test_the_cli_receives_acks_and_describes(
    client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "cli-jobs"
    topic_with(client, topic, 1, 3)
    bootstrap = ["--bootstrap", client.router.bootstrap[0]]

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = cli.main([*args, *bootstrap])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return status, out, err

    status, out, err = run("queue", "receive", "cli-workers", topic, "-n", "1")  # a peek
    assert status == 0 and out == "0\t0\t1\t\t0\n" and "(released)" in err, (out, err)
    status, out, err = run("queue", "receive", "cli-workers", topic, "--ack", "-n", "3")
    assert status == 0, err
    assert [line.split("\t") for line in out.splitlines()] == [
        ["0", str(n), "2" if n == 0 else "1", "", str(n)] for n in range(3)
    ], "the peeked record was released at exit: handed out again at once, its count grown"
    assert "received 3 records (acked)" in err
    status, out, _ = run("group", "describe", "cli-workers")
    assert status == 0 and "KIND            queue" in out
    row = out.strip().splitlines()[-1].split()
    assert row[:5] == [topic, "0", "3", "3", "3"] and row[7] == "3"  # end, floor, next; acked
    status, _, err = run("queue", "receive", "cli-workers", "no-such-topic", "-n", "1")
    assert status == 1 and err.startswith("flotilla: ") and "no-such-topic" in err
    assert len(err.strip().splitlines()) == 1


def test_bad_arguments_are_named(client: Client) -> None:
    with pytest.raises(InvalidArgument, match="max_deliveries"):
        client.queue("bad", "jobs", max_deliveries=0)
    with pytest.raises(InvalidArgument, match="ordering"):
        client.queue("bad", "jobs", ordering="fifo")
    with pytest.raises(TopicNotFound), client.queue("bad", "no-such-topic") as q:
        q.receive(timeout_s=0.5)


def test_key_ordering_holds_through_2_then_16_then_2_receivers_without_stalling_a_key(
    client: Client,
) -> None:
    """ordering="key": a record is never handed out before the earlier record with its key was
    settled, while receivers grow from 2 to 16 and shrink back to 2 (the 14 that leave close,
    which releases what they hold at once): so no key waits for a lease to run out."""
    topic, keys, count, invisible_ms = "keyed", 8, 160, 5_000
    client.create_topic(topic, partitions=2, replication_factor=3)
    placed = {}  # (partition, offset) -> key
    for n in range(count):
        key = b"k%d" % (n % keys)
        meta = client.produce(topic, b"%d" % n, key=key)
        placed[(meta.partition, meta.offset)] = key
    # (key, partition, offset) -> [handed out at, ack sent at, ack answered at]
    times: dict[tuple[bytes, int, int], list[float]] = {}
    lock = threading.Lock()
    acked = threading.Semaphore(0)
    stop: dict[int, threading.Event] = {}

    def receiver(index: int) -> None:
        with client.queue("ordered", topic, invisible_ms=invisible_ms, ordering="key") as q:
            while not stop[index].is_set():
                ds = q.receive(max_records=3, timeout_s=0.2)
                got = time.monotonic()
                sent = time.monotonic()
                q.ack(ds)
                done = time.monotonic()
                with lock:
                    for d in ds:
                        place = (d.record.key or b"", d.partition, d.offset)
                        assert place not in times, f"{place} acked twice"
                        times[place] = [got, sent, done]
                for _ in ds:
                    acked.release()

    threads: dict[int, threading.Thread] = {}

    def grow_to(n: int) -> None:
        for index in range(len(threads), n):
            stop[index] = threading.Event()
            threads[index] = threading.Thread(target=receiver, args=(index,), daemon=True)
            threads[index].start()

    def wait_acked(n: int) -> None:
        for _ in range(n):
            assert acked.acquire(timeout=60), f"only {len(times)} of {count} acked"

    try:
        grow_to(2)
        wait_acked(40)
        grow_to(16)
        wait_acked(60)
        for index in range(2, 16):  # 14 leave: their leases go back at once
            stop[index].set()
        for index in range(2, 16):
            threads[index].join(30)
        wait_until(lambda: len(times) == count, 60, f"every record acked ({len(times)})")
    finally:
        for event in stop.values():
            event.set()
        for thread in threads.values():
            thread.join(30)
    assert {(p, o) for _, p, o in times} == set(placed)
    for key in {k for k in placed.values()}:
        for partition in (0, 1):
            mine = sorted(
                (o, times[(key, p, o)])
                for (p, o), k in placed.items()
                if k == key and p == partition
            )
            for (before, (_, sent, done)), (after, (got, _, _)) in itertools.pairwise(mine):
                # handed out only once the earlier one's ack was on its way, and soon after
                assert got >= sent, f"{key!r} p{partition}: {after} before {before} was acked"
                assert got - done < invisible_ms / 1000, f"{key!r} p{partition} stalled at {after}"
