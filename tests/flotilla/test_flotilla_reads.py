"""Reads on real nodes: acknowledged offsets are served by every replica (or retried elsewhere),
a restarted replica keeps its high watermark, subscribers leave a replica that stopped answering,
and bad read arguments or a replica closing mid-read get precise errors."""

from __future__ import annotations

import asyncio
import random
import shutil
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import grpc
import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import Client, InvalidArgument, OffsetNotAvailable, OffsetOutOfRange, TopicNotFound
from flotilla import aio as flotilla_aio
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from storage import LogConfig, SegmentedLog, StateJournal

pytestmark = pytest.mark.integration
IDLE_TIMEOUT_S = 3.0  # the subscribers' idle deadline in the paused-replica test
CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("reads"), 3, config_text=CONFIG) as local:
        local.start()
        yield local


def _leader(client: Client, topic: str) -> str:
    found: list[str] = []

    def has_leader() -> bool:
        try:
            leader = client.describe_topic(topic).partitions[0].leader
        except TopicNotFound:  # a node whose metadata lags the creation
            return False
        found.extend([leader] if leader else [])
        return bool(leader)

    wait_until(has_leader, 30, f"a leader of {topic}/0")
    return found[-1]


# -- item 7: acknowledged offsets are never answered OUT_OF_RANGE ----------------------------------
def test_acknowledged_offsets_are_read_from_any_replica_beside_a_producer(
    cluster: LocalCluster,
) -> None:
    """A reader that is told an offset was acknowledged (by another client, so its reads carry
    no read-your-writes floor) reads it from replicas spread at random while the producer goes
    on: a follower whose high watermark trails must not answer OUT_OF_RANGE (nor an empty read
    for a record that exists); the SDK goes to another replica instead."""
    with Client(cluster.addresses(), timeout_s=30) as producer_client:
        producer_client.create_topic("spread", partitions=1, replication_factor=3)
        _leader(producer_client, "spread")
        acknowledged: dict[int, bytes] = {}
        done = threading.Event()

        def produce() -> None:
            try:
                deadline = time.monotonic() + 25
                for n in range(400):
                    if time.monotonic() > deadline:
                        break
                    value = f"v{n}".encode()
                    acknowledged[producer_client.produce("spread", value, partition=0).offset] = (
                        value
                    )
            finally:
                done.set()

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        reads, failures = 0, []
        rng = random.Random(7)
        with Client(cluster.addresses(), timeout_s=30) as reader:
            wait_until(lambda: acknowledged or done.is_set(), 30, "a first acknowledged record")
            while not done.is_set() or reads < 200:
                latest = max(acknowledged)
                offset = latest if rng.random() < 0.8 else rng.randrange(latest + 1)
                reads += 1
                try:
                    records = reader.read("spread", 0, offset, max_records=1)
                except OffsetOutOfRange as error:
                    failures.append(f"offset {offset}: OffsetOutOfRange {error}")
                    continue
                got = [(r.offset, r.value) for r in records]
                if got != [(offset, acknowledged[offset])]:
                    failures.append(f"offset {offset}: read {got}")
                if reads >= 3000:
                    break
        thread.join(timeout=60)
    out_of_range = sum("OffsetOutOfRange" in failure for failure in failures)
    print(
        f"reads={reads} produced={len(acknowledged)} failures={len(failures)} "
        f"(OffsetOutOfRange {out_of_range}, empty or wrong {len(failures) - out_of_range})"
    )
    assert reads >= 200 and len(acknowledged) >= 50
    assert not failures, f"{len(failures)} of {reads} reads failed, e.g. {failures[:5]}"


