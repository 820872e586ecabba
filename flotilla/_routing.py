"""What the sync and asyncio clients share: types, partitioning, metadata caching, batching.

No I/O here: both clients feed it metadata responses and ask it where to send things.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import grpc
import xxhash

from flotilla._sequences import ProducerGap, Sequences
from flotilla.errors import (
    FlotillaError,
    InvalidArgument,
    NotLeader,
    OutOfOrder,
    Overloaded,
    Timeout,
    TopicNotFound,
    Unavailable,
    UnknownProducer,
)
from proto import flotilla_pb2 as pb
from proto.records import Record, decode_batch, encode_batch, peek_record_count, with_producer

__all__ = [
    "Member",
    "NoNodeAnswers",
    "Once",
    "PartitionInfo",
    "ProduceRoute",
    "ProducerGap",
    "Record",
    "RecordMetadata",
    "Router",
    "TopicInfo",
    "decode_fetch",
]

Headers = Sequence[tuple[str, bytes]]
RETRIABLE = (NotLeader, Unavailable, Timeout)
# A node's max_batch_bytes unless configured otherwise; each reports its own in metadata.
DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024
METADATA_GRACE_S = 3.0  # how long a topic just created may be unknown to a node
MAX_BACKOFF_S = 0.05  # a failover ends within about an election timeout: poll soon after
# an overloaded node (its produce gate full) is left alone longer: retrying at the failover pace
# would add to its load, and the retries of many clients are spread by the jitter
MAX_OVERLOAD_BACKOFF_S = 1.0
MAX_HINT_HOPS = 3  # leader hints followed in a row before pausing (stale views can bounce)
ATTEMPT_S = 2.0  # one attempt's deadline: a leader that hangs (paused, overloaded) is left soon
# A subscription's stream carries a keepalive after this long without records (its max_wait_ms),
# and moves to another replica when it has heard nothing for `idle_timeout_s` (default below:
# a few keepalives, so a busy node's late keepalive is not taken for a stalled one).
SUBSCRIBE_KEEPALIVE_MS = 1000
SUBSCRIBE_IDLE_TIMEOUT_S = 5.0


class RecordMetadata(NamedTuple):
    """Where a record was written. A named tuple (as kafka-python's): immutable, and made in
    a fraction of a frozen dataclass's time — the producer makes one per record."""

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
    retention_bytes: int = 0  # 0: unlimited
    retention_ms: int = 0  # 0: unlimited
    uid: str = ""  # this incarnation: a topic deleted and created again gets another
    note: str = ""  # create_topic's answer only: e.g. a default replication factor lowered


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
        message.retention_bytes,
        message.retention_ms,
        message.uid,
        message.note,
    )


def _older(info: TopicInfo, known: TopicInfo) -> bool:
    """Is `info` (from a node whose view lags) an earlier state of the topic than `known`? A
    topic's partitions are only ever added, so fewer of the same incarnation are older."""
    return bool(info.uid) and info.uid == known.uid and len(info.partitions) < len(known.partitions)


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
                known = self._topics.get(info.name)
                if known is None or not _older(info, known):
                    self._topics[info.name] = info
                for p in info.partitions:
                    if p.leader:
                        self._leaders[(info.name, p.index)] = p.leader
            self.refreshed_at = time.monotonic()

    def forget_topic(self, name: str) -> None:
        with self._lock:
            self._topics.pop(name, None)
            for key in [key for key in self._written if key[0] == name]:
                del self._written[key]  # a topic created again under the name starts at 0

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def watch_unreachable(self) -> NoNodeAnswers:
        """A watch for one call over `candidates()` that gives up when none can be reached."""
        return NoNodeAnswers()

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
        """The records as one batch under the partition's producer id and next sequence, or
        InvalidArgument if it is larger than a node accepts (`check_fits`). Its size is checked
        before a sequence is taken: a batch never sent must leave no gap in the sequences."""
        batch = encode_batch(records)
        self.check_fits(len(batch), len(records))
        producer_id, sequence = self.sequences.take(topic, partition, len(records))
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


def check_value(value: object, what: str = "value") -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgument(f"{what} must be bytes, not {type(value).__name__}")
    return bytes(value)


