"""Queues on real nodes (`cluster.queues_service`, `cluster.dead_letters`), driven over raw gRPC
as an SDK would: members of a queue group join with GroupHeartbeat (kind QUEUE), take leases with
QueueReceive and settle them with QueueSettle, following NOT_COORDINATOR hints.

Checked: two members never hold one record at once and an ack counts once; an expired lease is
redelivered (count 2) after its backoff and not before; a release is visible after its own delay
only; reject and max_deliveries reach the dead-letter topic with every header; a departed
member's leases go back at once; bad input is refused and changes nothing; the describe and the
gauges. Last (they kill nodes): leases survive kill -9 of their coordinator, and a dead letter
lands once although its coordinator was killed between the copy and the bookkeeping (that node
runs with the TEST-ONLY `FLOTILLA_COORDINATOR_FAULTS=dead_letter_stall_after_copy`).

One three-node cluster serves the module.
"""

from __future__ import annotations

import functools
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from harness import holds_throughout, wait_until
from prometheus_client.parser import text_string_to_metric_families
from queue_calls import Member, Router, held, into, take

from cluster.coordinator_faults import ENV_VAR
from cluster.local import LocalCluster, NodeSpec, free_port
from flotilla import Client, TopicNotFound
from flotilla.types import Record
from proto import flotilla_pb2 as pb
from proto.groups import GROUPS_TOPIC, group_partition

pytestmark = pytest.mark.integration

# leader balancing on (1 s): a restarted node leads its preferred partitions again
CONFIG = (
    "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
    "group_partitions = 4\nleader_balance_after_s = 1\n"
)
GROUP_PARTITIONS = 4
STALL = "dead_letter_stall_after_copy"


class Cluster(LocalCluster):
    """Starts the nodes named in `faulty` with the stall fault armed."""

    faulty: set[str]

    def command(self, spec: NodeSpec) -> list[str]:
        command = super().command(spec)
        if spec.node_id in getattr(self, "faulty", set()):
            return ["env", f"{ENV_VAR}={STALL}", *command]
        return command


@dataclass
class Setup:
    local: Cluster
    router: Router
    client: Client
    metrics: dict[str, str]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root: Path = tmp_path_factory.mktemp("queues")
    local = Cluster(root, 3, controllers=2, config_text=CONFIG)
    local.faulty = set()
    with local:
        metrics = {}
        for spec in local.nodes.values():
            metrics[spec.node_id] = f"{spec.host}:{free_port(spec.host)}"
            spec.extra_args = ["--metrics", metrics[spec.node_id]]
        local.start()
        router = Router(local)
        client = Client(local.addresses(), timeout_s=30)
        try:
            yield Setup(local, router, client, metrics)
        finally:
            client.close()
            router.close()


def describe(setup: Setup, group: str) -> pb.GroupInfo:
    info: pb.GroupInfo = setup.router.call("DescribeGroup", pb.DescribeGroupRequest(group=group))
    return info


def queue_totals(setup: Setup, group: str) -> dict[str, int]:
    info = describe(setup, group)
    totals: dict[str, int] = {}
    for partition in info.partitions:
        for name in ("in_flight", "waiting", "acked", "dead_lettered", "dead_letters_pending"):
            totals[name] = totals.get(name, 0) + getattr(partition.queue, name)
    return totals


def groups_leader(setup: Setup, partition: int) -> str:
    found: list[str] = []

    def known() -> bool:
        for address in setup.router.running():
            try:
                response = setup.router.stub(address).Metadata(
                    pb.MetadataRequest(topics=[GROUPS_TOPIC]), timeout=5
                )
            except grpc.RpcError:
                continue
            leader = response.topics[0].partitions[partition].leader
            if leader:
                found[:] = [leader]
                return True
        return False

    wait_until(known, 30, f"a leader of {GROUPS_TOPIC}/{partition}")
    return found[0]


def known(client: Client, topic: str) -> bool:
    try:
        client.describe_topic(topic)
    except TopicNotFound:
        return False
    return True


def dead_letters(setup: Setup, topic: str, partition: int) -> list[Record]:
    return setup.client.read(topic, partition, 0, max_records=100)


def scrape(
    setup: Setup, node_id: str, prefix: str = "flotilla_queue_"
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{setup.metrics[node_id]}/metrics") as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(prefix)
    }