def test_an_offset_past_the_end_is_out_of_range_only_from_the_leader(cluster: LocalCluster) -> None:
    """Past the end of the log, a follower cannot be sure (OffsetNotAvailable, retriable); the
    leader, holding its lease, is: a read spread over the replicas raises OffsetOutOfRange at
    once, also when the group had gone quiet (quiesced) and the leader must renew its lease."""
    with Client(cluster.addresses(), timeout_s=8) as client:
        client.create_topic("past-end", partitions=1, replication_factor=3)
        leader = _leader(client, "past-end")
        client.produce_batch("past-end", [b"e"] * 3, partition=0)
        follower = next(n for n in cluster.nodes if n != leader)
        wait_until(partial(client.read, "past-end", 0, 0, 1, replica=follower), 30)
        with pytest.raises(OffsetNotAvailable, match=f"not available on {follower}"):
            client.read("past-end", 0, 10, replica=follower)
        started = time.monotonic()
        with pytest.raises(OffsetOutOfRange, match=r"valid offsets are 0\.\.3"):
            client.read("past-end", 0, 10)
        assert time.monotonic() - started < 4
        with grpc.insecure_channel(cluster.nodes[leader].address) as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)
            wait_until(
                lambda: stub.Health(pb.HealthRequest(), timeout=5).active_groups == 0,
                30,
                f"every group on {leader} to go quiet",
            )
            with pytest.raises(grpc.RpcError) as refused:
                stub.Fetch(pb.FetchRequest(topic="past-end", partition=0, offset=10), timeout=5)
        assert refused.value.code() == grpc.StatusCode.OUT_OF_RANGE


def _replica_dir(cluster: LocalCluster, node_id: str, topic: str) -> Path:
    return cluster.nodes[node_id].data_dir / "partitions" / topic / "0"


def _persisted_commit(cluster: LocalCluster, node_id: str, group: str, scratch: Path) -> int:
    """The commit index node_id's state journal holds for `group`, read from a copy (opening
    the live journal could cut a tail the node is writing)."""
    scratch.mkdir(exist_ok=True)
    copy = scratch / "journal"
    shutil.copyfile(cluster.nodes[node_id].data_dir / "raft-state.journal", copy)
    journal = StateJournal(copy)
    try:
        return journal.load(group).commit
    finally:
        journal.close()


def _log_last_index(cluster: LocalCluster, node_id: str, topic: str, scratch: Path) -> int:
    copy = scratch / "log"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(_replica_dir(cluster, node_id, topic) / "log", copy)
    log = SegmentedLog(copy, LogConfig())
    try:
        return log.last_index
    finally:
        log.close()


def _topic_with_one_controller_replica(prefix: str) -> tuple[str, str, list[str]]:
    """A topic name whose partition 0 is placed on 5 nodes (n1..n3 run the control plane) with
    exactly one controller among its replicas, not the preferred leader: (name, that
    controller, the other two replicas). Killing those two leaves the control plane a quorum."""
    from cluster.placement import Candidate, partition_id, place

    candidates = [Candidate(f"n{n}") for n in range(1, 6)]
    for n in range(1000):
        name = f"{prefix}-{n}"
        replicas = place(partition_id(name, 0), candidates, 3)
        controllers = [r for r in replicas if r in ("n1", "n2", "n3")]
        if len(controllers) == 1 and replicas[0] != controllers[0]:
            return name, controllers[0], [r for r in replicas if r != controllers[0]]
    raise AssertionError("no such topic name")


def _restarted_alone(
    cluster: LocalCluster, follower: str, others: list[str], *, graceful: bool
) -> None:
    """Stops `follower` (SIGTERM, or SIGKILL), kills the partition's other replicas, and starts
    `follower` again: it hears no leader, so its high watermark is what it recovered."""
    if graceful:
        cluster.stop(follower)
    else:
        cluster.kill(follower)
    for node_id in others:
        cluster.kill(node_id)
    cluster.start(follower, wait=False)
    cluster.wait_serving(follower)


def _produce_and_wait(client: Client, topic: str, follower: str, values: list[bytes]) -> None:
    for value in values[:10]:
        client.produce(topic, value, partition=0)
    client.produce_batch(topic, values[10:], partition=0)
    wait_until(
        lambda: len(client.read(topic, 0, 0, 100, replica=follower)) == len(values),
        30,
        f"{follower} to commit all {len(values)} records",
    )


