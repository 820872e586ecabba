"""Delayed delivery through the SDK and the CLI on a real 3-node cluster (one for the module;
issue 26): a delayed record is accepted with no offset, is not readable before its time and is
after, once, with the `flotilla-deliver-at` header; the batching producer's delayed sends; the
asyncio twins; `produce --delay/--at`; describe's pending timers and max delay; bad arguments.

"Never early" is judged by reads that ended before the due time: any record such a read returned
was appended early (client and nodes share this machine's clock)."""

from __future__ import annotations

import asyncio
import functools
import io
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import grpc
import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import Client, InvalidArgument, Record, cli
from flotilla import aio as flotilla_aio
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

pytestmark = pytest.mark.integration
CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\n"
HEADER = "flotilla-deliver-at"
DELAY_MS = 1500  # long enough to see nothing for a while, short enough to keep the module lean
FIRE_WAIT_S = 20  # a due record is appended within ~1 s without faults; generous under load


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("delayed"), 3, config_text=CONFIG) as local:
        local.start()
        yield local


def watch(client: Client, topic: str, partition: int, due_ms: int, count: int) -> list[Record]:
    """Reads the partition from 0 until it holds `count` records (FIRE_WAIT_S after `due_ms`,
    the last due time, at most); fails if a read returned a delayed record before its own due
    time (the header's) had come when the read ended: an early record."""
    deadline = time.monotonic() + (due_ms - now_ms()) / 1000 + FIRE_WAIT_S
    records: list[Record] = []
    while len(records) < count:
        records = client.read(topic, partition, 0, max_records=10_000)
        ended_ms = now_ms()
        early = [(r.offset, due_of(r) - ended_ms) for r in records if due_of(r) > ended_ms]
        assert not early, f"(offset, ms before due) of records readable early: {early}"
        assert time.monotonic() < deadline, f"{len(records)} of {count} records due by now"
        time.sleep(0.05)
    return records


def due_of(record: Record) -> int:
    """A delayed record's due time (its header); 0 for an ordinary record."""
    return int(dict(record.headers).get(HEADER, b"0"))


def test_a_delayed_produce_is_invisible_until_due_then_readable_once_with_the_header(
    cluster: LocalCluster,
) -> None:
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("later", partitions=2, replication_factor=3)
        called_ms = now_ms()
        meta = client.produce(
            "later", b"ping", key=b"u1", partition=1, headers=[("h", b"x")], delay_ms=DELAY_MS
        )
        assert meta.offset is None and meta.partition == 1
        assert meta.deliver_at_ms is not None
        assert called_ms + DELAY_MS <= meta.deliver_at_ms <= now_ms() + DELAY_MS
        # the client learned where the timer log is led: its next delayed batches go there
        log = client.describe_topic(f"__timers.{client.describe_topic('later').uid}")
        leader = log.partitions[1].leader
        assert client.router.delayed_address("later", 1) == cluster.nodes[leader].address
        wait_until(
            lambda: client.describe_topic("later").partitions[1].pending_timers == 1,
            max(0.1, (meta.deliver_at_ms - now_ms() - 300) / 1000),
            "one pending timer before the due time",
        )
        (record,) = watch(client, "later", 1, meta.deliver_at_ms, 1)
        assert (record.offset, record.key, record.value) == (0, b"u1", b"ping")
        assert record.headers == ((HEADER, str(meta.deliver_at_ms).encode()), ("h", b"x"))
        wait_until(
            lambda: client.describe_topic("later").partitions[1].pending_timers == 0,
            10,
            "no pending timer once it fired",
        )
        assert client.read("later", 0, 0) == []  # nothing went to the other partition
        ordinary = client.produce("later", b"now", partition=1)
        assert ordinary.offset == 1 and ordinary.deliver_at_ms is None


