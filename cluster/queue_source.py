"""What a queue's coordinator reads of a source topic, through the node's own read path:

- `extents`: each partition's (log start, high watermark), from this node's replica when it
  has one (its committed high watermark never exceeds the leader's), else from the node's
  metadata view (asked at most every `EXTENT_TTL_S` per topic, shared by concurrent receives);
- `keys`: the keys of a window of offsets (key ordering), decoding only the keys;
- `record`: one committed record (a dead letter's copy), or None when retention deleted it.

Reads are of committed data only: a local replica's `read_committed` (in a thread: never on
the event loop), else a Fetch to a replica of the partition, followers first and the leader
last (so the leader's disk and network stay free for writes). Every read is of one topic
incarnation (the caller's, else the one this node knows): a local replica of another is passed
over, and the Fetch names it (`topic_uid`), so no replica of a deleted incarnation answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

import grpc
import msgpack

from cluster.controller import TopicSpec
from cluster.errors import ClusterError
from cluster.replica import Replica
from consumers.queue_types import Extent
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import BATCH_HEADER_SIZE, Record, decode_batch
from storage import LogClosed, OffsetOutOfRange

__all__ = ["EXTENT_TTL_S", "SourceReader", "SourceUnavailable", "keys_of"]

log = logging.getLogger("flotilla.queues")

# How long a topic's extents from the metadata view (partitions with no local replica) are used.
EXTENT_TTL_S = 0.1
# How much one read of a window of keys, or of one record, asks for.
KEYS_READ_BYTES = 4 * 1024 * 1024
RECORD_READ_BYTES = 1024 * 1024
FETCH_TIMEOUT_S = 5.0

Stub = flotilla_pb2_grpc.FlotillaStub


class SourceUnavailable(ClusterError):
    """No replica of the partition answered the read; retry later."""


def keys_of(batch: bytes, base_offset: int, wanted: range) -> dict[int, bytes | None]:
    """The keys of the records of a stored batch whose offsets are in `wanted`, unpacking only
    the keys (values and headers are skipped, not copied)."""
    found: dict[int, bytes | None] = {}
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(memoryview(batch)[BATCH_HEADER_SIZE:])
    count = unpacker.read_array_header()
    for position in range(count):
        offset = base_offset + position
        if offset >= wanted.stop:
            break
        unpacker.read_array_header()  # [key, value, headers, timestamp delta]
        if offset >= wanted.start:
            found[offset] = unpacker.unpack()
        else:
            unpacker.skip()
        unpacker.skip()
        unpacker.skip()
        unpacker.skip()
    return found


class SourceReader:
    def __init__(
        self,
        *,
        topics: Callable[[], Mapping[str, TopicSpec]],
        replica: Callable[[str], Replica | None],
        metadata: Callable[[list[str]], Awaitable[pb.MetadataResponse]],
        stub: Callable[[str], Stub | None],
    ) -> None:
        """`stub(member id)`: a client stub of that member (None: its address is unknown)."""
        self._topics = topics
        self._replica = replica
        self._metadata = metadata
        self._stub = stub
        # topic -> (monotonic time asked, the answer's partitions)
        self._views: dict[str, tuple[float, dict[int, pb.PartitionInfo]]] = {}
        self._asking: dict[str, asyncio.Task[dict[int, pb.PartitionInfo]]] = {}

    # -- extents ------------------------------------------------------------------------------
    async def extents(self, topic: str) -> dict[tuple[str, int], Extent]:
        """(log start, high watermark) of each partition of `topic` that is known."""
        spec = self._topics().get(topic)
        if spec is None:
            return {}
        extents: dict[tuple[str, int], Extent] = {}
        missing = []
        for partition in range(spec.partitions):
            local = self._replica(f"{topic}/{partition}")
            if local is not None:
                with_log = local.segmented
                extents[(topic, partition)] = Extent(with_log.first_offset, local.high_watermark)
            else:
                missing.append(partition)
        if missing:
            view = await self._view(topic)
            for partition in missing:
                info = view.get(partition)
                if info is not None and (info.leader or info.high_watermark):
                    extents[(topic, partition)] = Extent(info.log_start, info.high_watermark)
        return extents

    async def _view(self, topic: str, fresh: bool = False) -> dict[int, pb.PartitionInfo]:
        cached = self._views.get(topic)
        if not fresh and cached is not None and time.monotonic() - cached[0] < EXTENT_TTL_S:
            return cached[1]
        task = self._asking.get(topic)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._ask(topic))
            self._asking[topic] = task
        return await asyncio.shield(task)

    async def _ask(self, topic: str) -> dict[int, pb.PartitionInfo]:
        asked = time.monotonic()
        response = await self._metadata([topic])
        view = {
            info.index: info for t in response.topics if t.name == topic for info in t.partitions
        }
        self._views[topic] = (asked, view)
        return view

    def known_leader(self, topic: str, partition: int) -> str | None:
        """The partition's leader as this node's replica of it knows it (None: no replica here,
        or it knows none): no I/O, for a wait that watches for a new leader."""
        local = self._replica(f"{topic}/{partition}")
        return local.node.leader_id if local is not None else None

    async def leader(self, topic: str, partition: int, fresh: bool = False) -> str | None:
        """The partition's leader as this node's replica knows it, else as the metadata view
        says (`fresh`: the view first, asked anew)."""
        local = self._replica(f"{topic}/{partition}")
        known = local.node.leader_id if local is not None else None
        if known and not fresh:
            return known
        info = (await self._view(topic, fresh=fresh)).get(partition)
        return (info.leader if info is not None else "") or known or None

    # -- reads ----------------------------------------------------------------------------------
    async def keys(self, topic: str, partition: int, window: range) -> dict[int, bytes | None]:
        """The keys of the offsets of `window` that could be read (fewer if some could not)."""
        found: dict[int, bytes | None] = {}
        offset = window.start
        while offset < window.stop:
            batches = await self._read(
                topic, partition, offset, window.stop - offset, KEYS_READ_BYTES
            )
            if not batches:
                break
            for batch in batches:
                found.update(keys_of(batch.data, batch.base_offset, range(offset, window.stop)))
            last = batches[-1]
            if last.base_offset + last.record_count <= offset:
                break
            offset = last.base_offset + last.record_count
        return found

    async def record(
        self, topic: str, partition: int, offset: int, topic_uid: str = ""
    ) -> Record | None:
        """The committed record at `offset` of incarnation `topic_uid` ("": the one this node
        knows); None when it is below the partition's log start (deleted by retention). Raises
        `SourceUnavailable` when no replica serves it now."""
        batches = await self._read(topic, partition, offset, 1, RECORD_READ_BYTES, topic_uid)
        if not batches:
            return None
        for batch in batches:
            if batch.base_offset <= offset < batch.base_offset + batch.record_count:
                for record in decode_batch(batch.data, batch.base_offset):
                    if record.offset == offset:
                        return record
        raise SourceUnavailable(f"{topic}/{partition} offset {offset} is not readable yet")

    async def _read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int,
        max_bytes: int,
        topic_uid: str = "",
    ) -> list[pb.StoredBatch]:
        """Committed batches from `offset` of incarnation `topic_uid` ("": the one this node
        knows); [] for an offset below the log start (deleted)."""
        if not topic_uid:
            spec = self._topics().get(topic)
            topic_uid = spec.uid if spec is not None else ""
        local = self._replica(f"{topic}/{partition}")
        if local is not None and topic_uid and local.topic_uid and local.topic_uid != topic_uid:
            local = None  # a replica of another incarnation: never read
        if local is not None and offset < local.high_watermark:
            try:
                if offset < local.segmented.first_offset:
                    return []
                return await asyncio.to_thread(local.read_committed, offset, max_records, max_bytes)
            except OffsetOutOfRange:
                return []
            except LogClosed:
                pass  # closed meanwhile (moved away, deleted): ask the other replicas
        view = await self._view(topic, fresh=True)
        info = view.get(partition)
        if info is None:
            raise SourceUnavailable(f"{topic}/{partition} is not known to the metadata view")
        replicas = sorted(info.replicas, key=lambda r: r == info.leader)  # followers first
        errors = []
        request = pb.FetchRequest(
            topic=topic, partition=partition, offset=offset, max_records=max_records,
            max_bytes=max_bytes, topic_uid=topic_uid,
        )  # fmt: skip
        for member_id in replicas:
            stub = self._stub(member_id)
            if stub is None:
                continue
            try:
                response = await stub.Fetch(request, timeout=FETCH_TIMEOUT_S)
            except grpc.aio.AioRpcError as error:
                if error.code() is grpc.StatusCode.OUT_OF_RANGE:
                    # below the log start: offsets read here were all committed (below a high
                    # watermark), and a replica answers OUT_OF_RANGE above it only for offsets
                    # past what its leader committed
                    return []
                errors.append(f"{member_id}: {error.code().name} {error.details()}")
                continue
            if offset < response.log_start:
                return []
            if response.batches:
                return list(response.batches)
            errors.append(f"{member_id}: nothing at {offset} yet")
        raise SourceUnavailable(
            f"no replica of {topic}/{partition} served offset {offset} ({'; '.join(errors)})"
        )