# -- leases ------------------------------------------------------------------------------------------
def test_two_members_never_hold_one_record_and_an_ack_counts_once(setup: Setup) -> None:
    setup.client.create_topic("jobs", partitions=2, replication_factor=3)
    for partition in (0, 1):
        setup.client.produce_batch("jobs", [b"j%d" % n for n in range(10)], partition=partition)
    options = pb.QueueOptions(max_deliveries=5)
    a = Member(setup.router, "workers", "jobs", options).join()
    b = Member(setup.router, "workers", "jobs", options).join()
    first = take(a, 8)
    second = take(b, 12)
    assert len(first) == 8 and len(second) == 12, (first, second)
    assert not held(first) & held(second)
    assert held(first) | held(second) == {(p, o) for p in (0, 1) for o in range(10)}
    assert {lease.delivery_count for lease in first + second} == {1}
    assert b.receive(100) == []  # everything is leased
    acked = a.settle(first, pb.SETTLE_ACK)
    assert len(acked.applied) == 8 and not acked.lost
    again = a.settle(first, pb.SETTLE_ACK)  # the same call again (a retry): applied, once
    assert held(list(again.applied)) == held(first) and not again.lost
    released = a.settle(first, pb.SETTLE_RELEASE)  # another settlement of ended leases: lost
    assert not released.applied and held(list(released.lost)) == held(first)
    stolen = b.settle(first[:1], pb.SETTLE_ACK)  # not b's lease
    assert not stolen.applied and len(stolen.lost) == 1
    info = describe(setup, "workers")
    assert info.kind == "queue" and info.queue.max_deliveries == 5
    assert {m.id for m in info.members} == {a.member_id, b.member_id}
    assert queue_totals(setup, "workers") == {
        "in_flight": 12, "waiting": 0, "acked": 8, "dead_lettered": 0, "dead_letters_pending": 0,
    }  # fmt: skip
    samples = scrape(setup, info.coordinator)  # the describe refreshed the coordinator's gauges
    in_flight = {
        dict(labels)["partition"]: value
        for (name, labels), value in samples.items()
        if name == "flotilla_queue_in_flight" and dict(labels)["group"] == "workers"
    }
    assert sum(in_flight.values()) == 12 and set(in_flight) == {"0", "1"}, samples


def test_a_receive_carries_the_acks_of_the_last_one_in_one_write(setup: Setup) -> None:
    """Acks carried on the next QueueReceive (Kafka's ShareFetch piggybacks acknowledgements):
    applied first, in the same coordinator round, as one Raft write with the new leases; a
    lost one is named and nothing is leased, so no lease is stranded."""
    setup.client.create_topic("carry", partitions=1, replication_factor=3)
    setup.client.produce_batch("carry", [b"c%d" % n for n in range(9)], partition=0)
    a = Member(setup.router, "carriers", "carry").join()
    first = take(a, 3)
    partition = group_partition("carriers", GROUP_PARTITIONS)

    def commit_index() -> int:  # Raft entries of the group's __groups partition
        return max(
            int(value)
            for node_id in setup.metrics
            for (name, labels), value in scrape(setup, node_id, "flotilla_partition").items()
            if name == "flotilla_partition_commit_index"
            and dict(labels)
            == {"node": node_id, "topic": GROUPS_TOPIC, "partition": str(partition)}
        )

    def held_everywhere() -> bool:  # every replica of carry/0 holds the nine records
        marks = [
            value
            for node_id in setup.metrics
            for (name, labels), value in scrape(setup, node_id, "flotilla_partition").items()
            if name == "flotilla_partition_high_watermark"
            and dict(labels) == {"node": node_id, "topic": "carry", "partition": "0"}
        ]
        return marks == [9] * len(setup.metrics)

    # the coordinator reads its own replica of the source, and a receive carrying acks is
    # answered after one round: a replica that has not learnt the commit yet (a follower learns
    # it with the next heartbeat) would lease nothing in it (CI saw that once, under load)
    wait_until(held_everywhere, 10, "every replica of carry/0 to hold the records")
    written = commit_index()
    answer = a.ack_and_receive(first, 3)
    assert answer.settled and held(list(answer.applied)) == held(first) and not answer.lost
    assert held(list(answer.leases)) == {(0, 3), (0, 4), (0, 5)}, answer
    wait_until(lambda: commit_index() > written, 10, "the round's write")
    assert commit_index() == written + 1  # the acks and the leases: one batch, one entry
    assert queue_totals(setup, "carriers")["acked"] == 3
    # one of the acks is not this member's to give (a delivery count it never had): named lost,
    # nothing leased, nothing changed for the other
    stale = [replace_count(lease, 7) for lease in answer.leases[:1]]
    refused = a.ack_and_receive(stale + list(answer.leases[1:]), 3)
    assert refused.settled and held(list(refused.lost)) == {(0, 3)} and not refused.leases
    assert held(list(refused.applied)) == {(0, 4), (0, 5)}
    assert queue_totals(setup, "carriers")["acked"] == 5
    # a bad settlement is refused whole, naming it, and changes nothing
    bad = pb.QueueReceiveRequest(
        group="carriers", member_id=a.member_id, member_epoch=a.epoch, topic="carry",
        max_records=3, settlements=[pb.QueueSettlement(topic="carry", delivery_count=0)],
    )  # fmt: skip
    with pytest.raises(grpc.RpcError) as caught:
        setup.router.call("QueueReceive", bad)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "settlements[0].delivery_count=0 is invalid" in str(caught.value.details())
    assert queue_totals(setup, "carriers")["acked"] == 5


