"""One local replica of one partition: its Raft node, its log and hard state on disk, the
waiters of produce requests, the high watermark readers see, and its `Idempotence` (the owner of
the idempotent-producer verdicts, `cluster.idempotence`), which the replica feeds the entries
its log writes and truncates, and rebuilds on a restart from its saved table and log.

Threading: the MultiRaft driver (one asyncio task) is the only caller of the Raft node. Disk work
for a Ready (`write_ready`) runs in the driver's storage thread; everything else runs on the
event loop. Reads (`read_committed`) run in a reader thread and touch only the segmented log,
which is thread-safe, and the high watermark, which only grows.

    high_watermark == offset after the last applied (committed) entry
    a produce waiter for (index, term) succeeds iff the committed entry at `index` has `term`

The commit index is saved lazily: with term and vote when they change (`write_ready`), and
otherwise every COMMIT_SAVE_INTERVAL_S by `save_commit_indexes` off the event loop, so a restarted
replica starts from a high watermark near where it was, not at 0, before it hears a leader.
What is saved is the applied index, which never passes the log's durable entries; a restart
takes min(saved, last index), so it is never served above what the log holds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from cluster.errors import ClusterError
from cluster.idempotence import Idempotence, OutOfOrderSequence, UnknownProducer
from cluster.producer_snapshot import (
    ProducerSnapshot,
    SnapshotError,
    UnknownSnapshotFormat,
    decode_snapshot,
    encode_snapshot,
)
from cluster.producers import EXPIRATION_MS, BatchRef
from proto import flotilla_pb2 as pb
from proto.records import peek_producer
from raft.config import RaftConfig
from raft.core import RaftNode
from raft.ready import Ready
from raft.storage_log import SegmentedRaftLog
from raft.types import Configuration, EntryKind
from storage import FileHandles, HardState, LogConfig, SegmentedLog, StateJournal
from storage.atomic import write_atomic

__all__ = [
    "NotCommitted",
    "OutOfOrderSequence",
    "ProduceResult",
    "ProducerSnapshot",
    "Replica",
    "UnknownProducer",
    "Waiter",
    "incarnation_tag",
    "same_incarnation",
    "save_commit_indexes",
]

logger = logging.getLogger("flotilla.replica")

# Entries a restart scans for producer state without a snapshot; with one, those after it (at
# most SNAPSHOT_STALE_ENTRIES, else the snapshot is too old to use without a long scan).
REBUILD_SCAN_ENTRIES = 4096
# The producer table is saved every this many entries written (`producer_snapshot`), whatever
# its size: the table's own bounds (`cluster.producers`) bound the snapshot.
SNAPSHOT_EVERY_ENTRIES = 2048
SNAPSHOT_STALE_ENTRIES = 4 * REBUILD_SCAN_ENTRIES
PRODUCER_SNAPSHOT = "producers.snapshot"
# How often the commit indexes that moved are saved (one journal write and fsync for all groups).
COMMIT_SAVE_INTERVAL_S = 1.0
# Hex digits of a topic's uid that tag its groups' Raft messages on the wire.
TAG_DIGITS = 16


def incarnation_tag(uid: str) -> str:
    """The tag a topic incarnation's Raft messages carry (`Replica.wire_group`)."""
    return uid[:TAG_DIGITS]


def same_incarnation(tag: str, uid: str) -> bool:
    """May a message tagged `tag` reach a replica (or open one) of topic incarnation `uid`?
    An untagged message, or a replica whose incarnation is unknown, is not checked."""
    return not tag or not uid or tag == incarnation_tag(uid)


class NotCommitted(ClusterError):
    """The batch was not committed: `definitely_not_written` says whether a retry can only
    help, or whether the outcome is unknown (an idempotent retry is still safe)."""

    def __init__(self, message: str, *, definitely_not_written: bool) -> None:
        super().__init__(message)
        self.definitely_not_written = definitely_not_written


@dataclass(frozen=True, slots=True)
class ProduceResult:
    base_offset: int
    record_count: int
    duplicate: bool = False


@dataclass(slots=True)
class Waiter:
    future: asyncio.Future[ProduceResult]
    index: int = 0
    term: int = 0
    duplicate: bool = False
    on_append: bool = False  # acks=LEADER: resolve once the leader's own write is durable


