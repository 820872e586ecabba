"""The client's view of the cluster (`Router`): members, topics and leaders from metadata
responses, where a produce or read goes, which partition a record takes, and the offsets this
client saw acknowledged (read-your-writes).

No I/O here: both clients feed it metadata responses and ask it where to send things.
Thread-safe: the sync client's threads and the batching producer share one.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Sequence

import msgpack
import xxhash

from flotilla._delays import TIMER_LOG_REFRESH_S, TIMER_TOPIC_PREFIX
from flotilla._sequences import Sequences
from flotilla.errors import InvalidArgument, TopicNotFound
from flotilla.types import Headers, Member, PartitionInfo, Record, TopicInfo
from proto import flotilla_pb2 as pb
from proto.records import (
    BATCH_HEADER_SIZE,
    InvalidBatch,
    encode_batch,
    peek_record_count,
    read_header,
    with_producer,
)

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "Router",
    "decode_fetch",
    "decode_records",
    "member",
    "topic_info",
]

# A node's max_batch_bytes unless configured otherwise; each reports its own in metadata.
DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024


def topic_info(message: pb.TopicInfo) -> TopicInfo:
    """The SDK type of a topic as a node reported it."""
    return TopicInfo(
        message.name,
        tuple(
            PartitionInfo(
                p.index,
                p.leader,
                tuple(p.replicas),
                p.high_watermark,
                p.log_start,
                p.pending_timers,
                not p.pending_timers_unknown,
            )
            for p in message.partitions
        ),
        message.replication_factor,
        message.retention_bytes,
        message.retention_ms,
        message.uid,
        message.note,
        message.max_delay_ms,
    )


def _older(info: TopicInfo, known: TopicInfo) -> bool:
    """Is `info` (from a node whose view lags) an earlier state of the topic than `known`? A
    topic's partitions are only ever added, so fewer of the same incarnation are older."""
    return bool(info.uid) and info.uid == known.uid and len(info.partitions) < len(known.partitions)


def member(message: pb.Member) -> Member:
    """The SDK type of a member as a node reported it."""
    return Member(
        message.id,
        message.address,
        pb.MemberState.Name(message.state),
        message.weight,
        message.rack,
    )


def decode_records(data: bytes, base_offset: int, topic: str, partition: int) -> list[Record]:
    """The records of one stored batch of `topic`/`partition` (as `proto.records.decode_batch`,
    straight into the SDK's `Record`, which names where it was read). InvalidBatch if
    malformed."""
    header = read_header(data)
    try:
        rows = msgpack.unpackb(memoryview(data)[BATCH_HEADER_SIZE:], raw=False)
        first = header.first_timestamp_ms
        return [
            Record(
                base_offset + position,
                key,
                value,
                tuple((name, data) for name, data in headers),
                first + delta,
                topic,
                partition,
            )
            for position, (key, value, headers, delta) in enumerate(rows)
        ]
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise InvalidBatch(f"batch body is not a list of records: {error}") from None


def decode_fetch(
    response: pb.FetchResponse, offset: int, max_records: int, topic: str = "", partition: int = -1
) -> list[Record]:
    """The records of a Fetch answer of `topic`/`partition` from `offset` on, at most
    `max_records`."""
    records: list[Record] = []
    for batch in response.batches:
        for record in decode_records(batch.data, batch.base_offset, topic, partition):
            if record.offset >= offset:
                records.append(record)
    return records[:max_records]


