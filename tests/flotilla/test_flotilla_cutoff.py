"""A follower cut off from its group (its links cut through the chaos network's proxies; the
process keeps running and clients still reach it) stops answering at its tail: reads there get
the retriable OFFSET_NOT_AVAILABLE at once instead of a long poll, its Subscribe streams end with
it, and subscribers keep up from another replica."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from harness import wait_until

from chaos.network import ChaosNetwork
from cluster.local import LocalCluster
from flotilla import Client, TopicNotFound
from flotilla import aio as flotilla_aio
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.reasons import OFFSET_NOT_AVAILABLE, REASON_KEY

pytestmark = pytest.mark.integration
# replicas are not replaced during the test: the cut-off follower keeps its replica
CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nreplace_after_s = 600\n"
IDLE_TIMEOUT_S = 3.0
TOPIC = "cut-off"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, ChaosNetwork]]:
    local = LocalCluster(tmp_path / "cluster", 3, config_text=CONFIG)
    network = ChaosNetwork(tmp_path)
    try:
        network.attach(local)
        with local:
            local.start()
            yield local, network
    finally:
        network.close()


def _leader(client: Client) -> str:
    found: list[str] = []

    def has_leader() -> bool:
        try:
            leader = client.describe_topic(TOPIC).partitions[0].leader
        except TopicNotFound:
            return False
        found.extend([leader] if leader else [])
        return bool(leader)

    wait_until(has_leader, 30, f"a leader of {TOPIC}/0")
    return found[-1]


def _known_everywhere(local: LocalCluster) -> bool:
    """Every node has the topic in its table (a subscriber asks whichever node it reaches, and
    a node whose table lags the creation answers TopicNotFound)."""
    for spec in local.nodes.values():
        with grpc.insecure_channel(spec.address) as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)
            try:
                answer = stub.Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=5)
            except grpc.RpcError:
                return False
        if not any(topic.name == TOPIC for topic in answer.topics):
            return False
    return True


def _reason(error: grpc.RpcError) -> str:
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    return next((str(v) for k, v in trailing or () if k == REASON_KEY), "")


def _high_watermark(local: LocalCluster, node_id: str) -> int:
    with grpc.insecure_channel(local.nodes[node_id].address) as channel:
        stub = flotilla_pb2_grpc.FlotillaStub(channel)
        answer = stub.Fetch(pb.FetchRequest(topic=TOPIC, partition=0, offset=0), timeout=5)
    return int(answer.high_watermark)


def _ticking_groups(local: LocalCluster, node_id: str) -> int:
    with grpc.insecure_channel(local.nodes[node_id].address) as channel:
        stub = flotilla_pb2_grpc.FlotillaStub(channel)
        return int(stub.Health(pb.HealthRequest(), timeout=5).active_groups)


@pytest.mark.parametrize("group_state", ["ticking", "quiesced"])
def test_subscribers_leave_a_cut_off_follower(
    cluster: tuple[LocalCluster, ChaosNetwork], group_state: str
) -> None:
    """Twelve SDK subscribers (six sync, six asyncio) spread over the replicas, and one raw
    Subscribe stream on the follower about to be cut off. Once it is cut off, the raw stream
    ends with OFFSET_NOT_AVAILABLE, a read at its tail is answered so at once, and every
    subscriber reaches the records written meanwhile, nothing lost or repeated.

    `ticking`: the follower has just heard from its leader when it is cut off, and counts an
    election timeout of ticks. `quiesced`: the group has gone idle (the leader sends nothing,
    the follower's clock stands still) before the cut; the follower learns it is out of touch
    from its membership's doubt about the leader (CI once saw this case: the stream then ended
    only once the leader was declared dead)."""
    local, network = cluster
    total = 40
    with Client(local.addresses(), timeout_s=30) as client:
        client.create_topic(TOPIC, partitions=1, replication_factor=3)
        leader = _leader(client)
        wait_until(lambda: _known_everywhere(local), 30, f"every node to know {TOPIC}")
        follower = next(n for n in local.nodes if n != leader)
        expected = [f"c{n}".encode() for n in range(total)]
        for value in expected[:5]:
            client.produce(TOPIC, value, partition=0)
        # the follower holds the five (a new replica that has not yet heard its leader would
        # end the raw stream at once, cut off or not)
        wait_until(lambda: _high_watermark(local, follower) == 5, 30, f"{follower} to hold 5")
        seen: list[list[bytes]] = [[] for _ in range(12)]
        stop = threading.Event()

        def sync_subscriber(slot: int) -> None:
            with Client(local.addresses(), timeout_s=30) as mine:
                for record in mine.subscribe(TOPIC, 0, 0, idle_timeout_s=IDLE_TIMEOUT_S):
                    seen[slot].append(record.value)
                    if len(seen[slot]) >= total or stop.is_set():
                        return

        async def async_subscriber(slot: int) -> None:
            async with flotilla_aio.Client(local.addresses(), timeout_s=30) as mine:
                async for record in mine.subscribe(TOPIC, 0, 0, idle_timeout_s=IDLE_TIMEOUT_S):
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
        # the raw stream on the follower: how it ends (or that it does not)
        channel = grpc.insecure_channel(local.nodes[follower].address)
        stub = flotilla_pb2_grpc.FlotillaStub(channel)
        raw_end: list[str] = []

        def raw_subscriber() -> None:
            stream = stub.Subscribe(
                pb.FetchRequest(topic=TOPIC, partition=0, offset=5, max_wait_ms=1000)
            )
            try:
                for _ in stream:
                    if stop.is_set():
                        stream.cancel()
                        return
                raw_end.append("ended without a status")
            except grpc.RpcError as error:
                raw_end.append(f"{error.code().name} {_reason(error)} {error.details()}")

        threads.append(threading.Thread(target=raw_subscriber, daemon=True))
        for thread in threads:
            thread.start()
        try:
            wait_until(lambda: all(len(s) >= 5 for s in seen), 30, "every subscriber's start")
            written = 5
            if group_state == "quiesced":
                wait_until(
                    lambda: _ticking_groups(local, follower) == 0,
                    30,
                    f"{TOPIC}/0 to quiesce on {follower}",
                )
            else:  # a record just replicated: the follower has just heard its leader
                client.produce(TOPIC, expected[written], partition=0)
                written += 1
                wait_until(lambda: _high_watermark(local, follower) == 6, 30, f"{follower} at 6")
            network.partition([[n for n in local.nodes if n != follower], [follower]])
            cut_at = time.monotonic()
            for value in expected[written:]:
                client.produce(TOPIC, value, partition=0)
            wait_until(
                lambda: bool(raw_end),
                20,
                f"the Subscribe stream on the cut-off {follower} to end",
            )
            ended_s = time.monotonic() - cut_at
            assert raw_end[0].startswith(f"UNAVAILABLE {OFFSET_NOT_AVAILABLE} "), raw_end
            # how it knew: its own ticks, or (its clock standing still) its membership
            why = "doubts its leader" if group_state == "quiesced" else "heard from no leader"
            assert why in raw_end[0], raw_end
            # reads at its tail and past it, which would wait up to 5 s, are answered at once
            answered_s, answers = 0.0, []
            for offset in (written, 30):  # its tail (its high watermark), and past it
                asked = time.monotonic()
                with pytest.raises(grpc.RpcError) as refused:
                    stub.Fetch(
                        pb.FetchRequest(topic=TOPIC, partition=0, offset=offset, max_wait_ms=5000),
                        timeout=10,
                    )
                answered_s = max(answered_s, time.monotonic() - asked)
                answers.append(f"{time.monotonic() - asked:.2f} s: {refused.value.details()}")
                assert refused.value.code() is grpc.StatusCode.UNAVAILABLE, refused.value
                assert _reason(refused.value) == OFFSET_NOT_AVAILABLE, refused.value
            assert answered_s < 1.0, (answered_s, answers)
            wait_until(
                lambda: all(len(s) >= total for s in seen),
                30,
                f"every subscriber to reach {total} records with {follower} cut off",
                lambda: [len(s) for s in seen],
            )
            print(
                f"stream on the cut-off follower ended after {ended_s:.2f} s; a tail read "
                f"was refused in {answered_s * 1000:.0f} ms; subscribers: {[len(s) for s in seen]}"
            )
        finally:
            network.heal()
            stop.set()
            for thread in threads:
                thread.join(timeout=10)
            channel.close()
    for values in seen:
        assert values == expected
