"""Consumer groups through the SDK and the CLI on a real three-node cluster (one for the module):
two consumers split a topic's partitions and a third that joins takes about a third of them,
each from another member, with no partition owned by two at once and no record skipped; close()
moves a member's partitions at once (well before its session timeout); a zombie (its heartbeat
stopped past its session) is fenced by the coordinator on commit, commits nothing and rejoins on
its next poll; the asyncio consumer; and the group commands of the CLI."""

from __future__ import annotations

import argparse
import asyncio
import io
import time
from collections.abc import Iterator

import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import Client, Consumer, FencedMember, GroupNotEmpty, GroupNotFound, Record, aio, cli
from flotilla.cli_groups import run_group_consume
from flotilla.cli_records import add_record_parsers

pytestmark = pytest.mark.integration

CONFIG = (
    "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
    "group_partitions = 2\nleader_balance_after_s = 0\n"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("groups-sdk"), 3, config_text=CONFIG) as local:
        local.start()
        yield local


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap, timeout_s=30) as c:
        yield c


class Members:
    """Polls its consumers in turn and keeps what each delivered; checks after every round that
    no partition is owned by two of them."""

    def __init__(self, *consumers: Consumer) -> None:
        self.consumers = list(consumers)
        self.delivered: dict[tuple[str, int], list[int]] = {}

    def round(self) -> list[set[tuple[str, int]]]:
        for consumer in self.consumers:
            records: list[Record] = consumer.poll(max_records=500, timeout_s=0.05)
            for r in records:
                self.delivered.setdefault((r.topic, r.partition), []).append(r.offset)
        owned = [c.assignment() for c in self.consumers]
        for i, mine in enumerate(owned):
            for theirs in owned[i + 1 :]:
                assert not mine & theirs, f"owned twice: {mine & theirs}"
        return owned

    def until(self, done: object, timeout_s: float = 30.0) -> list[set[tuple[str, int]]]:
        assert callable(done)
        deadline = time.monotonic() + timeout_s
        while True:
            owned = self.round()
            if done(owned):
                return owned
            states = [
                (c._core.state.identity(), c._core.state.target, c._core.state.lost)
                for c in self.consumers
            ]
            assert time.monotonic() < deadline, f"not settled in {timeout_s} s: {owned} {states}"


def test_members_split_partitions_a_joiner_moves_a_third_close_moves_at_once(
    client: Client,
) -> None:
    topic, partitions = "split", 12
    client.create_topic(topic, partitions=partitions, replication_factor=3)
    for p in range(partitions):
        client.produce_batch(topic, [b"v%d" % n for n in range(10)], partition=p)
    everything = {(topic, p) for p in range(partitions)}
    settings = {"session_timeout_ms": 30_000, "auto_commit_interval_ms": 200}
    a = client.consumer("splitters", [topic], **settings)  # type: ignore[arg-type]
    b = client.consumer("splitters", [topic], **settings)  # type: ignore[arg-type]
    c = client.consumer("splitters", [topic], **settings)  # type: ignore[arg-type]
    try:
        members = Members(a, b)
        before = members.until(lambda o: o[0] | o[1] == everything and o[0] and o[1])
        members.consumers.append(c)
        after = members.until(lambda o: o[0] | o[1] | o[2] == everything and o[2])
        moved = {tp for tp in everything if tp not in before[0] & after[0] | before[1] & after[1]}
        assert moved == after[2], (before, after)  # only partitions the joiner took moved
        assert 1 <= len(moved) <= 8, (before, after)  # about 12/3 (rendezvous hashing)
        wait_until(
            lambda: (
                members.round()
                and all(len(members.delivered.get(tp, ())) >= 10 for tp in everything)
            ),
            what="every record delivered",
        )
        for tp in everything:  # none skipped, whoever read it
            assert set(members.delivered[tp]) == set(range(10)), tp

        started = time.monotonic()
        a.close()  # its partitions move now, not after its 30 s session timeout
        members.consumers.remove(a)
        members.until(lambda o: o[0] | o[1] == everything, timeout_s=10)
        assert time.monotonic() - started < 10
        info = client.describe_group("splitters")
        assert len(info.members) == 2 and info.kind == "stream"
        assert {(p.topic, p.partition) for p in info.partitions} == everything
        assert {p.owner for p in info.partitions} == {m.id for m in info.members}
    finally:
        for consumer in (a, b, c):
            consumer.close()


