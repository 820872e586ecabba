"""Delayed delivery on real nodes (`cluster.delayed`, `cluster.timers`), over raw gRPC as an SDK
would: a delayed Produce goes to any node (forwarded to the timer partition's leader) and is
answered with its due time; the record appears in its partition at that time, never earlier.

Checked: the bounds (a time past by < 1 s is due at once; by more, or beyond max_delay_ms, is
INVALID_ARGUMENT naming the bound and nothing is accepted); the header rule; the timer topic is
hidden and unreadable; max_delay_ms create/alter/describe; delivery never early, in due order,
lateness p99 <= 100 ms; pending_timers in describe; and (last: it kills a node) each timer fires
exactly once across a leader kill at the due time.

One three-node cluster serves the module.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from harness import wait_until

from cluster.local import LocalCluster
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import decode_batch, encode_batch
from timers.types import DEFAULT_MAX_DELAY_MS, DELIVER_AT_HEADER, timer_topic

pytestmark = pytest.mark.integration

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"


@dataclass
class Setup:
    local: LocalCluster
    channels: dict[str, grpc.Channel] = field(default_factory=dict)

    def stub(self, address: str | None = None) -> flotilla_pb2_grpc.FlotillaStub:
        address = address or self.running()[0]
        if address not in self.channels:
            self.channels[address] = grpc.insecure_channel(address)
        return flotilla_pb2_grpc.FlotillaStub(self.channels[address])

    def running(self) -> list[str]:
        return [s.address for n, s in self.local.nodes.items() if self.local.is_running(n)]

    def call(self, method: str, request: object, timeout_s: float = 30.0) -> object:
        """On any running node, retrying UNAVAILABLE / moved leaders until a deadline."""
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            address = self.running()[attempt % len(self.running())]
            attempt += 1
            try:
                return getattr(self.stub(address), method)(request, timeout=10)
            except grpc.RpcError as error:
                retry = error.code() in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.FAILED_PRECONDITION,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                )
                if not retry or time.monotonic() > deadline:
                    raise
                print(f"{method} on {address}: {error.code().name} {error.details()}")
                time.sleep(0.05)

    def produce_delayed(
        self, topic: str, partition: int, values: list[bytes], deliver_at_ms: int
    ) -> pb.ProduceResponse:
        batch = delayed_batch(values, deliver_at_ms)
        request = pb.ProduceRequest(
            topic=topic, partition=partition, batch=batch, acks=pb.ACKS_ALL,
            deliver_at_ms=deliver_at_ms,
        )  # fmt: skip
        response = self.call("Produce", request)
        assert isinstance(response, pb.ProduceResponse)
        return response

    def read_all(self, topic: str, partition: int) -> list[tuple[int, bytes, int]]:
        """(offset, value, first seen at epoch ms) of every committed record."""
        records = []
        offset = 0
        while True:
            response = self.call(
                "Fetch", pb.FetchRequest(topic=topic, partition=partition, offset=offset)
            )
            assert isinstance(response, pb.FetchResponse)
            if not response.batches:
                return records
            for stored in response.batches:
                for record in decode_batch(stored.data, stored.base_offset):
                    records.append((record.offset, record.value, record.timestamp_ms))
                offset = stored.base_offset + stored.record_count

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()


def delayed_batch(values: list[bytes], deliver_at_ms: int, *, header: bool = True) -> bytes:
    now = int(time.time() * 1000)
    headers = [(DELIVER_AT_HEADER, str(deliver_at_ms).encode())] if header else []
    return encode_batch([(None, value, headers, now) for value in values])


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root: Path = tmp_path_factory.mktemp("timers")
    with LocalCluster(root, 3, controllers=2, config_text=CONFIG) as local:
        local.start()
        setup = Setup(local)
        try:
            yield setup
        finally:
            setup.close()


def create(setup: Setup, name: str, partitions: int = 2, **settings: int) -> pb.TopicInfo:
    info = setup.call(
        "CreateTopic",
        pb.CreateTopicRequest(name=name, partitions=partitions, replication_factor=3, **settings),
    )
    assert isinstance(info, pb.TopicInfo)
    for address in setup.running():  # every node knows it (the others poll the table)
        wait_until(
            lambda address=address: known(setup, address, name), 10, f"{address} knows {name}"
        )
    return info


def known(setup: Setup, address: str, name: str) -> bool:
    try:
        setup.stub(address).DescribeTopic(pb.DescribeTopicRequest(name=name), timeout=5)
        return True
    except grpc.RpcError:
        return False


def pending(setup: Setup, topic: str) -> list[int]:
    described = setup.call("DescribeTopic", pb.DescribeTopicRequest(name=topic))
    assert isinstance(described, pb.TopicInfo)
    return [p.pending_timers for p in described.partitions]


def refused(setup: Setup, request: pb.ProduceRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        setup.stub().Produce(request, timeout=10)
    return caught.value


def test_max_delay_ms_create_alter_describe(setup: Setup) -> None:
    info = create(setup, "md-default")
    assert info.max_delay_ms == DEFAULT_MAX_DELAY_MS
    info = create(setup, "md-set", max_delay_ms=60_000)
    assert info.max_delay_ms == 60_000
    altered = setup.call("AlterTopic", pb.AlterTopicRequest(name="md-set", max_delay_ms=5_000))
    assert isinstance(altered, pb.TopicInfo) and altered.max_delay_ms == 5_000
    described = setup.call("DescribeTopic", pb.DescribeTopicRequest(name="md-set"))
    assert isinstance(described, pb.TopicInfo) and described.max_delay_ms == 5_000
    with pytest.raises(grpc.RpcError) as caught:
        setup.stub().CreateTopic(
            pb.CreateTopicRequest(name="md-bad", partitions=1, max_delay_ms=10), timeout=10
        )
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "max_delay_ms=10" in (caught.value.details() or "")


def test_bounds_and_header_are_checked_and_nothing_is_accepted(setup: Setup) -> None:
    create(setup, "bounds", partitions=1, max_delay_ms=60_000)
    now = int(time.time() * 1000)
    for deliver_at, bound in ((now - 5_000, "in the past"), (now + 120_000, "max_delay_ms=60000")):
        error = refused(
            setup,
            pb.ProduceRequest(
                topic="bounds",
                partition=0,
                batch=delayed_batch([b"x"], deliver_at),
                acks=pb.ACKS_ALL,
                deliver_at_ms=deliver_at,
            ),
        )
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error
        assert bound in (error.details() or "")
    error = refused(
        setup,
        pb.ProduceRequest(
            topic="bounds",
            partition=0,
            batch=delayed_batch([b"x"], now + 5000, header=False),
            acks=pb.ACKS_ALL,
            deliver_at_ms=now + 5000,
        ),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert DELIVER_AT_HEADER in (error.details() or "")
    # nothing was accepted: no timer topic was even needed
    described = setup.call("DescribeTopic", pb.DescribeTopicRequest(name="bounds"))
    assert isinstance(described, pb.TopicInfo)
    assert sum(p.pending_timers for p in described.partitions) == 0
    assert setup.read_all("bounds", 0) == []


def test_the_timer_topic_is_hidden_and_unreadable(setup: Setup) -> None:
    info = create(setup, "hidden", partitions=1)
    response = setup.produce_delayed("hidden", 0, [b"h"], int(time.time() * 1000) + 60_000)
    assert response.deliver_at_ms > 0
    names = setup.call("ListTopics", pb.ListTopicsRequest())
    assert isinstance(names, pb.ListTopicsResponse)
    assert not [n for n in names.names if n.startswith("__timers")]
    timers = timer_topic(info.uid)
    with pytest.raises(grpc.RpcError) as caught:
        setup.stub().Fetch(pb.FetchRequest(topic=timers, partition=0), timeout=10)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    error = refused(
        setup,
        pb.ProduceRequest(
            topic=timers, partition=0, batch=delayed_batch([b"x"], 1), deliver_at_ms=1
        ),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert setup.read_all("hidden", 0) == []


def wait_records(setup: Setup, topic: str, partition: int, count: int, timeout_s: float) -> list:
    deadline = time.monotonic() + timeout_s
    while True:
        records = setup.read_all(topic, partition)
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def test_a_delayed_record_appears_at_its_time_never_earlier(setup: Setup) -> None:
    create(setup, "later", partitions=1)
    due = int(time.time() * 1000) + 1500
    response = setup.produce_delayed("later", 0, [b"a", b"b"], due)
    assert response.deliver_at_ms == due and response.record_count == 2
    wait_until(lambda: pending(setup, "later") == [2], 1, "2 pending timers described")
    seen: list[tuple[int, bytes, int]] = []
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        seen = setup.read_all("later", 0)
        now = int(time.time() * 1000)
        if not seen:
            time.sleep(0.01)
    assert seen, "never delivered"
    assert now >= due, f"delivered {due - now} ms early"
    assert [(o, v) for o, v, _ in seen] == [(0, b"a"), (1, b"b")]
    assert now - due < 1000, f"{now - due} ms late"


def test_a_time_past_by_less_than_a_second_is_due_at_once(setup: Setup) -> None:
    create(setup, "past", partitions=1)
    due = int(time.time() * 1000) - 300
    setup.produce_delayed("past", 0, [b"p"], due)
    records = wait_records(setup, "past", 0, 1, 5)
    assert [v for _, v, _ in records] == [b"p"]