def test_the_batching_producer_sends_delayed_records_by_due_time_each_once(
    cluster: LocalCluster,
) -> None:
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("later-batched", partitions=1, replication_factor=3)
        first_due = now_ms() + DELAY_MS
        second_due = first_due + 300
        with client.producer(linger_ms=20) as producer:
            futures = [
                producer.send(
                    "later-batched",
                    b"%d" % n,
                    deliver_at_ms=second_due if n % 3 == 0 else first_due,
                )
                for n in range(30)
            ]
            plain = producer.send("later-batched", b"plain")
            producer.flush(30)
        metas = [f.result(0) for f in futures]
        assert all(m.offset is None for m in metas)
        assert [m.deliver_at_ms for m in metas] == [
            second_due if n % 3 == 0 else first_due for n in range(30)
        ]
        assert plain.result(0).offset == 0 and plain.result(0).deliver_at_ms is None
        records = watch(client, "later-batched", 0, first_due, 31)
        assert len(records) == 31  # once each
        assert records[0].value == b"plain"
        delivered = records[1:]
        # in due order; records due at one time keep the order they were sent in
        assert [due_of(r) for r in delivered] == sorted(due_of(r) for r in delivered)
        early = [int(r.value) for r in delivered if due_of(r) == first_due]
        late = [int(r.value) for r in delivered if due_of(r) == second_due]
        assert early == [n for n in range(30) if n % 3] and late == list(range(0, 30, 3))


def test_a_delayed_batch_refused_fails_alone_and_the_batches_behind_it_are_accepted(
    cluster: LocalCluster,
) -> None:
    """A delayed batch refused as past (a producer fallen behind) wrote nothing: the batches
    pipelined behind it under the same producer id go on under the sequences they need (a new
    id, no gap), each accepted and fired once, in due order; only the refused one fails (before,
    every batch in flight behind it failed: "an earlier batch ... failed for good")."""
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("later-refused", partitions=1, replication_factor=3)
        with client.producer(linger_ms=1) as producer:
            # acknowledged first: the partition's delayed lane then pipelines 4 batches
            first = producer.send("later-refused", b"first", delay_ms=DELAY_MS).result(30)
            due = now_ms() + DELAY_MS
            rounds = []
            for n in range(3):  # a past batch, then six due at distinct times, in flight at once
                past = producer.send("later-refused", b"past", deliver_at_ms=now_ms() - 60_000)
                behind = [
                    producer.send(
                        "later-refused", b"%d" % (n * 6 + k), deliver_at_ms=due + n * 6 + k
                    )
                    for k in range(6)
                ]
                rounds.append((past, behind))
            producer.flush(30)
        for past, behind in rounds:
            with pytest.raises(InvalidArgument, match="in the past"):
                past.result(0)
            outcomes = [f.exception(0) for f in behind]
            assert outcomes == [None] * 6, outcomes
        records = watch(client, "later-refused", 0, due + 17, 19)
        assert [r.value for r in records] == [b"first", *(b"%d" % n for n in range(18))]
        assert first.deliver_at_ms is not None and due_of(records[0]) == first.deliver_at_ms


def test_the_asyncio_client_and_producer_delay_alike(cluster: LocalCluster) -> None:
    async def scenario() -> tuple[int, int]:
        async with flotilla_aio.Client(cluster.bootstrap, timeout_s=30) as client:
            await client.create_topic("later-aio", partitions=1, replication_factor=3)
            due = now_ms() + DELAY_MS
            meta = await client.produce("later-aio", b"a", deliver_at_ms=due)
            assert (meta.offset, meta.deliver_at_ms) == (None, due)
            async with client.producer(linger_ms=5) as producer:
                sent = await producer.send("later-aio", b"b", delay_ms=DELAY_MS)
                await producer.flush(30)
            later = await sent
            assert later.offset is None and later.deliver_at_ms is not None
            with pytest.raises(InvalidArgument, match="at most one"):
                await client.produce("later-aio", b"c", delay_ms=1, deliver_at_ms=due)
            return due, later.deliver_at_ms

    due, later_due = asyncio.run(scenario())
    with Client(cluster.bootstrap, timeout_s=30) as client:
        records = watch(client, "later-aio", 0, due, 2)
    assert [(r.value, due_of(r)) for r in records] == [(b"a", due), (b"b", later_due)]


