"""The state of a queue group, per (topic uid, partition), folded from its entries.

A partition's records fall in three parts:

    [0, floor)           settled: acked, dead-lettered, or deleted by retention
    [floor, next_offset) each either settled, or exactly one of leased / waiting / pending
                         (a dead letter decided, its copy not confirmed)
    [next_offset, ...)   never handed out

    floor == min(leased | waiting | pending), or next_offset when all three are empty
    next_offset - floor <= max_in_flight   (a fresh record is handed out only within the window)

so the state is O(max_in_flight) whatever the backlog. Every change is an entry of
`consumers.entries` applied here (`PartitionQueue.apply_*`), both when the coordinator decides
and when a replacement replays the log: the same entries give the same state (`snapshot`).
Times are absolute epoch ms carried by the entries; nothing here reads a clock.

Key ordering: `by_key` holds, per key hash, the unsettled offsets with that key, sorted; a
waiting record is handed out only while it is the first of its key (its "head"). The heaps are
caches over the dicts (stale items are skipped when popped), so each call costs O(records it
handles × log window), never a scan of the window.
"""

from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict
from dataclasses import dataclass, field

import xxhash

from consumers.entries import QueueDeadLettered, QueueLeased, QueueSettled
from consumers.queue_types import (
    ACK,
    REASON_REJECTED,
    REJECT,
    RELEASE,
    DeadLetterJob,
    QueueOptions,
    QueuePartitionView,
)

__all__ = [
    "Leased",
    "PartitionQueue",
    "Pending",
    "QueueGroup",
    "Waiting",
    "key_hash",
    "producer_id",
]

# Per partition: how many of the latest settlements members' calls made are remembered, so that
# a call retried after its coordinator died (its first answer lost) is answered as applied.
RECENT_SETTLEMENTS = 4096

_MASK_63 = (1 << 63) - 1


def producer_id(group: str, topic_uid: str, partition: int) -> int:
    """The dead-letter producer id of a (group, topic uid, partition): the same on every node
    and after every failover, 63 bits, never 0."""
    return (xxhash.xxh64_intdigest(f"{group}\0{topic_uid}\0{partition}".encode()) & _MASK_63) or 1


def key_hash(key: bytes | None) -> int | None:
    """A record key's hash for key ordering; a record without a key is not ordered."""
    return None if key is None else xxhash.xxh64_intdigest(key)


@dataclass(slots=True)
class Leased:
    member_id: str
    delivery_count: int
    deadline_ms: int
    key_hash: int | None


@dataclass(slots=True)
class Waiting:
    available_at_ms: int
    delivery_count: int  # 0: never handed out (skipped while its key was blocked)
    key_hash: int | None


@dataclass(slots=True)
class Pending:
    sequence: int
    delivery_count: int
    reason: str
    dead_letter_topic: str
    key_hash: int | None