def replace_count(lease: Any, count: int) -> pb.QueueLease:
    copy = pb.QueueLease()
    copy.CopyFrom(lease)
    copy.delivery_count = count
    return copy


def test_an_expired_lease_comes_back_with_count_2_after_its_backoff_not_before(
    setup: Setup,
) -> None:
    setup.client.create_topic("slow", partitions=1, replication_factor=3)
    setup.client.produce("slow", b"late", partition=0)
    options = pb.QueueOptions(backoff_ms=[2000])
    a = Member(setup.router, "expiry", "slow", options).join()
    b = Member(setup.router, "expiry", "slow", options).join()
    (lease,) = take(a, 1, invisible_ms=1000)
    due_ms = lease.deadline_ms + 2000  # the deadline, then the first backoff
    assert lease.delivery_count == 1
    # not before: nobody gets it until its deadline plus the backoff (checked until shortly before)
    holds_throughout(
        lambda: not b.receive() or time.time() * 1000 >= due_ms,
        max(0.0, (due_ms - 200) / 1000 - time.time()),
        "the record stays away until its deadline plus backoff",
    )
    redelivered: list[Any] = []
    wait_until(lambda: into(redelivered, b.receive(wait_ms=500)), 10, "redelivery")
    assert time.time() * 1000 >= due_ms
    assert [(r.offset, r.delivery_count) for r in redelivered] == [(0, 2)]
    late = a.settle([lease], pb.SETTLE_ACK)  # its lease expired: lost, nothing changed
    assert not late.applied and len(late.lost) == 1
    assert len(b.settle(redelivered, pb.SETTLE_ACK).applied) == 1


def test_a_release_is_visible_after_its_own_delay_only(setup: Setup) -> None:
    setup.client.create_topic("later", partitions=1, replication_factor=3)
    setup.client.produce("later", b"again", partition=0)
    # an expiry would wait 5 s more: a release adds none of it
    a = Member(setup.router, "releaser", "later", pb.QueueOptions(backoff_ms=[5000])).join()
    (lease,) = take(a, 1)
    released_at_ms = time.time() * 1000
    assert len(a.settle([lease], pb.SETTLE_RELEASE, delay_ms=1500).applied) == 1
    assert a.receive() == []  # not yet
    back = a.receive(wait_ms=10_000)  # the node asks again on each tick until it is due
    now_ms = time.time() * 1000
    assert released_at_ms + 1500 <= now_ms < released_at_ms + 1500 + 4000  # no backoff added
    assert [(r.offset, r.delivery_count) for r in back] == [(0, 2)]


def test_a_departed_members_leases_go_back_at_once(setup: Setup) -> None:
    setup.client.create_topic("handover", partitions=1, replication_factor=3)
    setup.client.produce_batch("handover", [b"h0", b"h1", b"h2"], partition=0)
    a = Member(setup.router, "leavers", "handover").join()
    b = Member(setup.router, "leavers", "handover").join()
    leases = take(a, 3, invisible_ms=600_000)
    assert b.receive() == []
    a.leave()
    started = time.monotonic()
    taken = b.receive(wait_ms=5000)
    assert time.monotonic() - started < 5, "the leases did not come back at once"
    assert held(taken) == held(leases) and {t.delivery_count for t in taken} == {2}


