"""The idempotent-producer table of one partition replica.

A producer stamps each batch with its producer id and the sequence number of the batch's first
record (`proto.records`). The table remembers, per producer, the last `WINDOW` batches it saw in
the log, keyed by base sequence, with the Raft index and term that hold them. A retried batch
(same producer, same base sequence) is answered with the offsets of the first copy instead of
being written twice — also when the first copy is still uncommitted (the retry waits for it).

The table is fed from the log itself, entry by entry, on every replica (`note` when entries are
appended, `forget_from` when a conflict truncates them), so a new leader has it already and a
restart rebuilds it by scanning the tail of the log. Pure: no I/O.

A replica also saves the table now and then (`cluster.replica`, a snapshot every
`SNAPSHOT_EVERY_ENTRIES` entries), so a restart rebuilds it from the snapshot and the entries
after it, however long ago a producer last wrote (Kafka's producer state snapshots).

Like Kafka, only a window of recent batches per producer is remembered: a retry older than
`WINDOW` batches is treated as new. Producers retry within seconds, far inside the window.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["BatchRef", "ProducerTable"]

WINDOW = 8
MAX_PRODUCERS = 100_000


@dataclass(frozen=True, slots=True)
class BatchRef:
    index: int  # Raft index of the entry holding the batch
    term: int  # its term (a retry must match the copy that survived)
    record_count: int


class ProducerTable:
    def __init__(self, window: int = WINDOW, max_producers: int = MAX_PRODUCERS) -> None:
        self.window = window
        self.max_producers = max_producers
        self._producers: OrderedDict[int, OrderedDict[int, BatchRef]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._producers)

    def note(self, producer_id: int, base_sequence: int, ref: BatchRef) -> None:
        """Records that the log holds this producer's batch at `ref` (called in log order)."""
        if producer_id == 0:
            return
        batches = self._producers.get(producer_id)
        if batches is None:
            batches = self._producers[producer_id] = OrderedDict()
            while len(self._producers) > self.max_producers:
                self._producers.popitem(last=False)
        else:
            self._producers.move_to_end(producer_id)
        batches[base_sequence] = ref
        batches.move_to_end(base_sequence)
        while len(batches) > self.window:
            batches.popitem(last=False)

    def lookup(self, producer_id: int, base_sequence: int) -> BatchRef | None:
        """Where an earlier copy of this batch sits in the log, if any."""
        if producer_id == 0:
            return None
        batches = self._producers.get(producer_id)
        return None if batches is None else batches.get(base_sequence)

    def next_sequence(self, producer_id: int) -> int | None:
        """The sequence this producer's next batch must start at (after its latest batch in the
        log), or None when the producer is not known here."""
        batches = self._producers.get(producer_id) if producer_id else None
        if not batches:
            return None
        base, ref = next(reversed(batches.items()))
        return base + ref.record_count

    def forget_from(self, index: int) -> None:
        """Entries from `index` on were truncated away (a Raft conflict): forget them."""
        for producer_id in list(self._producers):
            batches = self._producers[producer_id]
            for sequence in [s for s, ref in batches.items() if ref.index >= index]:
                del batches[sequence]
            if not batches:
                del self._producers[producer_id]

    def dump(self) -> list[Any]:
        """The table as plain lists (msgpack-able), least recently used producer first:
        [[producer_id, [[base_sequence, index, term, record_count], ...]], ...]."""
        return [
            [pid, [[seq, ref.index, ref.term, ref.record_count] for seq, ref in batches.items()]]
            for pid, batches in self._producers.items()
        ]

    def load(self, dumped: list[Any]) -> None:
        """Adds what `dump` returned (in its order, so the bounds and recency hold)."""
        for pid, batches in dumped:
            for seq, index, term, count in batches:
                self.note(int(pid), int(seq), BatchRef(int(index), int(term), int(count)))