def test_a_zombie_is_fenced_on_commit_commits_nothing_and_rejoins(client: Client) -> None:
    topic = "fenced"
    client.create_topic(topic, partitions=2, replication_factor=3)
    for n in range(4):
        client.produce(topic, b"z%d" % n, partition=n % 2)
    zombie = client.consumer("zombies", [topic], session_timeout_ms=2000, auto_commit=False)
    heir = client.consumer("zombies", [topic], session_timeout_ms=10_000, auto_commit=False)
    try:
        Members(zombie).until(lambda o: len(o[0]) == 2)
        fenced_id = zombie._core.state.identity()[0]
        zombie.commit({(topic, 0): 1})
        assert zombie.committed(topic, 0) == 1
        # the zombie's heartbeat stops (as a paused process's): its session ends at the
        # coordinator and the heir gets its partitions
        zombie._stop.set()
        zombie._wake.set()
        assert zombie._thread is not None
        zombie._thread.join(5)
        Members(heir).until(lambda o: len(o[0]) == 2, timeout_s=20)
        # it wakes believing its session alive: the coordinator refuses the commit
        zombie._core.state._acked_sent_at = time.monotonic()
        with pytest.raises(FencedMember):
            zombie.commit({(topic, 0): 2})
        assert heir.committed(topic, 0) == 1  # nothing committed
        zombie._stop.clear()
        zombie._thread = None
        assert zombie.poll(timeout_s=0) == []  # gives everything up and rejoins
        assert zombie.assignment() == set()
        members = Members(zombie, heir)  # a member again, under a new id
        members.until(
            lambda o: (
                zombie._core.state.identity()[0] not in ("", fenced_id)
                and o[0] | o[1] == {(topic, 0), (topic, 1)}
            ),
            timeout_s=20,
        )
    finally:
        zombie.close()
        heir.close()


def test_the_asyncio_consumer_reads_commits_and_leaves(
    cluster: LocalCluster, client: Client
) -> None:
    topic = "async-group"
    client.create_topic(topic, partitions=2, replication_factor=3)
    for n in range(6):
        client.produce(topic, b"a%d" % n, partition=n % 2)

    async def consume() -> tuple[list[Record], int | None, int]:
        async with aio.Client(cluster.bootstrap, timeout_s=30) as c:
            got: list[Record] = []
            async with c.consumer("async-readers", [topic]) as consumer:
                deadline = time.monotonic() + 30
                while len(got) < 6 and time.monotonic() < deadline:
                    got += await consumer.poll(timeout_s=0.2)
                await consumer.commit()
                committed = await consumer.committed(topic, 0)
            info = await c.describe_group("async-readers")
            return got, committed, len(info.members)

    got, committed, members_after = asyncio.run(consume())
    assert sorted((r.partition, r.offset) for r in got) == [
        (p, o) for p in (0, 1) for o in range(3)
    ]
    assert committed == 3 and members_after == 0


