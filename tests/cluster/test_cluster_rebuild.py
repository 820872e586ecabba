"""A replica whose log is damaged (a bad entry with a valid one after it: corruption, not a torn
tail) is rebuilt from its peers: its damaged files are kept aside, it opens with an empty log,
its term, vote and configuration, and a vote floor at the end of the damaged log (so it never
votes for a candidate less up to date than what it held, nor campaigns before its log reaches
it), and its group's leader sends it the log again (issue 21, item 2)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from harness import wait_until
from prometheus_client import generate_latest

from cluster.config import NodeConfig
from cluster.controller import TopicSpec
from cluster.local import LocalCluster
from cluster.node import Node
from cluster.replica import Replica
from flotilla import Client, FlotillaError
from raft.types import Configuration, HardState, LogPosition
from storage import DamagedLog, LogConfig, SegmentedLog
from storage.timer_index import INDEX_DIRECTORY

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
RECORDS = 40


def _flip_middle_byte(log_dir: Path) -> tuple[Path, int]:
    """Flips one byte in the middle of the active (last) segment; returns the file and byte."""
    active = max(log_dir.glob("*.log"), key=lambda path: int(path.stem))
    data = bytearray(active.read_bytes())
    position = len(data) // 2
    data[position] ^= 0x40
    active.write_bytes(bytes(data))
    return active, position


def _values(client: Client, replica: str) -> list[bytes] | None:
    try:
        return [r.value for r in client.read("r", 0, 0, 1000, replica=replica)]
    except FlotillaError:
        return None


@pytest.mark.integration
@pytest.mark.parametrize("damaged", ["follower", "leader"])
def test_a_damaged_replica_is_rebuilt_from_its_peers_and_holds_every_record(
    tmp_path: Path, damaged: str
) -> None:
    expected = [f"v{n}".encode() for n in range(RECORDS)]
    with LocalCluster(tmp_path, 3, config_text=CONFIG) as cluster:
        cluster.start()
        with Client(cluster.addresses(), timeout_s=30) as client:
            client.create_topic("r", partitions=1, replication_factor=3)
            for value in expected:  # one entry each: the active segment holds them all
                client.produce("r", value, partition=0)
            info = client.describe_topic("r").partitions[0]
            leader = info.leader
            victim = (
                leader if damaged == "leader" else next(r for r in info.replicas if r != leader)
            )
            others = [r for r in info.replicas if r != victim]
            wait_until(lambda: _values(client, victim) == expected, 30, f"{victim} to hold all")
            cluster.kill(victim)
            spec = cluster.nodes[victim]
            damaged_file, position = _flip_middle_byte(spec.data_dir / "partitions/r/0/log")
            cluster.start(victim)
            seen: list[list[bytes] | None] = []

            def rebuilt() -> bool:
                seen.append(_values(client, victim))
                return seen[-1] == expected

            wait_until(rebuilt, 60, f"{victim} rebuilt with every record", lambda: seen[-1])
            for replica in others:  # the other replicas are unaffected
                assert _values(client, replica) == expected
            assert client.produce("r", b"after", partition=0).offset == RECORDS
            wait_until(
                lambda: _values(client, victim) == [*expected, b"after"],
                30,
                f"{victim} following again",
            )
        replica_dir = spec.data_dir / "partitions/r/0"
        kept = sorted(p.name for p in replica_dir.iterdir() if p.name.startswith("damaged-"))
        assert kept == ["damaged-1"], kept  # the damaged files, kept aside for the operator
        assert (replica_dir / "damaged-1" / damaged_file.name).exists()
        assert spec.log_path is not None
        log_text = spec.log_path.read_text(errors="replace")
        warnings = [line for line in log_text.splitlines() if "rebuilding replica r/0" in line]
        assert len(warnings) == 1 and "level=warning" in warnings[0], log_text[-3000:]
        assert str(damaged_file) in warnings[0] and "damaged at byte" in warnings[0], warnings
        assert position > 0


def _node(tmp_path: Path) -> Node:
    node = Node(NodeConfig(node_id="n1", data_dir=str(tmp_path / "n1")))
    Path(node.partitions_dir).mkdir(parents=True, exist_ok=True)
    return node


def _damaged_replica_dir(node: Node) -> tuple[Path, Path]:
    """t/0 with entries 1..10 of term 3, one byte flipped in the middle; the journal holds
    term 4, vote n2, commit 6."""
    directory = Path(node.opener.replica_dir("t", 0))
    log = SegmentedLog(str(directory / "log"), LogConfig(), create=True)
    for _ in range(10):
        log.append(b"x" * 200, 3, 0, 0)
    log.flush()
    log.close()
    node.journal.save_many({"t/0": HardState(4, "n2", 6)})
    damaged_file, _ = _flip_middle_byte(directory / "log")
    with pytest.raises(DamagedLog):
        SegmentedLog(str(directory / "log"), LogConfig())
    return directory, damaged_file


async def _open(node: Node) -> Replica:
    replica = await node.multiraft.run_storage(lambda: node.opener.open_replica(SPEC, 0, BOOTSTRAP))
    assert isinstance(replica, Replica)
    return replica


SPEC = TopicSpec("t", 1, 3, assignment=(("n1", "n2", "n3"),))
BOOTSTRAP = Configuration(voters=frozenset({"n1", "n2", "n3"}))


def test_a_damaged_replica_opens_with_an_empty_log_and_its_vote_floor(tmp_path: Path) -> None:
    """The opener level: the damaged log is moved aside; the replica opens with an empty log,
    its term and vote, the configuration it opened with, and the vote floor (3, 10): the end
    of the damaged log, valid entries after the damage included. A restart keeps the floor."""

    async def scenario() -> None:
        node = _node(tmp_path)
        directory, damaged_file = _damaged_replica_dir(node)
        # a timer log's replica: its index was derived from the damaged log, so it goes (the
        # follower rebuilds it from the log the leader sends)
        (directory / INDEX_DIRECTORY).mkdir()
        (directory / INDEX_DIRECTORY / "state").write_bytes(b"an index of the damaged log")
        replica = await _open(node)
        assert not (directory / INDEX_DIRECTORY).exists(), "the damaged log's timer index"
        assert replica.segmented.last_index == 0
        assert replica.node.vote_floor == LogPosition(3, 10)
        assert (replica.node.term, replica.node.vote) == (4, "n2")
        assert replica.node.configuration == BOOTSTRAP  # its log holds none: see test_raft_rebuild
        assert (directory / "damaged-1" / damaged_file.name).exists()
        scrape = generate_latest(node.metrics.registry).decode()
        assert 'flotilla_replicas_rebuilt_total{node="n1"} 1.0' in scrape, scrape
        replica.close()
        again = await _open(node)
        assert again.node.vote_floor == LogPosition(3, 10)
        again.close()
        await node.multiraft.stop()

    asyncio.run(scenario())


def test_a_rebuild_a_crash_interrupted_is_finished_and_one_damaged_copy_is_kept(
    tmp_path: Path,
) -> None:
    """A crash after the marker was written, before the log was moved aside: the next open
    finishes the work with the same floor. An older damaged copy goes: one is kept."""

    async def scenario() -> None:
        node = _node(tmp_path)
        directory, damaged_file = _damaged_replica_dir(node)
        (directory / "damaged-4").mkdir()  # from an earlier rebuild
        (directory / "REBUILT").write_text("2 7\n")  # a floor saved then, below this one
        replica = await _open(node)
        assert replica.segmented.last_index == 0
        assert replica.node.vote_floor == LogPosition(3, 10)
        assert sorted(p.name for p in directory.iterdir() if p.name.startswith("damaged-")) == [
            "damaged-5"
        ]
        assert (directory / "damaged-5" / damaged_file.name).exists()
        replica.close()
        await node.multiraft.stop()

    asyncio.run(scenario())


def test_the_floor_covers_a_commit_index_the_damage_hid(tmp_path: Path) -> None:
    """The journal says entries up to 12 were committed, yet the damaged log's last valid entry
    is 10: the floor is the journal's (term, commit), since those entries' terms are unknown
    but no later than its term."""

    async def scenario() -> None:
        node = _node(tmp_path)
        _damaged_replica_dir(node)
        node.journal.save_many({"t/0": HardState(4, "n2", 12)})
        replica = await _open(node)
        assert replica.node.vote_floor == LogPosition(4, 12)
        replica.close()
        await node.multiraft.stop()

    asyncio.run(scenario())


def test_a_damaged_replica_without_peers_is_quarantined_and_left_as_it_is(tmp_path: Path) -> None:
    """Replication factor 1: nobody to rebuild it from, so moving its log aside would only
    leave the partition empty and leaderless. It is quarantined, its files untouched."""

    async def scenario() -> None:
        node = _node(tmp_path)
        directory, damaged_file = _damaged_replica_dir(node)
        before = damaged_file.read_bytes()
        alone = TopicSpec("t", 1, 1, assignment=(("n1",),))
        node.topics = {"t": alone}
        node.opener.queue(alone, 0, Configuration(voters=frozenset({"n1"})))
        await node.opener.open_pending()
        [quarantined] = node.multiraft.quarantine.entries()
        assert quarantined.group == "t/0" and "DamagedLog" in quarantined.reason
        assert damaged_file.read_bytes() == before
        assert not any(p.name.startswith("damaged-") for p in directory.iterdir())
        await node.multiraft.stop()

    asyncio.run(scenario())