@pytest.mark.parametrize("graceful", [True, False], ids=["sigterm", "sigkill"])
def test_a_restarted_follower_serves_acknowledged_offsets_before_it_hears_a_leader(
    tmp_path: Path, graceful: bool
) -> None:
    """The commit index is persisted lazily (and on a graceful stop), so a replica restarted
    without a leader to hear from serves what it had committed, instead of answering
    OUT_OF_RANGE from a high watermark back at 0. With SIGKILL the test first waits until the
    lazy save has caught up with the replica's log."""
    topic, follower, others = _topic_with_one_controller_replica("restart")
    values = [f"r{n}".encode() for n in range(30)]
    with LocalCluster(tmp_path / "c", 5, config_text=CONFIG) as local:
        local.start()
        with Client(local.addresses(), timeout_s=30) as client:
            client.create_topic(topic, partitions=1, replication_factor=3)
            _leader(client, topic)
            _produce_and_wait(client, topic, follower, values)
            if not graceful:
                scratch = tmp_path / "scratch"
                wait_until(
                    lambda: (
                        _persisted_commit(local, follower, f"{topic}/0", scratch)
                        >= _log_last_index(local, follower, topic, scratch)
                    ),
                    20,
                    f"{follower}'s journal to hold a commit index covering its log",
                )
        _restarted_alone(local, follower, others, graceful=graceful)
        with Client(local.nodes[follower].address, timeout_s=20) as alone:
            for offset in (0, 9, 10, 29):
                records = alone.read(topic, 0, offset, 1, replica=follower)
                assert [r.value for r in records] == [values[offset]], offset


def test_a_restarted_follower_never_answers_out_of_range_for_what_it_may_not_know(
    tmp_path: Path,
) -> None:
    """Killed at once after the records committed (before a lazy save may cover them) and
    restarted without a leader, a follower may not know that its log's tail is committed: it
    answers "not yet available" (retriable), never OUT_OF_RANGE, for what it cannot vouch for."""
    topic, follower, others = _topic_with_one_controller_replica("killed")
    with LocalCluster(tmp_path, 5, config_text=CONFIG) as local:
        local.start()
        with Client(local.addresses(), timeout_s=30) as client:
            client.create_topic(topic, partitions=1, replication_factor=3)
            _leader(client, topic)
            _produce_and_wait(client, topic, follower, [f"k{n}".encode() for n in range(20)])
        _restarted_alone(local, follower, others, graceful=False)
        with grpc.insecure_channel(local.nodes[follower].address) as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)

            def fetch(offset: int) -> tuple[str, str]:
                request = pb.FetchRequest(topic=topic, partition=0, offset=offset)
                try:
                    stub.Fetch(request, timeout=10)
                    return "OK", ""
                except grpc.RpcError as error:
                    return error.code().name, error.details() or ""

            wait_until(lambda: fetch(0)[0] == "OK", 30, f"{follower} to serve {topic}/0")
            codes = {offset: fetch(offset) for offset in (0, 10, 19, 25)}
        assert all(code in ("OK", "UNAVAILABLE") for code, _ in codes.values()), codes
        assert all("not available" in why for code, why in codes.values() if code != "OK"), codes