class Router:
    """Metadata cache and routing decisions (thread-safe)."""

    def __init__(self, bootstrap: Sequence[str]) -> None:
        if not bootstrap:
            raise InvalidArgument("give at least one bootstrap address, e.g. '127.0.0.1:7001'")
        self.bootstrap = list(bootstrap)
        self.sequences = Sequences()
        self._lock = threading.Lock()
        self._addresses: dict[str, str] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._leaders: dict[tuple[str, int], str] = {}
        self._round_robin = itertools.count(random.randrange(1 << 16))
        self._written: dict[tuple[str, int], int] = {}  # offset after our last acked batch
        self._batch_limits: dict[str, int] = {}  # member id -> its max_batch_bytes
        # the largest produce batch every member heard from accepts (see `absorb`)
        self.max_batch_bytes = DEFAULT_MAX_BATCH_BYTES
        self.refreshed_at = 0.0
        self._timer_logs_asked: dict[str, float] = {}  # timer log -> when its metadata was asked
        # topic -> incarnations this client deleted: a node that has not caught up with the
        # deletion still reports one, and its metadata of that topic is passed over
        self._deleted: dict[str, set[str]] = {}

    # -- read-your-writes -------------------------------------------------------------------------
    def note_written(self, topic: str, partition: int, base_offset: int, batch: bytes) -> None:
        """Remembers the end of a batch this client saw acknowledged: reads of the partition
        ask any replica to have committed at least that far (`written_to`)."""
        end = base_offset + peek_record_count(batch)
        key = (topic, partition)
        with self._lock:
            if end > self._written.get(key, 0):
                self._written[key] = end

    def written_to(self, topic: str, partition: int) -> int:
        return self._written.get((topic, partition), 0)

    # -- metadata ---------------------------------------------------------------------------------
    def absorb(self, response: pb.MetadataResponse) -> None:
        with self._lock:
            for m in response.members:
                if m.state in (pb.ALIVE, pb.SUSPECT):
                    self._addresses[m.id] = m.address
            if response.max_batch_bytes and response.node_id:
                self._batch_limits[response.node_id] = response.max_batch_bytes
                self.max_batch_bytes = min(self._batch_limits.values())
            for message in response.topics:
                info = topic_info(message)
                if self.deleted(info.name, info.uid):
                    continue  # from a node that has not caught up with our deletion
                known = self._topics.get(info.name)
                if known is None or not _older(info, known):
                    self._topics[info.name] = info
                for p in info.partitions:
                    if p.leader:
                        self._leaders[(info.name, p.index)] = p.leader
            self.refreshed_at = time.monotonic()

    def forget_topic(self, name: str) -> None:
        with self._lock:
            deleted = self._topics.pop(name, None)
            if deleted is not None and deleted.uid:
                self._deleted.setdefault(name, set()).add(deleted.uid)
            for key in [key for key in self._written if key[0] == name]:
                del self._written[key]  # a topic created again under the name starts at 0
            for key in [key for key in self._leaders if key[0] == name]:
                del self._leaders[key]  # the deleted incarnation's leaders lead nothing now

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def deleted(self, name: str, uid: str) -> bool:
        """Did this client delete incarnation `uid` of the topic?"""
        return bool(uid) and uid in self._deleted.get(name, ())

    def topic_uid(self, name: str) -> str:
        """The incarnation of the topic this client's metadata names ("" when unknown): every
        produce and read carries it, and no replica of another incarnation answers them."""
        info = self._topics.get(name)
        return info.uid if info is not None else ""

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

    def timer_log(self, topic: str) -> str | None:
        """The name of the topic's timer log (None: the topic is not known here)."""
        info = self._topics.get(topic)
        return TIMER_TOPIC_PREFIX + info.uid if info is not None and info.uid else None

    def delayed_address(self, topic: str, partition: int) -> str | None:
        """Where a delayed batch goes first: the known leader of its timer log partition, which
        appends it at once (any other node forwards it there, one batch at a time); None when
        no leader of it is known here (the source partition's leader is asked instead)."""
        log = self.timer_log(topic)
        leader = self._leaders.get((log, partition)) if log is not None else None
        return self._addresses.get(leader) if leader else None

    def timer_log_to_learn(self, topic: str) -> str | None:
        """The topic's timer log, when its metadata is due to be asked (never asked, or not
        for TIMER_LOG_REFRESH_S: its leaders move); None otherwise. Marks it asked."""
        log = self.timer_log(topic)
        now = time.monotonic()
        with self._lock:
            if log is None or now - self._timer_logs_asked.get(log, -1e9) < TIMER_LOG_REFRESH_S:
                return None
            self._timer_logs_asked[log] = now
        return log

    def other_replica(self, topic: str, partition: int, exclude: set[str]) -> str | None:
        """The address of a replica of the partition not in `exclude`: during a failover the
        survivors know the new leader first (they answer with a leader hint)."""
        info = self._topics.get(topic)
        if info is None or partition >= len(info.partitions):
            return None
        for replica in info.partitions[partition].replicas:
            address = self._addresses.get(replica)
            if address is not None and address not in exclude:
                return address
        return None

    def read_addresses(
        self, topic: str, partition: int, replica: str | None, followers_first: bool = False
    ) -> list[str]:
        """Replicas to read from, spread at random unless one is pinned; `followers_first`:
        the followers (at random) before the leader, so its disk and network stay free for
        writes (a queue's reads)."""
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
        if followers_first and replicas:
            leader = self._leaders.get((topic, partition))
            if leader is None and info is not None and partition < len(info.partitions):
                leader = info.partitions[partition].leader
            replicas.sort(key=lambda r: r == leader)  # stable: the followers stay shuffled
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
        *,
        delayed: bool = False,
    ) -> bytes:
        """The records as one batch under the partition's producer id and next sequence (of its
        delayed space if `delayed`: see `Sequences`), or InvalidArgument if it is larger than a
        node accepts (`check_fits`). Its size is checked before a sequence is taken: a batch
        never sent must leave no gap in the sequences."""
        batch = encode_batch(records)
        self.check_fits(len(batch), len(records))
        producer_id, sequence = self.sequences.take(topic, partition, len(records), delayed=delayed)
        return with_producer(batch, producer_id, sequence)

    def check_fits(self, size: int, count: int, what: str = "batch") -> None:
        """InvalidArgument, before anything is sent, for a batch of `size` bytes (`count`
        records) larger than `max_batch_bytes`, the smallest any node reports: the leader would
        refuse it, or gRPC would, before its handler (if it is more than 64 KiB over), with a
        message that names neither the batch's size nor the limit."""
        limit = self.max_batch_bytes
        if size > limit:
            records = "1 record" if count == 1 else f"{count} records"
            raise InvalidArgument(
                f"a {what} of {size} bytes ({records}, encoded) is larger than max_batch_bytes="
                f"{limit}, the largest batch the nodes accept; nothing was sent: make "
                f"{'it' if count == 1 else 'the batch or its records'} smaller"
            )
