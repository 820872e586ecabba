"""What the sync and asyncio clients share: types, partitioning, metadata caching, batching.

No I/O here: both clients feed it metadata responses and ask it where to send things.
"""

from __future__ import annotations

import itertools
import random
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import xxhash

from flotilla.errors import InvalidArgument, TopicNotFound
from proto import flotilla_pb2 as pb
from proto.records import Record, decode_batch, encode_batch

__all__ = [
    "Member",
    "PartitionInfo",
    "Record",
    "RecordMetadata",
    "Router",
    "TopicInfo",
    "decode_fetch",
]

Headers = Sequence[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    index: int
    leader: str
    replicas: tuple[str, ...]
    high_watermark: int
    log_start: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    replication_factor: int = 0


@dataclass(frozen=True, slots=True)
class Member:
    id: str
    address: str
    state: str
    weight: float
    rack: str


def topic_info(message: pb.TopicInfo) -> TopicInfo:
    return TopicInfo(
        message.name,
        tuple(
            PartitionInfo(p.index, p.leader, tuple(p.replicas), p.high_watermark, p.log_start)
            for p in message.partitions
        ),
        message.replication_factor,
    )


def member(message: pb.Member) -> Member:
    return Member(
        message.id,
        message.address,
        pb.MemberState.Name(message.state),
        message.weight,
        message.rack,
    )


def decode_fetch(response: pb.FetchResponse, offset: int, max_records: int) -> list[Record]:
    records: list[Record] = []
    for batch in response.batches:
        for record in decode_batch(batch.data, batch.base_offset):
            if record.offset >= offset:
                records.append(record)
    return records[:max_records]


@dataclass(slots=True)
class _Sequences:
    """Per-partition sequence numbers of this client's idempotent producer."""

    next: dict[tuple[str, int], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, topic: str, partition: int, count: int) -> int:
        with self.lock:
            key = (topic, partition)
            first = self.next.get(key, 0)
            self.next[key] = first + count
            return first


class Router:
    """Metadata cache and routing decisions (thread-safe)."""

    def __init__(self, bootstrap: Sequence[str]) -> None:
        if not bootstrap:
            raise InvalidArgument("give at least one bootstrap address, e.g. '127.0.0.1:7001'")
        self.bootstrap = list(bootstrap)
        self.producer_id = secrets.randbits(63) or 1
        self.sequences = _Sequences()
        self._lock = threading.Lock()
        self._addresses: dict[str, str] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._leaders: dict[tuple[str, int], str] = {}
        self._round_robin = itertools.count(random.randrange(1 << 16))
        self.refreshed_at = 0.0

    # -- metadata ---------------------------------------------------------------------------------
    def absorb(self, response: pb.MetadataResponse) -> None:
        with self._lock:
            for m in response.members:
                if m.state in (pb.ALIVE, pb.SUSPECT):
                    self._addresses[m.id] = m.address
            for message in response.topics:
                info = topic_info(message)
                self._topics[info.name] = info
                for p in info.partitions:
                    if p.leader:
                        self._leaders[(info.name, p.index)] = p.leader
            self.refreshed_at = time.monotonic()

    def forget_topic(self, name: str) -> None:
        with self._lock:
            self._topics.pop(name, None)

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def candidates(self) -> list[str]:
        """Addresses to ask for metadata: known members first, then the bootstrap list."""
        with self._lock:
            known = list(self._addresses.values())
        random.shuffle(known)
        return known + [a for a in self.bootstrap if a not in known]

    def address_of(self, member_id: str) -> str | None:
        return self._addresses.get(member_id)

    def note_leader(self, topic: str, partition: int, hint: str) -> None:
        """Follows a `flotilla-leader: id=host:port` hint."""
        member_id, _, address = hint.partition("=")
        if member_id and address:
            with self._lock:
                self._addresses[member_id] = address
                self._leaders[(topic, partition)] = member_id

    def forget_leader(self, topic: str, partition: int) -> None:
        with self._lock:
            self._leaders.pop((topic, partition), None)

    def leader_address(self, topic: str, partition: int) -> str | None:
        """Where to send a produce: the known leader, else the preferred replica."""
        leader = self._leaders.get((topic, partition))
        if leader is None:
            info = self._topics.get(topic)
            if (
                info is not None
                and partition < len(info.partitions)
                and info.partitions[partition].replicas
            ):
                leader = info.partitions[partition].replicas[0]
        return self._addresses.get(leader) if leader else None

    def read_addresses(self, topic: str, partition: int, replica: str | None) -> list[str]:
        """Replicas to read from, spread at random unless one is pinned."""
        info = self._topics.get(topic)
        if replica is not None:
            address = self._addresses.get(replica)
            if address is None:
                raise InvalidArgument(
                    f"replica {replica!r} is not a known member; known: {sorted(self._addresses)}"
                )
            return [address]
        replicas = (
            list(info.partitions[partition].replicas)
            if info and partition < len(info.partitions)
            else []
        )
        random.shuffle(replicas)
        addresses = [self._addresses[r] for r in replicas if r in self._addresses]
        return addresses or self.candidates()

    # -- partitioning -----------------------------------------------------------------------------
    def partition_for(self, topic: str, key: bytes | None, partition: int | None) -> int:
        info = self._topics.get(topic)
        if info is None:
            raise TopicNotFound(f"topic {topic!r} does not exist")
        count = len(info.partitions)
        if partition is not None:
            if not 0 <= partition < count:
                raise TopicNotFound(
                    f"partition {partition} of topic {topic!r} does not exist: valid partitions are 0..{count - 1}"
                )
            return partition
        if key is not None:
            return xxhash.xxh64_intdigest(key) % count
        return next(self._round_robin) % count

    def encode(
        self,
        topic: str,
        partition: int,
        records: Sequence[tuple[bytes | None, bytes, Headers | None, int]],
    ) -> bytes:
        sequence = self.sequences.take(topic, partition, len(records))
        return encode_batch(records, producer_id=self.producer_id, base_sequence=sequence)


def check_value(value: object, what: str = "value") -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgument(f"{what} must be bytes, not {type(value).__name__}")
    return bytes(value)


def now_ms() -> int:
    return int(time.time() * 1000)