def run_cli(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """`flotilla` run in this process (main(argv)): its status, stdout and stderr (the
    commands used here write text only)."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.TextIOWrapper(io.BytesIO(stdin)), out, err
    try:
        status = cli.main(list(args))
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    assert "Traceback" not in err.getvalue()
    return status, out.getvalue(), err.getvalue()


def test_cli_delay_at_max_delay_and_describe(cluster: LocalCluster) -> None:
    bootstrap = ["--bootstrap", ",".join(cluster.addresses())]
    status, out, err = run_cli(
        "topic", "create", "later-cli", "--partitions", "1", "--max-delay", "7d", *bootstrap
    )
    assert status == 0, err
    assert "max delay 7d" in out
    status, out, err = run_cli(
        "produce", "later-cli", "--partition", "0", "--delay", "3s", *bootstrap, stdin=b"x\n"
    )
    assert status == 0, err
    partition, word, due = out.split()
    assert (partition, word) == ("0", "due") and abs(int(due) - now_ms() - 3000) < 1500
    at = datetime.fromtimestamp(int(due) / 1000 + 1, UTC).isoformat(timespec="seconds")
    status, out, err = run_cli(
        "produce", "later-cli", "--partition", "0", "--at", at, *bootstrap, stdin=b"y\n"
    )
    assert status == 0, err
    at_ms = int(datetime.fromisoformat(at).timestamp() * 1000)
    assert out.split() == ["0", "due", str(at_ms)]
    with Client(cluster.bootstrap, timeout_s=30) as client:  # the node asked may lag a tick
        wait_until(
            lambda: client.describe_topic("later-cli").partitions[0].pending_timers == 2,
            max(0.1, (int(due) - now_ms() - 1000) / 1000),
            "two pending timers",
        )
    described: list[str] = []

    def described_pending() -> bool:
        """partition 0: two pending timers, its leader known (on a loaded machine an election
        can leave the partition leaderless for a moment: asked again)"""
        status, out, err = run_cli("topic", "describe", "later-cli", *bootstrap)
        assert status == 0 and "pending timers" in out, out + err
        (row,) = [line for line in out.splitlines() if line.startswith("│ 0 ")]
        described[:] = [cell.strip() for cell in row.strip("│").split("│")]
        return described[-2:] == ["2", "ok"]

    wait_until(
        described_pending,
        max(0.1, (int(due) - now_ms() - 500) / 1000),
        "partition 0 described with 2 pending timers and status ok",
    )
    status, out, err = run_cli("topic", "alter", "later-cli", "--max-delay", "1h", *bootstrap)
    assert status == 0 and "max delay 1h" in out, out + err
    with Client(cluster.bootstrap, timeout_s=30) as client:
        assert client.describe_topic("later-cli").max_delay_ms == 3_600_000
        records = watch(client, "later-cli", 0, at_ms, 2)
    assert [(r.value, due_of(r)) for r in records] == [(b"x", int(due)), (b"y", at_ms)]
    # a delay beyond the topic's bound: exit 1, the bound named, nothing accepted
    status, out, err = run_cli("produce", "later-cli", "--delay", "2h", *bootstrap, stdin=b"z\n")
    assert status == 1 and "3600000" in err, err


def test_bad_delays_are_refused_naming_the_bound_and_change_nothing(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap, timeout_s=30) as client:
        info = client.create_topic(
            "later-bounded", partitions=1, replication_factor=3, max_delay_ms=5_000
        )
        assert info.max_delay_ms == 5_000
        assert client.describe_topic("later-bounded").max_delay_ms == 5_000
        with pytest.raises(InvalidArgument, match="5000"):
            client.produce("later-bounded", b"v", delay_ms=60_000)
        with pytest.raises(InvalidArgument, match="past"):
            client.produce("later-bounded", b"v", deliver_at_ms=now_ms() - 60_000)
        with client.producer() as producer:
            with pytest.raises(InvalidArgument, match="delay_ms=-1"):
                producer.send("later-bounded", b"v", delay_ms=-1)
            refused = producer.send("later-bounded", b"v", delay_ms=60_000)
            producer.flush(30)
        with pytest.raises(InvalidArgument, match="5000"):
            refused.result(0)  # the node's bound, through the producer
        with pytest.raises(InvalidArgument, match="max_delay_ms=500"):
            client.alter_topic("later-bounded", max_delay_ms=500)
        default = client.alter_topic("later-bounded", max_delay_ms=0)  # 0: back to the default
        assert default.max_delay_ms == 40 * 86_400_000
        assert client.describe_topic("later-bounded").partitions[0].pending_timers == 0
        # no delay: due at once (the first delayed produce also makes the topic's timer log)
        first = client.produce("later-bounded", b"now", delay_ms=0)
        # a time in the past by less than a second is due at once too
        meta = client.produce("later-bounded", b"just-past", deliver_at_ms=now_ms() - 300)
        assert first.offset is None and meta.offset is None
        records = watch(client, "later-bounded", 0, first.deliver_at_ms or 0, 2)
        assert sorted(r.value for r in records) == [b"just-past", b"now"]  # each once
        assert len(client.read("later-bounded", 0, 0)) == 2


def test_the_early_check_catches_a_record_readable_before_its_due_time(
    cluster: LocalCluster,
) -> None:
    """The checker above, shown to fail on a broken input: an ordinary record that carries a
    due time a minute ahead is readable at once, as an early delayed record would be."""
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("later-early", partitions=1, replication_factor=3)
        due = now_ms() + 60_000
        client.produce("later-early", b"early", headers=[(HEADER, str(due).encode())])
        with pytest.raises(AssertionError, match="readable early"):
            watch(client, "later-early", 0, due, 1)


def test_every_node_tells_the_true_pending_count_even_one_with_no_replica_of_the_timer_log(
    cluster: LocalCluster,
) -> None:
    """Describe's pending timers come from the partition's timer log (its leader, else a
    replica), asked by whichever node answers: a node holding no replica of it, nor of the
    source partition, tells the true count (before, the answering view's own replica's count:
    0 there). When no replica of the timer log answers, the count is said to be unknown. (Last
    in the module: it pauses a node.)"""
    addresses = {node_id: spec.address for node_id, spec in cluster.nodes.items()}
    channels = {node_id: grpc.insecure_channel(a) for node_id, a in addresses.items()}
    stubs = {node_id: flotilla_pb2_grpc.FlotillaStub(c) for node_id, c in channels.items()}

    def partitions(node_id: str, topic: str) -> list[pb.PartitionInfo]:
        response = stubs[node_id].Metadata(pb.MetadataRequest(topics=[topic]), timeout=10)
        return list(response.topics[0].partitions)

    try:
        with Client(cluster.bootstrap, timeout_s=30) as client:
            # RF 1: one node holds a partition and (placed as its source, `placement_key`) its
            # timer log; the two others hold neither, and must still tell the true count
            name = "later-anywhere"
            info = client.create_topic(name, partitions=3, replication_factor=1)
            for partition in range(3):
                client.produce(name, b"v", partition=partition, delay_ms=120_000)
            sources = [p.replicas[0] for p in partitions("n1", name)]
            timers = [p.replicas[0] for p in partitions("n1", f"__timers.{info.uid}")]
            assert sources == timers, (sources, timers)  # each timer log beside its source
            chosen = 0
            holder = timers[chosen]
            told: dict[str, list[tuple[int, bool]]] = {}

            def counts(node_id: str) -> list[tuple[int, bool]]:
                told[node_id] = [
                    (p.pending_timers, p.pending_timers_unknown) for p in partitions(node_id, name)
                ]
                return told[node_id]

            def one_each(node_id: str) -> bool:
                return counts(node_id) == [(1, False)] * 3

            for node_id in addresses:  # the node holding both, and two holding neither
                try:
                    wait_until(functools.partial(one_each, node_id), 10, "")
                except AssertionError:
                    raise AssertionError(
                        f"{node_id} tells (pending, unknown) {told[node_id]} for partitions held "
                        f"by {sources} with timer logs on {timers}, not one pending each"
                    ) from None
                described = stubs[node_id].DescribeTopic(pb.DescribeTopicRequest(name=name))
                assert [p.pending_timers for p in described.partitions] == [1, 1, 1]
            asked = next(n for n in addresses if n != holder)
            cluster.pause(holder)
            try:
                seen = partitions(asked, name)
            finally:
                cluster.resume(holder)
            assert seen[chosen].pending_timers_unknown and seen[chosen].pending_timers == 0, (
                holder,
                asked,
                timers,
                seen,
            )
            known = [p.pending_timers for p in seen if timers[p.index] != holder]
            assert known == [1] * len(known)
    finally:
        for channel in channels.values():
            channel.close()