def test_key_ordering_holds_back_a_record_while_an_earlier_one_with_its_key_is_leased(
    setup: Setup,
) -> None:
    setup.client.create_topic("keyed", partitions=1, replication_factor=3)
    for key in (b"a", b"a", b"b", b"a"):
        setup.client.produce("keyed", b"v", key=key, partition=0)
    a = Member(setup.router, "ordered", "keyed", pb.QueueOptions(ordering="key")).join()
    first = take(a, 2)  # the node read the keys: offset 1 and 3 wait for offset 0
    assert held(first) == {(0, 0), (0, 2)} and a.receive(10) == []
    assert len(a.settle([f for f in first if f.offset == 0], pb.SETTLE_ACK).applied) == 1
    assert held(take(a, 1)) == {(0, 1)} and a.receive(10) == []


def test_partitions_the_coordinator_does_not_host_are_read_through_other_replicas(
    setup: Setup,
) -> None:
    """Extents from the metadata view, keys and a dead letter's source read with a Fetch."""
    setup.client.create_topic("far", partitions=4, replication_factor=1)
    for partition in range(4):
        for key in (b"x", b"x"):
            setup.client.produce("far", b"%d" % partition, key=key, partition=partition)
    a = Member(setup.router, "remote", "far", pb.QueueOptions(ordering="key")).join()
    coordinator = describe(setup, "remote").coordinator
    hosts = {p.index: list(p.replicas) for p in setup.client.describe_topic("far").partitions}
    remote = [p for p, replicas in hosts.items() if coordinator not in replicas]
    assert remote, (coordinator, hosts)  # placement is deterministic: some are elsewhere
    leases = take(a, 4)  # one per partition: each partition's second record waits for its key
    assert held(leases) == {(p, 0) for p in range(4)} and a.receive(10) == []
    (far,) = [lease for lease in leases if lease.partition == remote[0]]
    assert len(a.settle([far], pb.SETTLE_REJECT).applied) == 1
    source = setup.client.read("far", far.partition, 0)[0]
    dlq = "far.remote.dlq"
    wait_until(lambda: queue_totals(setup, "remote")["dead_lettered"] == 1, 30, "the copy")
    (copy,) = dead_letters(setup, dlq, far.partition)
    assert_dead_letter(copy, source, far.partition, 1, "rejected")


# -- dead letters -----------------------------------------------------------------------------------
def assert_dead_letter(
    record: Record, source: Record, partition: int, deliveries: int, reason: str
) -> None:
    assert (record.key, record.value) == (source.key, source.value)
    assert record.headers == (
        *source.headers,
        ("flotilla-dlq-topic", source.topic.encode()),
        ("flotilla-dlq-partition", str(partition).encode()),
        ("flotilla-dlq-offset", str(source.offset).encode()),
        ("flotilla-dlq-deliveries", str(deliveries).encode()),
        ("flotilla-dlq-reason", reason.encode()),
    )


def test_a_rejected_record_is_dead_lettered_with_every_header(setup: Setup) -> None:
    setup.client.create_topic("poison", partitions=2, replication_factor=3)
    setup.client.produce("poison", b"bad", key=b"k1", partition=1, headers=[("trace", b"t-1")])
    (source,) = setup.client.read("poison", 1, 0)
    a = Member(setup.router, "rejecter", "poison").join()
    (lease,) = take(a, 1)
    assert len(a.settle([lease], pb.SETTLE_REJECT).applied) == 1
    wait_until(
        lambda: queue_totals(setup, "rejecter")["dead_lettered"] == 1, 30, "the copy confirmed"
    )
    info = setup.client.describe_topic("poison.rejecter.dlq")
    assert len(info.partitions) == 2 and info.replication_factor == 3
    (copy,) = dead_letters(setup, "poison.rejecter.dlq", 1)
    assert_dead_letter(copy, source, 1, 1, "rejected")
    assert dead_letters(setup, "poison.rejecter.dlq", 0) == []
    assert a.receive() == []  # settled: never handed out again
    coordinator = describe(setup, "rejecter").coordinator
    samples = scrape(setup, coordinator)
    labels = (("group", "rejecter"), ("node", coordinator), ("partition", "1"), ("topic", "poison"))
    assert samples[("flotilla_queue_dead_lettered_total", labels)] == 1, samples