# -- item 11: a subscriber leaves a replica that stopped answering -------------------------------
def test_subscribers_move_off_a_paused_replica(cluster: LocalCluster) -> None:
    """Twelve subscribers (six sync, six asyncio) spread over the replicas; one follower is
    paused (SIGSTOP): its subscribers get no keepalive within their idle deadline, move to
    another replica and resume at their next offset, with nothing lost or repeated."""
    total = 40
    with Client(cluster.addresses(), timeout_s=30) as client:
        client.create_topic("paused-sub", partitions=1, replication_factor=3)
        leader = _leader(client, "paused-sub")
        expected = [f"p{n}".encode() for n in range(total)]
        for value in expected[:5]:
            client.produce("paused-sub", value, partition=0)
        seen: list[list[bytes]] = [[] for _ in range(12)]
        stop = threading.Event()

        def sync_subscriber(slot: int) -> None:
            with Client(cluster.addresses(), timeout_s=30) as mine:
                for record in mine.subscribe("paused-sub", 0, 0, idle_timeout_s=IDLE_TIMEOUT_S):
                    seen[slot].append(record.value)
                    if len(seen[slot]) >= total or stop.is_set():
                        return

        async def async_subscriber(slot: int) -> None:
            async with flotilla_aio.Client(cluster.addresses(), timeout_s=30) as mine:
                async for record in mine.subscribe(
                    "paused-sub", 0, 0, idle_timeout_s=IDLE_TIMEOUT_S
                ):
                    seen[slot].append(record.value)
                    if len(seen[slot]) >= total or stop.is_set():
                        return

        async def async_group() -> None:
            tasks = [asyncio.create_task(async_subscriber(slot)) for slot in range(6, 12)]
            while not stop.is_set() and not all(t.done() for t in tasks):
                await asyncio.sleep(0.05)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        threads = [
            threading.Thread(target=sync_subscriber, args=(slot,), daemon=True) for slot in range(6)
        ]
        threads.append(threading.Thread(target=lambda: asyncio.run(async_group()), daemon=True))
        for thread in threads:
            thread.start()
        paused = next(n for n in cluster.nodes if n != leader)
        try:
            wait_until(lambda: all(len(s) >= 5 for s in seen), 30, "every subscriber's start")
            cluster.pause(paused)
            for value in expected[5:]:
                client.produce("paused-sub", value, partition=0)
            wait_until(
                lambda: all(len(s) >= total for s in seen),
                30,
                f"every subscriber to reach {total} records with {paused} paused",
                lambda: [len(s) for s in seen],
            )
        finally:
            cluster.resume(paused)
            stop.set()
            for thread in threads:
                thread.join(timeout=10)
    for values in seen:
        assert values == expected


def test_an_idle_subscription_carries_keepalives(cluster: LocalCluster) -> None:
    """With nothing new to send, every replica's Subscribe stream still sends a response (no
    batches, its high watermark) every max_wait_ms: what tells a client its replica is alive."""
    with Client(cluster.addresses(), timeout_s=30) as client:
        client.create_topic("idle-sub", partitions=1, replication_factor=3)
        client.produce("idle-sub", b"only", partition=0)
        for node_id, spec in cluster.nodes.items():
            wait_until(partial(client.read, "idle-sub", 0, 0, 1, replica=node_id), 30)
            with grpc.insecure_channel(spec.address) as channel:
                stream = flotilla_pb2_grpc.FlotillaStub(channel).Subscribe(
                    pb.FetchRequest(topic="idle-sub", partition=0, offset=1, max_wait_ms=200),
                    timeout=20,
                )
                started = time.monotonic()
                keepalives = [next(stream) for _ in range(3)]
                elapsed = time.monotonic() - started
                stream.cancel()
            assert all(not k.batches and k.high_watermark == 1 for k in keepalives), node_id
            assert elapsed < 10, (node_id, elapsed)


# -- item 12: precise errors for bad offsets and a replica closing mid-read ---------------------
def test_negative_offsets_and_counts_are_invalid_arguments(cluster: LocalCluster) -> None:
    with Client(cluster.addresses(), timeout_s=10) as client:
        client.create_topic("bad-args", partitions=1, replication_factor=3)
        with pytest.raises(InvalidArgument, match=r"offset=-1 .*0 to"):
            client.read("bad-args", 0, offset=-1)
        with pytest.raises(InvalidArgument, match=r"max_records=-5 .*1 to"):
            client.read("bad-args", 0, 0, max_records=-5)
        with pytest.raises(InvalidArgument, match=r"offset=-1 .*0 to"):
            next(iter(client.subscribe("bad-args", 0, offset=-1)))

    async def asynchronous() -> None:
        async with flotilla_aio.Client(cluster.addresses(), timeout_s=10) as client:
            with pytest.raises(InvalidArgument, match=r"offset=-1 .*0 to"):
                await client.read("bad-args", 0, offset=-1)
            with pytest.raises(InvalidArgument, match=r"offset=1.*0 to"):
                await client.read("bad-args", 0, offset=1 << 64)
            with pytest.raises(InvalidArgument, match=r"offset=-1 .*0 to"):
                await anext(aiter(client.subscribe("bad-args", 0, offset=-1)))

    asyncio.run(asynchronous())