@dataclass(slots=True)
class PartitionQueue:
    topic: str
    topic_uid: str
    partition: int
    floor: int = 0
    next_offset: int = 0
    trimmed_to: int = 0  # the highest log start applied: nothing below it waits
    leased: dict[int, Leased] = field(default_factory=dict)
    waiting: dict[int, Waiting] = field(default_factory=dict)
    pending: dict[int, Pending] = field(default_factory=dict)
    acked: int = 0
    dead_lettered: int = 0
    deleted: int = 0  # settled by retention, neither acked nor dead-lettered
    # dead-letter topic -> the sequence of its next dead letter decided: each (source partition,
    # dead-letter topic) pair is one idempotent producer's stream, contiguous from 0 (a gap
    # would be refused by the dead-letter partition), even if the options change the topic
    sequences: dict[str, int] = field(default_factory=dict)
    # offset -> (member, delivery_count, action) of the latest leases members' settle calls
    # ended (at most RECENT_SETTLEMENTS): a call retried after its coordinator died is answered
    # as applied, not lost (`settled_again`)
    recent: OrderedDict[int, tuple[str, int, str]] = field(default_factory=OrderedDict)
    # caches (not state): lazily cleaned heaps over the dicts
    by_key: dict[int, list[int]] = field(default_factory=dict)
    _unsettled: list[int] = field(default_factory=list)  # every offset made unsettled
    _deadlines: list[tuple[int, int]] = field(default_factory=list)  # (deadline, offset)
    _timed: list[tuple[int, int]] = field(default_factory=list)  # (available_at, offset), heads
    _ready: list[int] = field(default_factory=list)  # waiting heads found due, by offset

    def snapshot(self) -> tuple[object, ...]:
        """The state, without caches: equal after a replay of the same entries."""
        return (
            self.topic,
            self.floor,
            self.next_offset,
            self.trimmed_to,
            dict(sorted(self.leased.items())),
            dict(sorted(self.waiting.items())),
            dict(sorted(self.pending.items())),
            self.acked,
            self.dead_lettered,
            self.deleted,
            dict(sorted(self.sequences.items())),
            list(self.recent.items()),
        )

    # -- what a decision reads (heaps may be cleaned; no state changes) --------------------------
    def take_ready(self, now_ms: int, limit: int, taken: set[int]) -> list[int]:
        """Up to `limit` waiting records whose time came and whose key is not blocked, lowest
        offset first, popped from the ready heap: the caller leases every one it gets."""
        while self._timed and self._timed[0][0] <= now_ms:
            available_at, offset = heapq.heappop(self._timed)
            waiting = self.waiting.get(offset)
            if waiting is not None and waiting.available_at_ms == available_at:
                heapq.heappush(self._ready, offset)
        found: list[int] = []
        while self._ready and len(found) < limit:
            offset = heapq.heappop(self._ready)
            waiting = self.waiting.get(offset)
            if waiting is None or offset in taken or not self.is_head(offset, waiting.key_hash):
                continue
            if waiting.available_at_ms > now_ms:
                continue  # leased and released again since it was found due: it is timed anew
            taken.add(offset)
            found.append(offset)
        return found

    def due_leases(self, now_ms: int, every: bool = False) -> list[int]:
        """Leases whose deadline passed (`every`: TEST-ONLY fault, all of them)."""
        if every:
            return sorted(self.leased)
        found: dict[int, None] = {}
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            deadline, offset = heapq.heappop(self._deadlines)
            lease = self.leased.get(offset)
            if lease is not None and lease.deadline_ms == deadline:
                found[offset] = None
        return list(found)

    def is_head(self, offset: int, key: int | None) -> bool:
        if key is None:
            return True
        offsets = self.by_key.get(key)
        return offsets is None or offsets[0] == offset

    def key_blocked(self, key: int | None) -> bool:
        """A fresh record with this key must wait: an earlier one is unsettled."""
        return key is not None and key in self.by_key

    def leases_of(self, member_id: str) -> list[int]:
        return sorted(o for o, lease in self.leased.items() if lease.member_id == member_id)

    # -- applying entries ------------------------------------------------------------------------
    def trim(self, log_start: int) -> None:
        """Retention deleted the records below `log_start`: those never handed out or waiting are
        settled as deleted (leased ones and pending dead letters run their course)."""
        if log_start <= self.trimmed_to:
            return
        self.trimmed_to = log_start
        for offset in sorted(o for o in self.waiting if o < log_start):
            waiting = self.waiting.pop(offset)
            self.deleted += 1
            self._settled(offset, waiting.key_hash)
        if log_start > self.next_offset:
            self.deleted += log_start - self.next_offset
            self.next_offset = log_start
        self._advance_floor()

    def apply_leased(self, entry: QueueLeased) -> None:
        self.trim(entry.log_start)
        for offset, count, key in entry.leases:
            if self.waiting.pop(offset, None) is None:
                if offset < self.next_offset:
                    continue  # not waiting, not fresh: nothing to lease (a stale entry)
                self._unsettle(offset, key)
            self.leased[offset] = Leased(entry.member_id, count, entry.deadline_ms, key)
            heapq.heappush(self._deadlines, (entry.deadline_ms, offset))
        for offset, key in entry.skipped:
            if offset >= self.next_offset:
                self._unsettle(offset, key)
                self._wait(offset, Waiting(0, 0, key))
        self.next_offset = max(self.next_offset, entry.next_offset)
        self._advance_floor()

    def settled_again(self, member_id: str, offset: int, delivery_count: int, action: str) -> bool:
        """Did a settle call of `member_id` already end this lease (`delivery_count`) so? Then
        the same settlement again (a retry whose first answer was lost) is answered as applied,
        changing nothing."""
        return self.recent.get(offset) == (member_id, delivery_count, action)

    def _remember(self, member_id: str, offset: int, lease: Leased, action: str) -> None:
        if member_id and lease.member_id == member_id:
            self.recent.pop(offset, None)
            self.recent[offset] = (member_id, lease.delivery_count, action)
            if len(self.recent) > RECENT_SETTLEMENTS:
                self.recent.popitem(last=False)

    def apply_settled(self, entry: QueueSettled) -> None:
        by = entry.settled_by
        for offset in entry.acked:
            lease = self.leased.pop(offset, None)
            if lease is not None:
                self.acked += 1
                self._settled(offset, lease.key_hash)
                self._remember(by, offset, lease, ACK)
        for offset, available_at, count in entry.waiting:
            lease = self.leased.pop(offset, None)
            if lease is None:
                continue
            self._remember(by, offset, lease, RELEASE)
            if offset < self.trimmed_to:  # it cannot be read any more
                self.deleted += 1
                self._settled(offset, lease.key_hash)
            else:
                self._wait(offset, Waiting(available_at, count, lease.key_hash))
        for offset, deadline in entry.extended:
            lease = self.leased.get(offset)
            if lease is not None:
                lease.deadline_ms = deadline
                heapq.heappush(self._deadlines, (deadline, offset))
        for offset, sequence, count, reason, topic in entry.dead:
            lease = self.leased.pop(offset, None)
            if lease is not None:
                self._remember(by, offset, lease, REJECT if reason == REASON_REJECTED else RELEASE)
                self.pending[offset] = Pending(sequence, count, reason, topic, lease.key_hash)
                self.sequences[topic] = max(self.sequences.get(topic, 0), sequence + 1)
        self._advance_floor()

    def apply_dead_lettered(self, entry: QueueDeadLettered) -> None:
        for offsets, copied in ((entry.offsets, True), (entry.gone, False)):
            for offset in offsets:
                pending = self.pending.pop(offset, None)
                if pending is not None:
                    if copied:
                        self.dead_lettered += 1
                    else:
                        self.deleted += 1
                    self._settled(offset, pending.key_hash)
        self._advance_floor()

    # -- helpers ---------------------------------------------------------------------------------
    def _unsettle(self, offset: int, key: int | None) -> None:
        heapq.heappush(self._unsettled, offset)
        if key is not None:
            offsets = self.by_key.setdefault(key, [])
            if not offsets or offsets[-1] < offset:
                offsets.append(offset)
            else:
                bisect.insort(offsets, offset)

    def _wait(self, offset: int, waiting: Waiting) -> None:
        self.waiting[offset] = waiting
        if self.is_head(offset, waiting.key_hash):
            heapq.heappush(self._timed, (waiting.available_at_ms, offset))

    def _settled(self, offset: int, key: int | None) -> None:
        """The offset is settled for good: the next record of its key may go."""
        if key is None:
            return
        offsets = self.by_key.get(key)
        if offsets is None:
            return
        at = bisect.bisect_left(offsets, offset)
        if at == len(offsets) or offsets[at] != offset:
            return
        del offsets[at]
        if not offsets:
            del self.by_key[key]
        elif at == 0:
            head = offsets[0]
            waiting = self.waiting.get(head)
            if waiting is not None:
                heapq.heappush(self._timed, (waiting.available_at_ms, head))

    def _advance_floor(self) -> None:
        heap = self._unsettled
        while heap and (
            heap[0] not in self.leased
            and heap[0] not in self.waiting
            and heap[0] not in self.pending
        ):
            heapq.heappop(heap)
        self.floor = heap[0] if heap else self.next_offset
        self._compact()

    def _compact(self) -> None:
        """Drops the heaps' stale items (leases settled or extended, waits that ended) once a
        heap holds more than twice what is live: memory follows the window, not the traffic
        (acks of a 12-hour lease would otherwise pile up). Amortized O(1) per change."""
        if len(self._deadlines) > 2 * len(self.leased) + 64:
            self._deadlines = [(lease.deadline_ms, o) for o, lease in self.leased.items()]
            heapq.heapify(self._deadlines)
        if len(self._timed) + len(self._ready) > 2 * len(self.waiting) + 64:
            self._timed = [
                (w.available_at_ms, o)
                for o, w in self.waiting.items()
                if self.is_head(o, w.key_hash)
            ]
            heapq.heapify(self._timed)
            self._ready = []  # what is due moves there again on the next receive


