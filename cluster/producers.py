"""The idempotent-producer table of one partition replica.

A producer stamps each batch with its producer id and the sequence number of the batch's first
record (`proto.records`). The table remembers, per producer, the last `WINDOW` batches it saw in
the log, keyed by base sequence, with the Raft index and term that hold them. A retried batch
(same producer, same base sequence) is answered with the offsets of the first copy instead of
being written twice — also when the first copy is still uncommitted (the retry waits for it).
The verdicts drawn from the table are `cluster.idempotence`'s, the only reader of this table.

The table is fed from the log itself, entry by entry, on every replica (`note` when entries are
appended, `forget_from` when a conflict truncates them), so a new leader has it already. A
replica saves it (`cluster.replica`, a snapshot every `SNAPSHOT_EVERY_ENTRIES` entries, however
many producers it holds), so a restart rebuilds it from the snapshot and the entries after it,
however long ago a producer last wrote (Kafka's producer state snapshots). Pure: no I/O.

Bounds (so memory and the snapshot stay bounded):

- per producer, the last `window` batches (a retry older than that is treated as new;
  producers retry within seconds, far inside the window);
- by age: a producer whose latest batch is more than `expiration_ms` older than the newest entry
  noted is forgotten (Kafka's producer.id.expiration.ms). Age is measured on the timestamps the
  entries carry (the leader's clock when it proposed them, replicated with the entry), never on
  a local clock: `clock_ms` is the largest entry timestamp noted, so every replica that noted
  the same entries, and every restart that replays them, answers alike;
- by count: at most `max_producers`; past it the least recently written producer (in log
  order) is dropped.

    expired(p)  <=>  clock_ms - timestamp_ms(latest batch of p) > expiration_ms

Expiry is decided by that equation on every lookup; dropping expired producers from memory is
only garbage collection and may run at any time without changing an answer (the clock never
runs back). A Raft truncation (`forget_from`) does not move the clock back either: the entries
it removes were proposed moments ago, so their timestamps are about the present anyway.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["BatchRef", "Batches", "ProducerTable"]

WINDOW = 8
MAX_PRODUCERS = 100_000
EXPIRATION_MS = 24 * 3600 * 1000  # one day, as Kafka's producer.id.expiration.ms


@dataclass(frozen=True, slots=True)
class BatchRef:
    index: int  # Raft index of the entry holding the batch
    term: int  # its term (a retry must match the copy that survived)
    record_count: int
    timestamp_ms: int = 0  # the entry's timestamp (the proposing leader's clock)


Batches = tuple[tuple[int, BatchRef], ...]  # (base sequence, where), in log order


class ProducerTable:
    def __init__(
        self,
        window: int = WINDOW,
        max_producers: int = MAX_PRODUCERS,
        expiration_ms: int = EXPIRATION_MS,
    ) -> None:
        self.window = window
        self.max_producers = max_producers
        self.expiration_ms = expiration_ms
        self.clock_ms = 0  # the largest entry timestamp noted: the table's notion of now
        # least recently written producer first; per producer an immutable tuple of its latest
        # batches (at most `window`, a few): replaced, never changed, so a snapshot's copy is
        # one shallow copy of this dict, not one per producer
        self._producers: OrderedDict[int, Batches] = OrderedDict()

    def __len__(self) -> int:
        return len(self._producers)

    def note(self, producer_id: int, base_sequence: int, ref: BatchRef) -> None:
        """Records that the log holds this producer's batch at `ref` (called in log order, for
        every entry holding records: a batch of producer 0 only moves the clock)."""
        self.clock_ms = max(self.clock_ms, ref.timestamp_ms)
        if producer_id:
            producers = self._producers
            batches = producers.get(producer_id)
            if batches is None or self._expired(batches):  # new, or starts afresh
                producers[producer_id] = ((base_sequence, ref),)
            else:
                if base_sequence <= batches[-1][0]:  # rare: a sequence written again
                    batches = tuple(batch for batch in batches if batch[0] != base_sequence)
                producers[producer_id] = (*batches, (base_sequence, ref))[-self.window :]
            producers.move_to_end(producer_id)
        self._collect()

    def _expired(self, batches: Batches) -> bool:
        return self.clock_ms - batches[-1][1].timestamp_ms > self.expiration_ms

    def _collect(self) -> None:
        """Drops producers over the count bound, and expired ones from the least recent end
        (O(1) amortised per note; an expired producer behind a live one waits its turn: it is
        answered as unknown meanwhile)."""
        producers = self._producers
        while producers:
            batches = next(iter(producers.values()))
            if len(producers) <= self.max_producers and not self._expired(batches):
                break
            producers.popitem(last=False)

    def _live(self, producer_id: int) -> Batches | None:
        batches = self._producers.get(producer_id) if producer_id else None
        if batches is None or self._expired(batches):
            return None
        return batches

    def lookup(self, producer_id: int, base_sequence: int) -> BatchRef | None:
        """Where an earlier copy of this batch sits in the log, if any."""
        for sequence, ref in self._live(producer_id) or ():
            if sequence == base_sequence:
                return ref
        return None

    def next_sequence(self, producer_id: int) -> int | None:
        """The sequence this producer's next batch must start at (after its latest batch in the
        log), or None when the producer is not known here (new, expired or evicted)."""
        batches = self._live(producer_id)
        if batches is None:
            return None
        base, ref = batches[-1]
        return base + ref.record_count

    def forget_from(self, index: int) -> None:
        """Entries from `index` on were truncated away (a Raft conflict): forget them."""
        producers = self._producers
        for producer_id, batches in list(producers.items()):
            if batches[-1][1].index < index:
                continue  # log order: its latest batch is before the cut, so are the others
            kept = tuple(batch for batch in batches if batch[1].index < index)
            if kept:
                producers[producer_id] = kept  # keeps its place in the recency order
            else:
                del producers[producer_id]

    def copy_rows(self) -> list[tuple[int, Batches]]:
        """A copy of the table, for `dump_rows` to turn into plain lists on another thread
        while this table goes on changing (one shallow copy: the tuples are immutable)."""
        return list(self._producers.items())

    @staticmethod
    def dump_rows(rows: list[tuple[int, Batches]]) -> list[Any]:
        """`copy_rows` as plain lists (msgpack-able), least recently used producer first:
        [[producer_id, [[base_sequence, index, term, record_count, timestamp_ms], ...]], ...]."""
        return [
            [pid, [[seq, r.index, r.term, r.record_count, r.timestamp_ms] for seq, r in batches]]
            for pid, batches in rows
        ]

    def dump(self) -> list[Any]:
        return self.dump_rows(self.copy_rows())

    def load(self, dumped: list[Any], clock_ms: int = 0) -> None:
        """Restores what `dump` returned (in its order, so recency holds) into an empty table,
        with the clock the table had then: the same answers as the table that was dumped."""
        for pid, batches in dumped:
            restored = tuple(
                (int(seq), BatchRef(int(index), int(term), int(count), int(timestamp)))
                for seq, index, term, count, timestamp in batches
            )
            if restored:
                self._producers[int(pid)] = restored
                self._producers.move_to_end(int(pid))
        self.clock_ms = max(self.clock_ms, int(clock_ms))
        self._collect()