def create_request(
    name: str, partitions: int, replication_factor: int, retention_bytes: int, retention_ms: int
) -> pb.CreateTopicRequest:
    return pb.CreateTopicRequest(
        name=name,
        partitions=_unsigned("partitions", partitions, 32),
        replication_factor=_unsigned("replication_factor", replication_factor, 32),
        retention_bytes=_unsigned("retention_bytes", retention_bytes, 64),
        retention_ms=_unsigned("retention_ms", retention_ms, 64),
    )


def alter_request(
    name: str, partitions: int | None, retention_bytes: int | None, retention_ms: int | None
) -> pb.AlterTopicRequest:
    """A topic change: None leaves a setting as it is; retention 0 makes it unlimited."""
    if partitions is None and retention_bytes is None and retention_ms is None:
        raise InvalidArgument(
            f"altering topic {name!r} needs partitions, retention_bytes or retention_ms"
        )
    request = pb.AlterTopicRequest(name=name)
    if partitions is not None:
        request.partitions = _unsigned("partitions", partitions, 32)
    if retention_bytes is not None:
        request.retention_bytes = _unsigned("retention_bytes", retention_bytes, 64)
    if retention_ms is not None:
        request.retention_ms = _unsigned("retention_ms", retention_ms, 64)
    return request


def _unsigned(what: str, value: object, bits: int) -> int:
    if type(value) is not int or not 0 <= value < 1 << bits:
        raise InvalidArgument(
            f"{what}={value!r} is invalid: use an integer from 0 to {(1 << bits) - 1}"
        )
    return value


def check_record(
    value: object, key: object, headers: object
) -> tuple[bytes, bytes | None, list[tuple[str, bytes]] | None]:
    """A record's value, key and headers as the SDK takes them, or InvalidArgument naming the
    bad one: value and key bytes (key None: no key), headers (name: str, value: bytes) pairs."""
    return (
        value if type(value) is bytes else check_value(value),
        key if key is None or type(key) is bytes else check_value(key, "key"),
        check_headers(headers) if headers else None,
    )


def check_headers(headers: object) -> list[tuple[str, bytes]]:
    pairs: list[tuple[str, bytes]] = []
    if isinstance(headers, str | bytes | bytearray | memoryview | dict) or not hasattr(
        headers, "__iter__"
    ):
        raise InvalidArgument(
            f"headers must be a sequence of (name: str, value: bytes) pairs, not "
            f"{type(headers).__name__}"
        )
    for header in headers:
        if (
            not isinstance(header, tuple | list)
            or len(header) != 2
            or not isinstance(header[0], str)
            or not isinstance(header[1], bytes | bytearray | memoryview)
        ):
            shown = repr(header)
            shown = shown if len(shown) <= 60 else shown[:60] + "..."
            raise InvalidArgument(
                f"header {shown} is invalid: each header is a (name: str, value: bytes) pair"
            )
        pairs.append((header[0], bytes(header[1])))
    return pairs


def check_read(offset: object, max_records: object = 1) -> None:
    """InvalidArgument naming a bad read offset (0 to 2**64 - 1) or max_records (1 to
    2**32 - 1); nothing is sent."""
    _unsigned("offset", offset, 64)
    if type(max_records) is not int or not 1 <= max_records < 1 << 32:
        raise InvalidArgument(
            f"max_records={max_records!r} is invalid: use an integer from 1 to {(1 << 32) - 1}"
        )


def check_idle_timeout(idle_timeout_s: object) -> float:
    if not isinstance(idle_timeout_s, int | float) or not idle_timeout_s > 0:
        raise InvalidArgument(
            f"idle_timeout_s={idle_timeout_s!r} is invalid: use a number of seconds > 0 (a few "
            f"keepalive intervals of {SUBSCRIBE_KEEPALIVE_MS} ms; default "
            f"{SUBSCRIBE_IDLE_TIMEOUT_S})"
        )
    return float(idle_timeout_s)


def subscribe_address(addresses: Sequence[str], avoid: set[str]) -> str:
    """Where a subscription (re)connects: a replica at random, not one that just failed it
    (stalled, lagging or closed) while another is left."""
    fresh = [address for address in addresses if address not in avoid]
    return random.choice(fresh or list(addresses))


