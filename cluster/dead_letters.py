"""The dead-letter copier of one `__groups` partition's coordinator (`cluster.groups_slot` runs
it between rounds, so it only ever sees dead letters whose decision has committed).

For each (group, topic uid, partition), in sequence order, a job of
`Coordinator.queue_dead_letter_jobs()` is carried out so (DESIGN-25 "Dead letters, exactly once"):

1. the dead-letter topic is created if missing, with the source topic's partition count and
   replication factor, through the node's normal topic admin ("already exists" is fine);
2. the source record is read (committed: key, value, headers; `cluster.queue_source`);
3. one batch of one record is appended, acks=all, to dead-letter partition
   `job.partition % <its partition count>` through the node's normal produce path (a Produce to
   the partition's leader, this node included): the source's key, value and headers, its
   timestamp, and the headers `flotilla-dlq-topic`, `-partition`, `-offset`, `-deliveries`
   (ASCII decimal) and `-reason`, from the idempotent producer `job.producer_id` (epoch 0) at
   sequence `job.sequence`; the copy counts once the control plane, asked after it landed,
   still has that incarnation of the dead-letter topic (this node's table may have been stale
   and a node that had not seen a delete may have taken it into the deleted partition): if
   not, it is copied again, to the topic created anew;
4. the copies are reported with `Coordinator.queue_dead_lettered` (an entry, through a round),
   at least every `cluster.producers.WINDOW` copies of a stream: a dead-letter partition knows a
   repeat as a duplicate only among the producer's last WINDOW batches, so a successor never
   repeats more than that.

A coordinator that dies between 3 and 4 leaves the job pending in the log; its successor copies
again, and the dead-letter partition's idempotence table answers the repeat as a duplicate (the
first copy's offsets): the record lands there once.

A record that can no longer be copied (its topic deleted or recreated, or the record deleted by
retention before the copy) is reported as gone (`Coordinator.queue_dead_letter_gone`: settled as
deleted, counted apart), with a warning: there is nothing left to copy. Its sequence is never
sent, so the next copy is refused as out of order; so is any copy once the dead-letter partition
forgot the producer (a day without dead letters, the topic recreated, partitions added). A copy
refused so (ABORTED) goes again under a producer of its own, `rebased_producer_id(job)`, at
sequence 0: derived from the job alone, so a successor's repeat is a duplicate there too. Any
other failure is retried with backoff (1 s doubling to 30 s), logged once per job. Copies of different partitions run concurrently, at most `MAX_CONCURRENT_STREAMS`
at a time; everything runs on the event loop except the local reads (`asyncio.to_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from cluster.controller import TopicSpec
from cluster.coordinator_faults import NodeFaults
from cluster.copy_produce import CopyFailed, CopyProducer
from cluster.copy_produce import rebased_producer_id as rebased_id
from cluster.errors import TopicExists
from cluster.producers import WINDOW
from cluster.queue_source import Stub
from consumers.queue_types import DeadLetterJob
from proto import flotilla_pb2 as pb
from proto.records import Record, encode_batch

__all__ = ["DLQ_HEADERS", "DeadLetterCopier", "DeadLetterSink", "Sink", "dead_letter_batch"]

log = logging.getLogger("flotilla.queues")

DLQ_HEADERS = (
    "flotilla-dlq-topic",
    "flotilla-dlq-partition",
    "flotilla-dlq-offset",
    "flotilla-dlq-deliveries",
    "flotilla-dlq-reason",
)
MAX_CONCURRENT_STREAMS = 4
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0

StreamKey = tuple[str, str, int]  # (group, topic uid, partition)
# A copy's outcome that starts so: the source record is gone, there was nothing to copy.
GONE = "not copied"


def rebased_producer_id(job: DeadLetterJob) -> int:
    """The producer id a copy is sent under, at sequence 0, when the dead-letter partition
    refuses `job.producer_id` at `job.sequence`: it forgot the producer (a day without dead
    letters, its topic recreated, partitions added) or a sequence is missing (a gone record).
    Derived from the job alone, so a successor repeating the copy derives the same id and the
    partition answers the repeat as a duplicate. A copy the partition would know under the
    first id is never rebased: it is answered as a duplicate before any sequence check."""
    return rebased_id(job.producer_id, job.sequence)


def dead_letter_batch(job: DeadLetterJob, record: Record) -> bytes:
    """The one-record batch of `record`'s dead letter (earlier flotilla-dlq-* headers of the
    source are replaced, so a dead letter of a dead letter names its last source once)."""
    headers = [(name, data) for name, data in record.headers if name not in DLQ_HEADERS]
    headers += [
        ("flotilla-dlq-topic", job.topic.encode()),
        ("flotilla-dlq-partition", str(job.partition).encode()),
        ("flotilla-dlq-offset", str(job.offset).encode()),
        ("flotilla-dlq-deliveries", str(job.delivery_count).encode()),
        ("flotilla-dlq-reason", job.reason.encode()),
    ]
    return encode_batch(
        [(record.key, record.value, headers, record.timestamp_ms)],
        producer_id=job.producer_id,
        base_sequence=job.sequence,
    )


class DeadLetterSink:
    """Steps 1-3 over the node's own paths (topic admin, reads, produce)."""

    def __init__(
        self,
        *,
        topics: Callable[[], Mapping[str, TopicSpec]],
        create_topic: Callable[[pb.CreateTopicRequest], Awaitable[object]],
        refresh_topics: Callable[[], Awaitable[None]],
        latest_topic: Callable[[str], Awaitable[TopicSpec | None]],
        source: Source,
        stub: Callable[[str], Stub | None],
        copies: Copies | None = None,
    ) -> None:
        """`latest_topic(name)`: the topic as the control plane has it now, not as this
        node's table does (`cluster.topic_latest`). `copies`: what sends the copies (tests); by
        default a `CopyProducer` over the node's produce path."""
        self._topics = topics
        self._create_topic = create_topic
        self._refresh_topics = refresh_topics
        self._latest_topic = latest_topic
        self._source = source
        self._stub = stub
        self._copies = copies or CopyProducer(source.leader, stub, known_leader=source.known_leader)

    async def copy(self, job: DeadLetterJob) -> str:
        """Copies the job's record; says what happened (for the log), starting with `GONE`
        when there is nothing to copy any more."""
        source = self._topics().get(job.topic)
        if source is None or source.uid != job.topic_uid:
            return f"{GONE}: its topic was deleted (or recreated)"
        dead_letters = await self._ensure_topic(job.dead_letter_topic, source)
        record = await self._source.record(job.topic, job.partition, job.offset, job.topic_uid)
        if record is None:
            return f"{GONE}: retention deleted the record first"
        partition = job.partition % dead_letters.partitions
        batch = dead_letter_batch(job, record)
        # refused as out of sequence: again under `rebased_producer_id(job)` (`copy_produce`)
        response = await self._copies.copy(dead_letters.name, partition, batch, dead_letters.uid)
        # this node's table may have held a dead-letter topic the controllers deleted (it polls
        # them every second, later under load; a controller's own control plane may trail its
        # leader by a moment), and a node that has not seen the delete still leads the old
        # partition and takes the copy: gone with the topic. The copy counts once the control
        # plane, asked after it landed (every controller, the latest answer), still has that
        # incarnation; if not, this node's table is brought up to date before the next try.
        now = await self._latest_topic(dead_letters.name)
        if now is None or now.uid != dead_letters.uid:
            await self._refresh_topics()
            raise CopyFailed(
                f"the dead-letter topic {dead_letters.name!r} (uid {dead_letters.uid}) was "
                "deleted before the copy landed: it is copied again to its new incarnation"
            )
        where = f"{dead_letters.name}/{partition} offset {response.base_offset}"
        return f"copied before (a repeat: {where})" if response.duplicate else f"copied to {where}"

    async def _ensure_topic(self, name: str, source: TopicSpec) -> TopicSpec:
        spec = self._topics().get(name)
        if spec is not None:
            return spec
        request = pb.CreateTopicRequest(
            name=name, partitions=source.partitions, replication_factor=source.replication_factor
        )
        with contextlib.suppress(TopicExists):
            await self._create_topic(request)
            log.info("created the dead-letter topic %s: partitions=%d replication_factor=%d",
                     name, source.partitions, source.replication_factor)  # fmt: skip
        await self._refresh_topics()
        spec = self._topics().get(name)
        if spec is None:
            raise CopyFailed(f"the dead-letter topic {name!r} is not in this node's table yet")
        return spec