def test_max_deliveries_dead_letters_after_exactly_that_many_hand_outs(setup: Setup) -> None:
    setup.client.create_topic("flaky", partitions=1, replication_factor=3)
    setup.client.produce("flaky", b"boom", partition=0)
    (source,) = setup.client.read("flaky", 0, 0)
    a = Member(setup.router, "patient", "flaky", pb.QueueOptions(max_deliveries=3)).join()
    counts = []
    for _ in range(3):
        leases: list[Any] = []
        wait_until(lambda: into(leases, a.receive(wait_ms=500)), 10, "a hand-out")  # noqa: B023
        counts += [lease.delivery_count for lease in leases]
        assert len(a.settle(leases, pb.SETTLE_RELEASE).applied) == 1
    assert counts == [1, 2, 3]
    wait_until(
        lambda: queue_totals(setup, "patient")["dead_lettered"] == 1, 30, "the copy confirmed"
    )
    assert a.receive(wait_ms=300) == []  # a fourth hand-out never comes
    (copy,) = dead_letters(setup, "flaky.patient.dlq", 0)
    assert_dead_letter(copy, source, 0, 3, "max-deliveries")


def test_dead_letters_go_on_when_the_dead_letter_partition_forgot_their_producer(
    setup: Setup,
) -> None:
    """The copies' producer id and sequences are deterministic; a dead-letter partition that no
    longer knows that producer (the topic deleted and recreated here; the same after a day with
    no dead letter, or partitions added) must not stop every later dead letter."""
    setup.client.create_topic("twice", partitions=1, replication_factor=3)
    for value in (b"first", b"second"):
        setup.client.produce("twice", value, partition=0)
    a = Member(setup.router, "again", "twice").join()
    leases = take(a, 2)
    assert len(a.settle(leases[:1], pb.SETTLE_REJECT).applied) == 1
    wait_until(lambda: queue_totals(setup, "again")["dead_lettered"] == 1, 30, "the first copy")
    setup.client.delete_topic("twice.again.dlq")
    wait_until(
        lambda: "twice.again.dlq" not in setup.client.list_topics(), 30, "the dead letters gone"
    )
    assert len(a.settle(leases[1:], pb.SETTLE_REJECT).applied) == 1
    wait_until(lambda: queue_totals(setup, "again")["dead_lettered"] == 2, 30, "the second copy")
    # the recreated topic may reach a node's topic table seconds late under load (past the
    # SDK's 3 s grace for a topic just created): until one answers for it, it is not found
    wait_until(lambda: known(setup.client, "twice.again.dlq"), 30, "the recreated dead letters")
    # a read names the incarnation the client learned (not the deleted one, which a node that
    # has not dropped its replica yet still holds): never the old copy ('first')
    copies = dead_letters(setup, "twice.again.dlq", 0)
    assert len(copies) == 1, [(c.offset, c.value, c.headers) for c in copies]
    (copy,) = copies
    assert (copy.value, copy.headers[-1]) == (b"second", ("flotilla-dlq-reason", b"rejected"))