def test_the_group_commands(
    client: Client, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = "cli-group"
    client.create_topic(topic, partitions=2, replication_factor=3)
    for n in range(4):
        client.produce(topic, b"c%d" % n, partition=n % 2)
    bootstrap = ["--bootstrap", client.router.bootstrap[0]]

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = cli.main([*args, *bootstrap])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return status, out, err

    status, out, err = run(
        "consume", topic, "--group", "printers", "--from-beginning", "--max", "4"
    )
    assert status == 0 and sorted(out.split()) == ["c0", "c1", "c2", "c3"], (out, err)
    status, out, _ = run("group", "describe", "printers")
    assert status == 0 and "MEMBERS      0" in out and "TOTAL-LAG    0" in out
    assert client.describe_group("printers").partitions[0].committed == 2
    status, out, _ = run("group", "list")
    assert status == 0 and "printers" in out.split()
    status, out, _ = run("group", "reset", "printers", topic, "--to", "earliest")
    assert status == 0 and out.split()[-2:] == ["1", "0"]
    assert client.describe_group("printers").partitions[1].committed == 0
    with client.consumer("printers", [topic]) as member:  # a member: reset and delete refused
        Members(member).until(lambda o: len(o[0]) == 2)
        status, _, err = run("group", "reset", "printers", topic, "--to", "latest")
        assert status == 1 and err.startswith("flotilla: ")
        with pytest.raises(GroupNotEmpty):
            client.delete_group("printers")
    status, out, _ = run("group", "delete", "printers")
    assert status == 0 and out == "deleted group printers\n"
    with pytest.raises(GroupNotFound):
        client.describe_group("printers")
    status, _, err = run("group", "describe", "printers")
    assert status == 1 and "printers" in err


def test_a_static_member_keeps_its_partitions_across_a_restart(client: Client) -> None:
    """A static member's close (epoch -2) keeps its partitions for its session timeout; the same
    instance_id back within it takes them over at once, with no rebalance in between."""
    topic = "static"
    client.create_topic(topic, partitions=2, replication_factor=3)
    both = {(topic, 0), (topic, 1)}
    settings = {"instance_id": "host-7", "session_timeout_ms": 30_000}
    first = client.consumer("statics", [topic], **settings)  # type: ignore[arg-type]
    try:
        Members(first).until(lambda o: o[0] == both)
    finally:
        first.close()
    (kept,) = client.describe_group("statics").members
    assert kept.instance_id == "host-7" and kept.assignment == both
    again = client.consumer("statics", [topic], **settings)  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        Members(again).until(lambda o: o[0] == both, timeout_s=10)
        assert time.monotonic() - started < 10  # not after the 30 s session timeout
        (member,) = client.describe_group("statics").members
        assert member.id != kept.id and member.instance_id == "host-7"
    finally:
        again.close()


def test_consume_with_a_group_never_commits_what_it_did_not_write(client: Client) -> None:
    """Ctrl-C while a poll's records are being printed: the group's offset stays at most where
    the printed records end (none of this poll's is committed), so none is skipped next time."""
    topic = "interrupted"
    client.create_topic(topic, partitions=1, replication_factor=3)
    client.produce_batch(topic, [b"i%d" % n for n in range(4)])

    class Interrupted(io.BytesIO):
        def write(self, data: bytes) -> int:  # type: ignore[override]
            if self.tell():
                raise KeyboardInterrupt  # the second record
            return super().write(data)

    args = cli_main_args(topic, "interrupters")
    with pytest.raises(KeyboardInterrupt):
        run_group_consume(client, args, Interrupted(), io.StringIO())
    try:
        committed = client.describe_group("interrupters").partitions[0].committed
    except GroupNotFound:  # nothing committed and its member left: no group at all
        committed = None
    assert committed in (None, 0, 1)


def cli_main_args(topic: str, group: str) -> argparse.Namespace:
    """`flotilla consume TOPIC --group G --from-beginning` as the CLI parses it."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    add_record_parsers(sub, [])
    return parser.parse_args(["consume", topic, "--group", group, "--from-beginning"])


def test_a_commit_survives_kill_9_of_the_coordinator_with_no_rebalance(
    cluster: LocalCluster, client: Client
) -> None:
    """Runs last: it kills a node (and starts it again). The SDK finds the new coordinator by
    itself; the committed offset reads back as committed; the member keeps its partition (a
    coordinator failover alone moves nothing) and commits on."""
    topic = "durable"
    client.create_topic(topic, partitions=1, replication_factor=3)
    client.produce_batch(topic, [b"d%d" % n for n in range(5)])
    with client.consumer("durables", [topic], auto_commit=False) as consumer:
        members = Members(consumer)
        members.until(lambda o: len(members.delivered.get((topic, 0), ())) == 5)
        consumer.commit()
        member = client.describe_group("durables")
        coordinator = member.coordinator
        cluster.kill(coordinator)
        try:
            assert consumer.committed(topic, 0) == 5
            client.produce(topic, b"d5", partition=0)
            members.until(lambda o: len(members.delivered[(topic, 0)]) == 6)
            consumer.commit()
            assert consumer.committed(topic, 0) == 6
            assert consumer.assignment() == {(topic, 0)}
            after = client.describe_group("durables")
            assert after.coordinator != coordinator
            assert [m.id for m in after.members] == [m.id for m in member.members]
        finally:
            cluster.start(coordinator)