@dataclass(slots=True)
class QueueGroup:
    """A queue group's replicated queue state: its options and its partitions."""

    options: QueueOptions = field(default_factory=QueueOptions)
    partitions: dict[tuple[str, int], PartitionQueue] = field(default_factory=dict)
    uids: dict[str, str] = field(default_factory=dict)  # topic -> the uid last seen for it

    def partition(self, topic: str, topic_uid: str, partition: int) -> PartitionQueue:
        state = self.partitions.get((topic_uid, partition))
        if state is None:
            state = self.partitions[(topic_uid, partition)] = PartitionQueue(
                topic, topic_uid, partition
            )
            self.uids[topic] = topic_uid
        return state

    def find(self, topic: str, partition: int) -> PartitionQueue | None:
        uid = self.uids.get(topic)
        return None if uid is None else self.partitions.get((uid, partition))

    def view(self, topic: str, topic_uid: str, partition: int) -> QueuePartitionView:
        state = self.partitions.get((topic_uid, partition))
        if state is None:
            return QueuePartitionView(topic, partition, 0, 0, 0, 0, 0, 0, 0)
        return QueuePartitionView(
            topic,
            partition,
            state.floor,
            state.next_offset,
            len(state.leased),
            len(state.waiting),
            state.acked,
            state.dead_lettered,
            len(state.pending),
            state.deleted,
        )

    def dead_letter_jobs(self, group: str) -> list[DeadLetterJob]:
        """Pending dead letters, in (topic uid, partition, dead-letter topic, sequence) order."""
        jobs = []
        for (uid, partition), state in sorted(self.partitions.items()):
            if not state.pending:
                continue
            pid = producer_id(group, uid, partition)
            order = sorted(
                state.pending.items(), key=lambda i: (i[1].dead_letter_topic, i[1].sequence)
            )
            for offset, p in order:
                jobs.append(
                    DeadLetterJob(
                        group,
                        state.topic,
                        uid,
                        partition,
                        offset,
                        p.delivery_count,
                        p.reason,
                        p.dead_letter_topic,
                        pid,
                        p.sequence,
                    )
                )
        return jobs

    def snapshot(self) -> tuple[object, ...]:
        return (
            self.options,
            {key: state.snapshot() for key, state in sorted(self.partitions.items())},
        )