# -- the edge ---------------------------------------------------------------------------------------
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(setup: Setup) -> None:
    setup.client.create_topic("strict", partitions=1, replication_factor=3)
    setup.client.produce("strict", b"s", partition=0)
    a = Member(setup.router, "strict", "strict").join()
    (lease,) = take(a, 1, invisible_ms=60_000)
    before = describe(setup, "strict")
    partition = group_partition("strict", GROUP_PARTITIONS)

    def groups_high_watermark() -> int:
        response = setup.router.stub(setup.router.running()[0]).Metadata(
            pb.MetadataRequest(topics=[GROUPS_TOPIC]), timeout=10
        )
        return int(response.topics[0].partitions[partition].high_watermark)

    written = groups_high_watermark()
    receive: dict[str, Any] = dict(
        group="strict", member_id=a.member_id, member_epoch=a.epoch, topic="strict"
    )
    settle: dict[str, Any] = dict(
        topic="strict", partition=0, offset=lease.offset, delivery_count=lease.delivery_count
    )
    bad: list[tuple[str, Any, str]] = [
        ("QueueReceive", pb.QueueReceiveRequest(**receive, max_records=0), "max_records=0"),
        ("QueueReceive", pb.QueueReceiveRequest(**receive, max_records=10_001), "1..10000"),
        (
            "QueueReceive",
            pb.QueueReceiveRequest(**receive, max_records=1, invisible_ms=999),
            "invisible_ms=999",
        ),
        (
            "QueueReceive",
            pb.QueueReceiveRequest(**receive, max_records=1, wait_ms=30_001),
            "wait_ms=30001",
        ),
        (
            "QueueSettle",
            pb.QueueSettleRequest(group="strict", member_id=a.member_id, member_epoch=a.epoch),
            "settlements",
        ),
        (
            "QueueSettle",
            pb.QueueSettleRequest(
                group="strict",
                member_id=a.member_id,
                member_epoch=a.epoch,
                settlements=[
                    pb.QueueSettlement(**settle, action=pb.SETTLE_RELEASE, delay_ms=86_400_001)
                ],
            ),
            "delay_ms=86400001",
        ),
        (
            "QueueSettle",
            pb.QueueSettleRequest(
                group="strict",
                member_id=a.member_id,
                member_epoch=a.epoch,
                settlements=[pb.QueueSettlement(**settle, action=pb.SETTLE_EXTEND)],
            ),
            "invisible_ms=0",
        ),
        (
            "QueueSettle",
            pb.QueueSettleRequest(
                group="strict",
                member_id=a.member_id,
                member_epoch=a.epoch,
                settlements=[pb.QueueSettlement(**settle, action=cast(Any, 7))],
            ),
            "action=7",
        ),
        (
            "GroupHeartbeat",
            pb.GroupHeartbeatRequest(
                group="strict",
                topics=["strict"],
                kind=pb.GROUP_KIND_QUEUE,
                queue=pb.QueueOptions(ordering="random"),
            ),
            "ordering='random'",
        ),
        (
            "GroupHeartbeat",
            pb.GroupHeartbeatRequest(
                group="strict",
                topics=["strict"],
                kind=pb.GROUP_KIND_QUEUE,
                queue=pb.QueueOptions(max_deliveries=1001),
            ),
            "max_deliveries=1001",
        ),
        (
            "GroupHeartbeat",
            pb.GroupHeartbeatRequest(
                group="strict",
                topics=["strict"],
                kind=pb.GROUP_KIND_QUEUE,
                queue=pb.QueueOptions(dead_letter_topic="__mine"),
            ),
            "'__mine'",
        ),
        (
            "GroupHeartbeat",
            pb.GroupHeartbeatRequest(
                group="strict", topics=["strict"], queue=pb.QueueOptions(max_deliveries=3)
            ),
            "GROUP_KIND_QUEUE",
        ),
    ]
    for method, request, named in bad:
        with pytest.raises(grpc.RpcError) as refused:
            setup.router.call(method, request)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT, (method, named)
        assert named in (refused.value.details() or ""), (named, refused.value.details())
    unknown = pb.QueueReceiveRequest(**{**receive, "topic": "never-made"}, max_records=1)
    with pytest.raises(grpc.RpcError) as missing:
        setup.router.call("QueueReceive", unknown)
    assert missing.value.code() is grpc.StatusCode.NOT_FOUND, missing.value.details()
    assert "'never-made'" in (missing.value.details() or "")
    assert a.receive(wait_ms=300) == []  # an empty receive, asked again on every tick
    assert groups_high_watermark() == written  # nothing written
    after = describe(setup, "strict")
    assert after.queue == before.queue and list(after.partitions) == list(before.partitions)
    assert len(a.settle([lease], pb.SETTLE_ACK).applied) == 1  # the lease is still a's


# -- failover (last: these kill and restart nodes) ---------------------------------------------------
def _topics_loaded(setup: Setup, node_id: str) -> bool:
    try:
        setup.router.stub(setup.local.nodes[node_id].address).Metadata(
            pb.MetadataRequest(topics_only=True), timeout=5
        )
    except grpc.RpcError:
        return False
    return True