class Copies(Protocol):
    async def copy(
        self, topic: str, partition: int, batch: bytes, topic_uid: str = ""
    ) -> pb.ProduceResponse: ...


class Source(Protocol):
    """What the sink reads the source records from, and asks where a leader is
    (`cluster.queue_source.SourceReader`)."""

    def known_leader(self, topic: str, partition: int) -> str | None: ...

    async def leader(self, topic: str, partition: int, fresh: bool = False) -> str | None: ...

    async def record(
        self, topic: str, partition: int, offset: int, topic_uid: str = ""
    ) -> Record | None: ...


class Sink(Protocol):
    async def copy(self, job: DeadLetterJob) -> str:
        """What happened (for the log); starts with `GONE` when the source record is gone."""
        ...


class DeadLetterCopier:
    """Copies the jobs `offer`ed, each (group, topic uid, partition) in sequence order, then
    reports them with `confirm(copied, gone)` (an entry of the coordinator, through a round)."""

    def __init__(
        self,
        group: str,
        sink: Sink,
        confirm: Callable[[Sequence[DeadLetterJob], Sequence[DeadLetterJob]], Awaitable[object]],
        faults: NodeFaults,
        streams: asyncio.Semaphore | None = None,
    ) -> None:
        self.group = group  # the `__groups` partition's name, for the log
        self._sink = sink
        self._confirm = confirm
        self._faults = faults
        self._streams = streams or asyncio.Semaphore(MAX_CONCURRENT_STREAMS)
        self._running: dict[StreamKey, asyncio.Task[None]] = {}
        self.retry_first_s = RETRY_FIRST_S

    def offer(self, jobs: Sequence[DeadLetterJob]) -> None:
        """Starts copying the jobs of each stream not being copied already (its jobs that are
        left when it is done come back in a later offer)."""
        streams: dict[StreamKey, list[DeadLetterJob]] = {}
        for job in jobs:
            streams.setdefault((job.group, job.topic_uid, job.partition), []).append(job)
        loop = asyncio.get_running_loop()
        for key, stream in streams.items():
            if key not in self._running:
                stream.sort(key=lambda job: job.sequence)
                self._running[key] = loop.create_task(self._copy_stream(key, stream))

    def cancel(self) -> None:
        """Stops every copy (the slot was dropped): its successor copies what is left."""
        for task in self._running.values():
            task.cancel()
        self._running.clear()

    @property
    def busy(self) -> int:
        """Streams being copied now."""
        return len(self._running)

    async def _copy_stream(self, key: StreamKey, jobs: list[DeadLetterJob]) -> None:
        try:
            async with self._streams:
                copied: list[DeadLetterJob] = []
                gone: list[DeadLetterJob] = []
                for job in jobs:
                    await self._stall_if_armed()
                    # TEST-ONLY: the one copy this node makes (then it stalls: never confirmed)
                    self._faults.stalled = self._faults.dead_letter_stall_after_copy
                    outcome = await self._copy(job)
                    (gone if outcome.startswith(GONE) else copied).append(job)
                    await self._stall_if_armed()
                    if len(copied) == WINDOW:  # a successor repeats them as duplicates
                        await self._confirm(copied, gone)
                        copied, gone = [], []
                await self._confirm(copied, gone)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the slot was dropped: its successor copies them again
            log.info("dead letters of %s on %s not confirmed: %s", key, self.group, error)
        finally:
            if self._running.get(key) is asyncio.current_task():
                del self._running[key]

    async def _stall_if_armed(self) -> None:
        if self._faults.stalled:
            await asyncio.Event().wait()  # TEST-ONLY: forever (until the slot is dropped)

    async def _copy(self, job: DeadLetterJob) -> str:
        delay_s = self.retry_first_s
        attempts = 0
        while True:
            attempts += 1
            try:
                outcome = await self._sink.copy(job)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # (grpc, topic admin, reads): retried with backoff
                if attempts == 1:
                    log.warning("dead letter %s: %s (%s); retrying every %.0f-%.0f s",
                                _describe(job), error, type(error).__name__, RETRY_FIRST_S,
                                RETRY_MAX_S)  # fmt: skip
                await asyncio.sleep(delay_s)
                delay_s = min(RETRY_MAX_S, delay_s * 2)
                continue
            level = logging.WARNING if outcome.startswith(GONE) else logging.INFO
            log.log(level, "dead letter %s: %s%s", _describe(job), outcome,
                    f" (after {attempts} attempts)" if attempts > 1 else "")  # fmt: skip
            return outcome


def _describe(job: DeadLetterJob) -> str:
    return (
        f"of group {job.group!r}: {job.topic}/{job.partition} offset {job.offset} "
        f"(deliveries={job.delivery_count} reason={job.reason} sequence={job.sequence})"
    )