@dataclass(slots=True, eq=False)  # identity semantics: replicas live in sets
class Replica:
    group: str
    topic: str
    partition: int
    directory: str
    node: RaftNode
    segmented: SegmentedLog
    log: SegmentedRaftLog
    idempotence: Idempotence = field(default_factory=Idempotence)  # decides every produce
    waiters: dict[int, Waiter] = field(default_factory=dict)
    high_watermark: int = 0
    # set (and replaced) when the high watermark moves; made only when someone waits on it
    # (`hw_changed`): most of a host's replicas never have a reader waiting
    _hw_event: asyncio.Event | None = None
    saved_term_vote: tuple[int, str | None] = (0, None)
    saved_commit: int = 0  # the commit index the journal holds (storage thread)
    idle_ticks: int = 0  # ticks since the last proposal (the leader quiesces when idle)
    # the MultiRaft host's count of ticks (`TickWheel.count`) this node has been given,
    # and the count at which its timer is next due (its own ticks are passed in between)
    ticks_given: int = 0
    tick_due: int = 0
    topic_uid: str = ""  # the incarnation of the topic this replica belongs to (TopicSpec.uid)
    entries_since_snapshot: int = 0  # written since the producer table was last saved
    # the group as its Raft messages name it on the wire: `group@tag`, the tag a prefix of the
    # topic uid, so a peer hosting another incarnation of the topic drops them (`incarnation_tag`)
    wire_group: str = ""
    # what its host counts it as (`MultiRaft.leading`, `led`): 1 knows its leader, 3 leads
    counted: int = 0

    @classmethod
    def open(
        cls,
        *,
        node_id: str,
        topic: str,
        partition: int,
        directory: str,
        bootstrap: Configuration,
        hard_state: HardState,
        raft_config: RaftConfig,
        log_config: LogConfig,
        handles: FileHandles,
        rng: random.Random,
        producer_expiration_ms: int = EXPIRATION_MS,
        durable: bool = False,
        names: Collection[str] | None = None,
        tag: str | None = None,
    ) -> Replica:
        """`durable`: the log was closed by a clean stop (`SegmentedLog`'s `durable`).
        `names`: what `directory` holds, if the caller listed it (None: unknown). `tag`: the
        topic incarnation's uid, which a new log's header carries (`SegmentedLog`'s `tag`: a
        log tagged otherwise raises `storage.ForeignLog`)."""
        # the caller makes `directory` (`cluster.opener`, durably); else the log makes it, and
        # makes it durable with its first flush, before anything it holds is
        segmented = SegmentedLog(
            os.path.join(directory, "log"), log_config, handles=handles, durable=durable, tag=tag
        )
        raft_log = SegmentedRaftLog(segmented)
        node = RaftNode(node_id, bootstrap, raft_log, hard_state, raft_config, rng)
        replica = cls(
            group=f"{topic}/{partition}",
            topic=topic,
            partition=partition,
            directory=directory,
            node=node,
            segmented=segmented,
            log=raft_log,
            saved_term_vote=(hard_state.term, hard_state.vote),
            idempotence=Idempotence.with_expiration(producer_expiration_ms),
            saved_commit=hard_state.commit,
        )
        replica.wire_group = replica.group
        replica.high_watermark = segmented.offset_after(node.applied_index)
        if segmented.last_index >= segmented.first_index:  # an empty log has no producers
            replica._rebuild_producers(names is None or PRODUCER_SNAPSHOT in names)
        return replica

    @property
    def hw_changed(self) -> asyncio.Event:
        """An event set the next time the high watermark moves (each move, a new one)."""
        event = self._hw_event
        if event is None:
            event = self._hw_event = asyncio.Event()
        return event

    def set_topic_uid(self, uid: str) -> None:
        self.topic_uid = uid
        self.wire_group = f"{self.group}@{incarnation_tag(uid)}" if uid else self.group

    def _rebuild_producers(self, snapshot_listed: bool = True) -> None:
        """The producer table after a restart: the saved snapshot, if it still matches the log,
        and the entries after it; else the last REBUILD_SCAN_ENTRIES entries only (a producer
        that wrote before them is unknown here: its next batch is refused as UnknownProducer).
        `snapshot_listed`: False when the directory's listing has no snapshot (not looked for)."""
        first = max(self.segmented.first_index, self.segmented.last_index - REBUILD_SCAN_ENTRIES)
        covered = self._load_producer_snapshot() if snapshot_listed else None
        if covered is not None:
            first = covered + 1
        if first > self.segmented.last_index:
            return
        for entry in self.segmented.read_from(first, 1 << 62):
            if entry.record_count > 0:
                producer_id, sequence = peek_producer(entry.data)
                self.idempotence.written(
                    producer_id,
                    sequence,
                    BatchRef(entry.index, entry.term, entry.record_count, entry.timestamp_ms),
                )

    def _load_producer_snapshot(self) -> int | None:
        """Loads the saved producer table if the log still holds the entry it ends at, with the
        same term (so, by Raft's log matching, every entry it covers), not too far back.
        Returns that entry's index, or None (no usable snapshot: the table stays empty)."""
        path = os.path.join(self.directory, PRODUCER_SNAPSHOT)
        try:
            with open(path, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            return None
        try:
            saved = decode_snapshot(data)
        except UnknownSnapshotFormat:
            return None  # a format this version does not read: the bounded scan instead
        except SnapshotError as error:  # torn, or not a snapshot
            logger.warning("ignored the producer snapshot of %s: %s", self.group, error)
            return None
        log = self.segmented
        try:
            # its last entry is in the log, or is the log's boundary (a follower reset to its
            # leader's log start saved the table the leader sent as of there)
            if not log.first_index - 1 <= saved.index <= log.last_index:
                return None  # the log no longer holds its last entry
            if log.term_at(saved.index) != saved.term:
                return None  # truncated and rewritten since
            if log.last_index - saved.index > SNAPSHOT_STALE_ENTRIES:
                return None  # too old to catch up cheaply
            # format 1 is dated at the entry it ends at (read only then)
            stamp = saved.clock_ms
            if stamp is None:
                stamp = log.read(saved.index).timestamp_ms
            clock_ms, dumped = saved.dated(stamp)
            self.idempotence.restore(dumped, clock_ms)
            return saved.index
        except Exception as error:  # rows of another shape: the bounded scan instead
            self.idempotence.reset()
            logger.warning("ignored the producer snapshot of %s: %s", self.group, error)
            return None

    def producer_snapshot(self) -> ProducerSnapshot | None:
        """The producer table and the last log entry it covers, to save (`save_snapshot`). In
        the driver, between rounds: every entry written so far has been noted. Only a shallow
        copy is made here, on the event loop; encoding is the storage thread's. None when the
        log is empty."""
        self.entries_since_snapshot = 0
        log = self.segmented
        if log.last_index < log.first_index:
            return None
        index = log.last_index
        clock_ms, rows = self.idempotence.copy_rows()
        return ProducerSnapshot(index, log.term_at(index), clock_ms, rows)

    def boundary_state(self, index: int, term: int) -> bytes:
        """The leader's producer table as of its log boundary (`index`, `term`), encoded as a
        producer snapshot, for the `LogReset` that sends a follower to start over there: the
        batches the table remembers from entries up to the boundary, so the follower, after
        the entries that follow it, knows what this table knows. Rare (a follower behind the
        log start), so built on the event loop when sent.

        At most the Raft message size (`RaftConfig.max_msg_bytes`, as an AppendRequest's
        entries): past it, the producers written longest ago are left out (to the follower
        they are as if evicted from the table: a batch of theirs is refused as from an unknown
        producer, not written twice), so the reset always fits a peer frame."""
        clock_ms, rows = self.idempotence.copy_rows()
        kept = []
        for producer_id, batches in rows:  # least recently written first
            before = tuple(batch for batch in batches if batch[1].index <= index)
            if before:
                kept.append((producer_id, before))
        limit = self.node.config.max_msg_bytes
        encoded = encode_snapshot(ProducerSnapshot(index, term, clock_ms, kept))
        while len(encoded) > limit and kept:
            # keep the most recent share that should fit, with a margin; again if it did not
            share = max(0, int(len(kept) * limit / len(encoded) * 0.9))
            kept = kept[len(kept) - share :] if share else []
            encoded = encode_snapshot(ProducerSnapshot(index, term, clock_ms, kept))
        return encoded

    def save_snapshot(self, snapshot: ProducerSnapshot) -> None:
        """Storage thread: replaces the saved producer table (atomically). A write or fsync
        error is raised (the node fail-stops, `cluster.failstop`); a replica deleted meanwhile
        is not an error."""
        data = encode_snapshot(snapshot)  # here: encoding is the storage thread's work
        try:
            write_atomic(os.path.join(self.directory, PRODUCER_SNAPSHOT), data)
        except FileNotFoundError as error:  # the replica was deleted meanwhile
            logger.debug("producer snapshot of %s not saved: %s", self.group, error)

    # -- the storage thread -------------------------------------------------------------------
    def write_ready(self, ready: Ready) -> HardState | None:
        """Disk work of one Ready, in the contract's order; durability by the caller's group
        commit. Returns the hard state to save (in the node's state journal, with one fsync for
        every group of the round) when its term or vote changed."""
        if ready.boundary is not None:
            if ready.boundary_state:  # first: a crash between leaves a snapshot past the log
                write_atomic(os.path.join(self.directory, PRODUCER_SNAPSHOT), ready.boundary_state)
            self.log.reset(ready.boundary)
        if ready.truncate_from is not None:
            self.log.truncate_from(ready.truncate_from)
        if ready.entries:
            self.log.append(ready.entries)
        state = ready.hard_state
        if state is not None and (state.term, state.vote) != self.saved_term_vote:
            # term and vote must be durable before this Ready's messages go out; a change of
            # commit alone is saved later, lazily (`save_commit_indexes`).
            self.saved_term_vote = (state.term, state.vote)
            self.saved_commit = state.commit
            return HardState(state.term, state.vote, state.commit)
        return None

    # -- the event loop ---------------------------------------------------------------------------
    def note_appended(self, ready: Ready) -> None:
        """Feeds the producer table from entries just written (and forgets truncated ones)."""
        if ready.boundary is not None:
            self.idempotence.truncated(0)
            if ready.boundary_state:
                self._restore_boundary_state(ready)
            # everything up to the boundary is committed: readers may see up to its offset
            self.high_watermark = max(self.high_watermark, ready.boundary.next_offset)
        if ready.truncate_from is not None:
            self.idempotence.truncated(ready.truncate_from)
            for index in [i for i in self.waiters if i >= ready.truncate_from]:
                future = self.waiters.pop(index).future
                if not future.done():
                    future.set_exception(
                        NotCommitted(
                            "leadership changed before the batch committed; the outcome is unknown "
                            "(another replica may still commit it; an idempotent retry is safe)",
                            definitely_not_written=False,
                        )
                    )
        self.entries_since_snapshot += len(ready.entries)
        for entry in ready.entries:
            if entry.kind is EntryKind.NORMAL:
                producer_id, sequence = peek_producer(entry.data)
                self.idempotence.written(
                    producer_id,
                    sequence,
                    BatchRef(entry.index, entry.term, entry.record_count, entry.timestamp_ms),
                )

    def _restore_boundary_state(self, ready: Ready) -> None:
        """The producer table the leader sent with the reset (`boundary_state`), as of the
        boundary: saved by `write_ready` already, loaded here. One that is not readable, or not
        as of this boundary, leaves the table empty (its producers are unknown here)."""
        boundary = ready.boundary
        assert boundary is not None
        try:
            saved = decode_snapshot(ready.boundary_state)
            if (saved.index, saved.term) != (boundary.index, boundary.term):
                raise SnapshotError(
                    f"it is as of entry {saved.index} (term {saved.term}), the boundary is "
                    f"{boundary.index} (term {boundary.term})"
                )
            clock_ms, dumped = saved.dated(0)  # a leader sends format 2: dated already
            self.idempotence.restore(dumped, clock_ms)
            self.entries_since_snapshot = 0
        except Exception as error:  # a peer's bytes: never fail the round
            self.idempotence.reset()
            logger.warning(
                "ignored the producer table sent with the reset of %s: %s", self.group, error
            )

    def apply(self, committed: tuple[int, int] | None) -> None:
        if committed is None:
            return
        last = committed[1]
        self.high_watermark = self.segmented.offset_after(last)
        while self.waiters:
            index = next(iter(self.waiters))
            if index > last:
                break
            self.settle(self.waiters.pop(index))
        event, self._hw_event = self._hw_event, None
        if event is not None:
            event.set()

    def settle_durable(self, durable_index: int) -> None:
        """acks=LEADER waiters whose entry the leader holds durably."""
        if not self.waiters:
            return
        for index in [i for i, w in self.waiters.items() if w.on_append and i <= durable_index]:
            self.settle(self.waiters.pop(index))

    def settle(self, waiter: Waiter) -> None:
        """Answers `waiter` once its entry is applied (or known lost): the batch's offsets, or
        `NotCommitted`. Idempotent; the service settles a duplicate's waiter this way."""
        if waiter.future.done():
            return
        if not self.segmented.first_index <= waiter.index <= self.segmented.last_index:
            waiter.future.set_exception(
                NotCommitted("the outcome is unknown; retry", definitely_not_written=False)
            )
            return
        term, base_offset, count = self.segmented.entry_meta(waiter.index)
        if term != waiter.term:
            waiter.future.set_exception(
                NotCommitted(
                    "leadership changed before the batch committed; it was not written",
                    definitely_not_written=True,
                )
            )
        else:
            waiter.future.set_result(ProduceResult(base_offset, count, waiter.duplicate))

    def fail_all(self, message: str) -> None:
        for waiter in self.waiters.values():
            if not waiter.future.done():
                waiter.future.set_exception(NotCommitted(message, definitely_not_written=False))
        self.waiters.clear()

    def read_committed(
        self,
        offset: int,
        max_records: int,
        max_bytes: int,
        unsafe: bool = False,
        on_bytes: Callable[[int], object] | None = None,
    ) -> list[pb.StoredBatch]:
        """Reader thread: committed batches from `offset`, never past the applied index.
        `unsafe` (test-only, --unsafe-read-uncommitted): up to the log's last index instead.
        `on_bytes` is told the size of the batches read (the fetch bytes metric)."""
        log = self.segmented
        applied = self.node.applied_index
        if unsafe:  # test-only: a deliberately broken reader for the chaos checker's mutation test
            applied = self.node.log.last_index
            if offset >= log.next_offset:
                return []
        elif offset >= self.high_watermark:
            return []
        batches: list[pb.StoredBatch] = []
        records = size = 0
        index = log.find_offset(offset)
        for entry in log.read_from(index, max_bytes):
            if entry.index > applied or records >= max_records:
                break
            if entry.record_count:
                size += len(entry.data)
                batches.append(
                    pb.StoredBatch(
                        base_offset=entry.base_offset,
                        record_count=entry.record_count,
                        data=bytes(entry.data),
                    )
                )
                # only the records from `offset` on count toward max_records: a read that
                # starts in the middle of a batch still gets the batches after it that it asked for
                records += entry.base_offset + entry.record_count - max(offset, entry.base_offset)
        if on_bytes is not None and size:
            on_bytes(size)
        return batches

    def close(self) -> None:
        self.fail_all("the replica is closing; the outcome is unknown")
        self.segmented.close()


def save_commit_indexes(
    replicas: Iterable[Replica], journal: StateJournal, hosted: Callable[[Replica], bool]
) -> int:
    """Storage thread, while no Raft node steps (`MultiRaft.maintain`): saves the applied index
    of every replica whose applied index passed the commit index the journal holds, with the
    term and vote already durable, in one write and one fsync. `hosted` says whether a replica
    is still hosted (one removed meanwhile may have had its state forgotten: it stays so).
    Returns how many were saved."""
    states: dict[str, HardState] = {}
    saved: list[tuple[Replica, int]] = []
    for replica in replicas:
        applied = replica.node.applied_index
        if applied > replica.saved_commit and hosted(replica):
            term, vote = replica.saved_term_vote
            states[replica.group] = HardState(term, vote, applied)
            saved.append((replica, applied))
    journal.save_many(states)
    for replica, applied in saved:
        replica.saved_commit = applied
    return len(saved)