def restart(setup: Setup, node_id: str) -> None:
    setup.local.start(node_id)
    wait_until(
        functools.partial(_topics_loaded, setup, node_id), 60, f"{node_id} loads the topic table"
    )


def test_leases_survive_kill_9_of_their_coordinator(setup: Setup) -> None:
    setup.client.create_topic("steady", partitions=2, replication_factor=3)
    for partition in (0, 1):
        setup.client.produce_batch("steady", [b"s%d" % n for n in range(5)], partition=partition)
    a = Member(setup.router, "survivors", "steady").join()
    b = Member(setup.router, "survivors", "steady").join()
    leases = take(a, 6, invisible_ms=20_000)
    victim = describe(setup, "survivors").coordinator
    setup.local.kill(victim)
    try:
        # the new coordinator holds a's leases with their deadlines: b gets only the rest
        rest = take(b, 4, invisible_ms=20_000)
        assert held(rest) == {(p, o) for p in (0, 1) for o in range(5)} - held(leases), rest
        assert b.receive(100) == []
        assert describe(setup, "survivors").coordinator != victim
        kept = a.settle(leases, pb.SETTLE_EXTEND, invisible_ms=30_000)  # a's session restarted
        assert held(list(kept.applied)) == held(leases) and not kept.lost
        assert all(
            k.deadline_ms > lease.deadline_ms for k, lease in zip(kept.applied, leases, strict=True)
        )
        assert queue_totals(setup, "survivors")["in_flight"] == 10
        # its delivery count came through: released, it goes out again as the second delivery
        assert len(a.settle(leases[:1], pb.SETTLE_RELEASE).applied) == 1
        again = take(b, 1)
        assert held(again) == held(leases[:1]) and again[0].delivery_count == 2
    finally:
        restart(setup, victim)


def test_a_dead_letter_lands_once_when_its_coordinator_dies_between_copy_and_bookkeeping(
    setup: Setup,
) -> None:
    setup.client.create_topic("fragile", partitions=1, replication_factor=3)
    setup.client.produce("fragile", b"once", key=b"k", partition=0, headers=[("h", b"v")])
    (source,) = setup.client.read("fragile", 0, 0)
    Member(setup.router, "bystander", "fragile").join()  # __groups exists (run alone, too)
    # n3 restarts with the stall fault; leader balancing hands it its preferred partitions back
    stalling = "n3"
    setup.local.kill(stalling)
    setup.local.faulty = {stalling}
    restart(setup, stalling)
    joined: list[tuple[str, Member]] = []

    def coordinated_by_stalling(attempt: list[int] = [0]) -> bool:  # noqa: B006
        attempt[0] += 1
        for partition in range(GROUP_PARTITIONS):
            if groups_leader(setup, partition) != stalling:
                continue
            name = next(
                f"exactly-{attempt[0]}-{n}"
                for n in range(1000)
                if group_partition(f"exactly-{attempt[0]}-{n}", GROUP_PARTITIONS) == partition
            )
            member = Member(setup.router, name, "fragile").join()
            if describe(setup, name).coordinator == stalling:
                joined[:] = [(name, member)]
                return True
        return False

    wait_until(coordinated_by_stalling, 60, f"{stalling} coordinates a group again")
    ((group, a),) = joined
    (lease,) = take(a, 1)
    assert len(a.settle([lease], pb.SETTLE_REJECT).applied) == 1
    dlq = f"fragile.{group}.dlq"
    # copied, never confirmed: the decision is pending
    wait_until(
        lambda: dlq in setup.client.list_topics() and dead_letters(setup, dlq, 0), 30, "the copy"
    )
    assert queue_totals(setup, group)["dead_letters_pending"] == 1
    setup.local.faulty = set()
    setup.local.kill(stalling)  # between the copy and its bookkeeping (it stays down: last test)
    wait_until(
        lambda: queue_totals(setup, group)["dead_lettered"] == 1, 60, "the copy confirmed",
        detail=lambda: describe(setup, group),
    )  # fmt: skip
    assert describe(setup, group).coordinator != stalling
    totals = queue_totals(setup, group)
    assert totals["dead_letters_pending"] == 0 and totals["in_flight"] == 0
    (copy,) = dead_letters(setup, dlq, 0)  # copied again, landed once
    assert_dead_letter(copy, source, 0, 1, "rejected")