def test_a_replica_closing_under_a_subscription_is_a_precise_status(
    cluster: LocalCluster,
) -> None:
    """A topic deleted under an open subscription closes the replica's log mid-read: the
    stream ends with a status naming that (not UNKNOWN with a storage exception's text)."""
    with Client(cluster.addresses(), timeout_s=30) as client:
        client.create_topic("closing", partitions=1, replication_factor=3)
        leader = _leader(client, "closing")
        for _ in range(60):  # 64 KiB each: the stream's flow control holds the server back
            client.produce("closing", b"c" * (64 << 10), partition=0)
        wait_until(lambda: client.read("closing", 0, 59, 1, replica=leader), 30)
        with grpc.insecure_channel(cluster.nodes[leader].address) as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)
            stream = stub.Subscribe(
                pb.FetchRequest(topic="closing", partition=0, offset=0, max_records=1),
                timeout=60,
            )
            first = next(stream)
            assert first.batches
            client.delete_topic("closing")

            def gone() -> bool:
                with grpc.insecure_channel(cluster.nodes[leader].address) as probe:
                    request = pb.FetchRequest(topic="closing", partition=0, offset=0)
                    try:
                        flotilla_pb2_grpc.FlotillaStub(probe).Fetch(request, timeout=5)
                    except grpc.RpcError as error:
                        return bool(error.code() == grpc.StatusCode.NOT_FOUND)
                    return False

            wait_until(gone, 30, "the topic's deletion on its leader")
            with pytest.raises(grpc.RpcError) as ended:
                for _ in stream:
                    pass
        assert ended.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE)
        assert "closing/0" in (ended.value.details() or "")


def test_a_read_racing_a_topic_deletion_is_a_precise_status(cluster: LocalCluster) -> None:
    """Reads that wait on the server (a read-your-writes floor it never reaches: 0.5 s each)
    while the topic is deleted find the replica's log closed when they go on: they end with
    NOT_FOUND naming the deletion, never UNKNOWN with a storage exception's text."""
    with Client(cluster.addresses(), timeout_s=30) as client:
        client.create_topic("deleting", partitions=1, replication_factor=3)
        leader = _leader(client, "deleting")
        client.produce_batch("deleting", [b"d"] * 10, partition=0)
        wait_until(partial(client.read, "deleting", 0, 0, 1, replica=leader), 30)
        request = pb.FetchRequest(
            topic="deleting", partition=0, offset=0, min_high_watermark=1 << 40
        )
        outcomes: list[tuple[str, str]] = []
        with grpc.insecure_channel(cluster.nodes[leader].address) as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)
            deleter = threading.Thread(target=client.delete_topic, args=("deleting",))
            calls = []
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                calls.append(stub.Fetch.future(request, timeout=20))
                if len(calls) == 5:
                    deleter.start()
                done = [c for c in calls if c.done()]
                if any(c.code() == grpc.StatusCode.NOT_FOUND for c in done[-5:]):
                    break  # the node no longer knows the topic: no read can race it any more
                stop = threading.Event()
                stop.wait(0.05)  # pacing the reads, not waiting for a condition
            deleter.join(timeout=60)
            for call in calls:
                try:
                    call.result()
                    outcomes.append(("OK", ""))
                except grpc.RpcError as error:
                    outcomes.append((error.code().name, error.details() or ""))
    codes = {code for code, _ in outcomes}
    assert "UNKNOWN" not in codes, [o for o in outcomes if o[0] == "UNKNOWN"][:3]
    assert any("was deleted while" in why for _, why in outcomes), sorted(codes)