def now_ms() -> int:
    return int(time.time() * 1000)


def worth_retrying(error: FlotillaError, grace_until: float) -> bool:
    """A failure another attempt may cure: a retriable one, or a node answering that a topic this
    client knows does not exist, within `METADATA_GRACE_S` of the call (its metadata lags)."""
    if isinstance(error, RETRIABLE):
        return True
    return isinstance(error, TopicNotFound) and time.monotonic() < grace_until


# How long a replica behind a read's `min_high_watermark` may wait for its high watermark to get
# there (the node's READ_YOUR_WRITES_WAIT_S): the client's read deadline includes it.
RYW_WAIT_S = 0.5


class ReadYourWrites:
    """Which replica's answer a read takes: the first that has committed everything this client
    saw acknowledged (`wanted`) and, if it has nothing at `offset`, is the leader (a follower's
    high watermark may trail: another client's acknowledged record may be there already); a
    pinned read takes its replica's answer as it is. If no replica's answer qualifies, the most
    advanced one (`best`) is served: a read never fails for it."""

    __slots__ = ("best", "offset", "pinned", "wanted")

    def __init__(self, wanted: int, *, pinned: bool, offset: int = 0) -> None:
        self.wanted = wanted
        self.pinned = pinned
        self.offset = offset
        self.best: pb.FetchResponse | None = None

    def accept(self, response: pb.FetchResponse) -> bool:
        at_tail = response.high_watermark <= self.offset and not response.leader
        if self.pinned or (response.high_watermark >= self.wanted and not at_tail):
            return True
        if self.best is None or response.high_watermark > self.best.high_watermark:
            self.best = response
        return False


class Once:
    """Calls `callback` (if any) the first time it is called; `done` afterwards."""

    __slots__ = ("callback", "done")

    def __init__(self, callback: Callable[[], None] | None) -> None:
        self.callback = callback
        self.done = callback is None

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            assert self.callback is not None
            self.callback()


