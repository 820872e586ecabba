"""A follower reset to its leader's log start (`LogReset`: the entries it needs were removed by
retention) keeps knowing the producers that wrote before that start: the reset carries the
leader's producer table as of the boundary, the follower loads it and saves it beside its reset
log, so a retry of a batch written before the boundary is still answered as a duplicate there —
also once that follower leads, and after it restarts. Without it the follower forgot every
producer, answered such a retry "unknown producer", and the SDK or a copier resent the batch
under a new producer id: written twice (Kafka carries producer state in snapshots, KIP-360).

Three MultiRaft hosts in one process, driven by hand round by round, their messages carried by
the test (dropped to a node taken down)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

from cluster.idempotence import Duplicate, Fresh, ProducerUnknown
from cluster.multiraft import MultiRaft, Proposal
from cluster.producer_snapshot import decode_snapshot
from cluster.producers import BatchRef
from cluster.replica import Replica, Waiter
from proto.records import encode_batch
from raft.codec import decode_message
from raft.config import RaftConfig
from raft.types import Configuration, LogReset, Role
from storage import FileHandles, HardState, LogConfig, StateJournal

GROUP = "t/0"
NODES = ("a", "b", "c")
PRODUCER = 77
FILLER = 78
VALUE = b"v" * 600


def _open(root: Path, node: str) -> Replica:
    return Replica.open(
        node_id=node,
        topic="t",
        partition=0,
        directory=str(root / node / "t" / "0"),
        bootstrap=Configuration(voters=frozenset(NODES)),
        hard_state=HardState(),
        raft_config=RaftConfig(),
        log_config=LogConfig(segment_bytes=4096),
        handles=FileHandles(16),
        rng=random.Random(NODES.index(node)),
    )


class Mesh:
    """Three hand-driven hosts; `down` nodes neither send nor receive."""

    def __init__(self, root: Path) -> None:
        self.outbox: list[tuple[str, str, str, bytes]] = []
        self.resets: list[LogReset] = []  # every reset sent to a node that was up
        self.down: set[str] = set()
        self.hosts: dict[str, MultiRaft] = {}
        self.replicas: dict[str, Replica] = {}
        self.now = 0.0
        for node in NODES:
            (root / node).mkdir()
            host = MultiRaft(node, self._sender(node), 0.05, StateJournal(root / node / "journal"))
            replica = _open(root, node)
            host.add(replica)
            self.hosts[node], self.replicas[node] = host, replica

    def _sender(self, node: str) -> Callable[[str, str, list[bytes]], None]:
        def send(to: str, group: str, parts: list[bytes]) -> None:
            self.outbox.append((node, to, group, b"".join(parts)))

        return send

    async def pump(self, rounds: int = 1, tick: bool = True) -> None:
        for _ in range(rounds):
            if tick:
                self.now += 0.05
                for node, host in self.hosts.items():
                    if node not in self.down:
                        host.tick(self.now)
            outbox, self.outbox = self.outbox, []
            for sender, to, group, data in outbox:
                if sender not in self.down and to not in self.down:
                    message = decode_message(data)
                    if isinstance(message, LogReset):
                        self.resets.append(message)
                    self.hosts[to].deliver(sender, [(group, data)])
            for node, host in self.hosts.items():
                if node not in self.down:
                    await host.run_round()

    def leader(self) -> str | None:
        for node, replica in self.replicas.items():
            if node not in self.down and replica.node.role is Role.LEADER:
                return node
        return None

    async def until(self, condition: object, what: str, rounds: int = 2000) -> None:
        for _ in range(rounds):
            if condition():  # type: ignore[operator]
                return
            await self.pump()
        raise AssertionError(f"no {what} within {rounds} rounds")

    async def produce(self, leader: str, producer_id: int, sequence: int, count: int) -> None:
        replica = self.replicas[leader]
        batch = encode_batch(
            [(None, VALUE, None, 1_000)] * count, producer_id=producer_id, base_sequence=sequence
        )
        waiter = Waiter(asyncio.get_running_loop().create_future())
        self.hosts[leader].propose(
            Proposal(replica, batch, count, 1_000, waiter, producer_id, sequence)
        )
        await self.until(waiter.future.done, f"batch {producer_id}/{sequence} to commit")
        waiter.future.result()

    async def stop(self) -> None:
        hosts, self.hosts = self.hosts, {}
        for host in hosts.values():
            await host.stop()


def test_a_follower_reset_past_a_producers_batches_still_knows_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        mesh = Mesh(tmp_path)
        try:
            await mesh.until(lambda: mesh.leader() is not None, "leader")
            leader = mesh.leader()
            assert leader is not None
            behind = next(n for n in NODES if n != leader)
            await mesh.produce(leader, PRODUCER, 0, 3)  # every replica holds it
            await mesh.pump(5)
            mesh.down.add(behind)
            await mesh.produce(leader, PRODUCER, 3, 2)  # written while `behind` is down
            for sequence in range(0, 40, 2):  # fills segments past both batches
                await mesh.produce(leader, FILLER, sequence, 2)
            term = mesh.replicas[leader].node.term
            # the producer's latest batch sits in sealed segments retention removes
            for node in NODES:
                if node != behind:
                    replica = mesh.replicas[node]
                    replica.log.compact(replica.segmented.cut_keeping(replica.log.last_index))
                    assert replica.segmented.first_index > 3, "the batch was not cut away"
            follower = mesh.replicas[behind]
            assert follower.log.last_index < mesh.replicas[leader].segmented.first_index - 1

            mesh.down.discard(behind)
            await mesh.until(
                lambda: follower.log.last_index == mesh.replicas[leader].log.last_index,
                "the follower to be reset and catch up",
            )
            assert follower.segmented.first_index == mesh.replicas[leader].segmented.first_index
            # what was sent: the table as of the boundary, nothing written after it (a batch
            # after it may yet be cut by another leader; the follower learns those from the log)
            assert mesh.resets, "the follower was not reset"
            sent = decode_snapshot(mesh.resets[-1].state)
            assert (sent.index, sent.term) == (
                mesh.resets[-1].boundary.index,
                mesh.resets[-1].boundary.term,
            )
            sequences = {pid: [b[0] for b in batches] for pid, batches in sent.dumped}
            indexes = [b[1] for _, batches in sent.dumped for b in batches]
            assert sequences[PRODUCER] == [0, 3], sequences
            assert max(indexes) <= sent.index, indexes
            leader_table = mesh.replicas[leader].idempotence.table
            latest = leader_table.lookup(FILLER, 38)
            assert latest is not None and latest.index > sent.index  # there was more to leave
            idempotence = follower.idempotence
            # the retry of the batch written before the boundary: its first copy's place
            assert isinstance(idempotence.admit(PRODUCER, 3, 2, term + 1), Duplicate)
            assert isinstance(idempotence.admit(PRODUCER, 5, 1, term + 1), Fresh)
            assert isinstance(idempotence.admit(FILLER, 40, 1, term + 1), Fresh)
            await mesh.stop()

            # and after a restart: the table was saved with the reset log
            reopened = _open(tmp_path, behind)
            try:
                verdict = reopened.idempotence.admit(PRODUCER, 3, 2, term + 1)
                assert isinstance(verdict, Duplicate), verdict
                assert not isinstance(
                    reopened.idempotence.admit(PRODUCER, 5, 1, 9), ProducerUnknown
                )
            finally:
                reopened.close()
        finally:
            await mesh.stop()

    asyncio.run(scenario())


def test_the_table_sent_with_a_reset_fits_a_raft_message_keeping_the_latest_producers(
    tmp_path: Path,
) -> None:
    """A table larger than a Raft message (`max_msg_bytes`) is sent without the producers
    written longest ago (to the follower they are as if evicted), never as a message a peer
    would refuse."""
    replica = Replica.open(
        node_id="a", topic="t", partition=0, directory=str(tmp_path / "t" / "0"),
        bootstrap=Configuration(voters=frozenset(NODES)), hard_state=HardState(),
        raft_config=RaftConfig(max_msg_bytes=16 * 1024), log_config=LogConfig(),
        handles=FileHandles(16), rng=random.Random(1),
    )  # fmt: skip
    try:
        for producer in range(1, 2001):  # in log order: producer 2000 wrote last
            for sequence in range(0, 8, 2):
                replica.idempotence.written(
                    producer, sequence, BatchRef(producer * 4 + sequence, 1, 2, 1_000)
                )
        state = replica.boundary_state(10_000, 1)
        assert len(state) <= 16 * 1024
        sent = decode_snapshot(state)
        producers = [pid for pid, _ in sent.dumped]
        assert 200 < len(producers) < 2000, len(producers)
        assert producers == list(range(2001 - len(producers), 2001))  # the latest ones
        small = replica.boundary_state(11, 1)  # only what is up to the boundary
        assert [pid for pid, _ in decode_snapshot(small).dumped] == [1, 2]
    finally:
        replica.close()