class ProduceRoute:
    """Where one batch goes next, across its retries (the policy both clients share).

    The known leader first. When a node fails to take the batch without naming the leader (it
    is down, or no leader is elected yet), the partition's other replicas are asked in turn at
    once — the survivors learn a new leader first and answer with its name; only when every
    replica has failed does the caller pause (jittered, doubling up to `MAX_BACKOFF_S`) and
    refresh metadata. Non-retriable errors raise; the deadline raises the last error seen."""

    def __init__(
        self,
        router: Router,
        topic: str,
        partition: int,
        timeout_s: float,
        abandoned: Callable[[], bool] | None = None,
    ) -> None:
        self.router = router
        self.batch = (0, 0)  # (producer id, first sequence) of the batch: `ProducerGap` needs it
        # says when an earlier batch of the same producer id failed for good: then a refusal as
        # out of order is final (the gap will never be filled), not a reason to wait
        self.abandoned = abandoned
        self.topic = topic
        self.partition = partition
        self.deadline = time.monotonic() + timeout_s
        self.grace_until = time.monotonic() + METADATA_GRACE_S
        self.backoff = 0.01
        self.last: FlotillaError | None = None
        self.pauses = 0
        self._failed: set[str] = set()
        self._hops = 0

    def remaining(self) -> float:
        """Seconds left before the deadline; raises the last error (or Timeout) once it passed."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise self.last or Timeout(f"produce to {self.topic}/{self.partition} timed out")
        return remaining

    def attempt_s(self) -> float:
        """The deadline of the next attempt: at most `ATTEMPT_S`, so a leader that stopped
        answering without closing its connections (a paused process) costs one attempt, not
        the whole timeout; the retry then goes to the other replicas. Raises like `remaining`."""
        return min(self.remaining(), ATTEMPT_S)

    def next_address(self) -> str | None:
        address = self.router.leader_address(self.topic, self.partition)
        if address is None or address in self._failed:
            address = self.router.other_replica(self.topic, self.partition, self._failed)
        return address

    def failed(self, address: str, error: FlotillaError) -> bool:
        """Notes a failed attempt; True when another address should be tried at once. Raises
        the error when it is final, or ProducerGap when the batch is to move to a new id."""
        if not worth_retrying(error, self.grace_until):
            raise error
        self.last = error
        if isinstance(error, UnknownProducer | OutOfOrder):
            producer_id, sequence = self.batch
            earliest = self.router.sequences.earliest(
                self.topic, self.partition, producer_id, sequence
            )
        if isinstance(error, UnknownProducer):
            # while an earlier batch of the id is on its way (it may be the one that makes the
            # id known, resent under it), wait; once none is, move to a new id at once
            if earliest:
                raise ProducerGap(error)
            return False
        if isinstance(error, OutOfOrder):
            if self.abandoned is not None and self.abandoned():
                raise Unavailable(
                    f"an earlier batch to {self.topic}/{self.partition} failed for good, so this "
                    "one cannot follow it under the same producer id; it was not written by this "
                    "attempt (send it again)"
                ) from None
            if earliest:  # every earlier batch settled, yet the leader lacks one: acknowledged
                raise ProducerGap(error)  # by a leader alone (acks=leader) and lost with it
            return False  # an earlier batch is still on its way: pause, then the same leader
        if isinstance(error, Overloaded):
            return False  # the leader is still the place: back off, then ask it again
        if isinstance(error, NotLeader) and error.leader and self._hops < MAX_HINT_HOPS:
            self._hops += 1
            self.router.note_leader(self.topic, self.partition, error.leader)
            return True
        self.router.forget_leader(self.topic, self.partition)
        self._failed.add(address)
        return self.router.other_replica(self.topic, self.partition, self._failed) is not None

    def pause_s(self) -> float:
        """How long to wait before the next round of attempts."""
        self._failed.clear()
        self._hops = 0
        self.pauses += 1
        pause = min(self.backoff * random.uniform(0.5, 1.0), max(0.0, self.remaining()))
        overloaded = isinstance(self.last, Overloaded)
        self.backoff = min(
            self.backoff * 2, MAX_OVERLOAD_BACKOFF_S if overloaded else MAX_BACKOFF_S
        )
        return pause

    def refresh_due(self) -> bool:
        """Should the caller ask the cluster for fresh metadata before the next round? When
        the cached routes failed twice, unless the node refused for overload (it is the leader;
        more calls would only add to its load)."""
        return self.pauses > 1 and not isinstance(self.last, Overloaded)


# Every candidate refusing (or not resolving) for this long ends an admin call (`NoNodeAnswers`)
# instead of retrying for the client's whole timeout: a node restarting refuses for a moment,
# a cluster that is not there refuses for good.
UNREACHABLE_GIVE_UP_S = 2.0


def unreachable_reason(error: grpc.RpcError) -> str:
    """Why a call reached no server at all ("connection refused", "does not resolve"), or ""
    when a server may have seen it (it answered, or the call timed out on the way)."""
    code = error.code() if hasattr(error, "code") else None
    if code != grpc.StatusCode.UNAVAILABLE:
        return ""
    details = str((error.details() if hasattr(error, "details") else "") or "").lower()
    if "connection refused" in details:
        return "connection refused"
    if "errors resolving" in details or "dns resolution failed" in details:
        return "does not resolve"
    return ""


class NoNodeAnswers:
    """Watches one call's rounds over the candidate addresses (`Client._any_node`): once every
    address has failed without reaching a server in each round for `UNREACHABLE_GIVE_UP_S`,
    `round_done` returns the error to raise, naming every address and why."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}
        self._since: float | None = None
        self._tried: dict[str, str] = {}

    def failed(self, address: str, error: grpc.RpcError) -> None:
        self._reasons[address] = unreachable_reason(error)

    def round_done(self, addresses: Sequence[str], now: float) -> Unavailable | None:
        reasons, self._reasons = self._reasons, {}
        if not addresses or not all(reasons.get(a) for a in addresses):
            self._since = None
            return None
        self._tried.update(reasons)
        if self._since is None:
            self._since = now
        if now - self._since < UNREACHABLE_GIVE_UP_S:
            return None
        tried = ", ".join(f"{a} ({why})" for a, why in sorted(self._tried.items()))
        return Unavailable(
            f"no node answered; tried {tried} for {now - self._since:.1f} s: is the cluster "
            "running, and are these its addresses?"
        )
