"""The one owner of idempotence for one partition: is a producer's batch fresh, a copy of one
already in the log, out of order, or from a producer this partition does not know?

`Idempotence.admit` gives the verdict; the callers act on it and decide nothing themselves:

- the produce service, on receipt: a `Duplicate` is answered with the offsets of its first copy
  (waiting for that copy to commit); any other verdict is only a first look, and the batch goes
  to the MultiRaft driver, because batches a producer pipelines reach the service before the
  earlier ones are proposed, so their order is settled only at proposal time;
- the MultiRaft driver, on the leader, right before proposing: only `Fresh` is proposed (then
  `proposed` records it); every other verdict is refused, unwritten (`refusal`), retriable.

It is fed what the log holds, on every replica, in log order (`written`, `truncated`), so a new
leader has the table already, and a restart rebuilds it (`cluster.replica` replays the entries
after the saved `cluster.producers` snapshot through `written`).

    expected(p, term) = the sequence after p's latest batch proposed in `term`, when this leader
                        proposed one in that term; else after p's latest batch in the log
                        (`ProducerTable.next_sequence`); None when p is not known here
    admit(p, s, n, term) =
        Fresh(s + n)          if p == 0 (not idempotent), or s == expected(p, term),
                              or expected(p, term) is None and s == 0 (a producer starts at 0)
        Duplicate(ref)        if the log holds p's batch starting at s (checked first)
        ProducerUnknown       if expected(p, term) is None and s != 0: the batch may follow
                              batches this partition has forgotten (Kafka's UNKNOWN_PRODUCER_ID)
        OutOfOrder(expected)  otherwise: an earlier batch of p is not written yet

Pure: no I/O, no clock, no gRPC; one verdict object a batch (never per record). The queue and
timer features use it the same way for exactly-once dead-lettering and firing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cluster.errors import ClusterError
from cluster.producers import EXPIRATION_MS, Batches, BatchRef, ProducerTable

__all__ = [
    "Duplicate",
    "Fresh",
    "Idempotence",
    "OutOfOrder",
    "OutOfOrderSequence",
    "ProducerUnknown",
    "UnknownProducer",
    "Verdict",
]


class OutOfOrderSequence(ClusterError):
    """A producer's batch whose sequence does not follow its previous batch's: an earlier batch
    of the same producer is not written yet (it is in flight or being retried). Retriable.
    `behind`: the batch's sequence is below the expected one, so a batch at that sequence was
    written long ago (older than the table remembers): never to be resent under another id.
    `in_flight`: a batch at that sequence is proposed or just written, not committed (a retry
    that raced its first copy): to be sent again the same, and answered with the first copy's
    offsets (or written, if a new leader cut it) — never under another id, which could write it
    twice."""

    def __init__(self, message: str, behind: bool = False, in_flight: bool = False) -> None:
        super().__init__(message)
        self.behind = behind
        self.in_flight = in_flight


class UnknownProducer(OutOfOrderSequence):
    """A batch with a non-zero first sequence from a producer this partition does not know (its
    state expired or was evicted, or it never wrote here): the batch may follow batches the
    partition has forgotten, so it is refused, unwritten. Retriable under a new producer id
    (Kafka's UNKNOWN_PRODUCER_ID). A kind of
    OutOfOrderSequence: the sequence follows nothing this partition knows."""


@dataclass(frozen=True, slots=True)
class Fresh:
    """Write it. `next_sequence` is where the producer's following batch must start."""

    next_sequence: int


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The log already holds this batch (committed or not yet) at `ref`: answer with that."""

    ref: BatchRef


@dataclass(frozen=True, slots=True)
class OutOfOrder:
    """Refuse, retriable: the batch does not start at `expected`, the producer's next sequence."""

    expected: int


@dataclass(frozen=True, slots=True)
class ProducerUnknown:
    """Refuse, retriable under a new producer id: unknown producer, first sequence not 0."""


Verdict = Fresh | Duplicate | OutOfOrder | ProducerUnknown


class Idempotence:
    """The producer table of one partition (what the log holds) and what its leader proposed
    in its current term (ahead of the log), and the verdicts drawn from both."""

    def __init__(self, table: ProducerTable | None = None) -> None:
        self.table = table if table is not None else ProducerTable()
        # producer id -> (term, sequence after its latest batch proposed in that term): what the
        # leader expects next before the batch reaches the table (which follows the log)
        self._proposed_next: dict[int, tuple[int, int]] = {}

    @classmethod
    def with_expiration(cls, expiration_ms: int = EXPIRATION_MS) -> Idempotence:
        return cls(ProducerTable(expiration_ms=expiration_ms))

    # -- the verdict ---------------------------------------------------------------------------
    def admit(self, producer_id: int, base_sequence: int, record_count: int, term: int) -> Verdict:
        """The verdict on a batch of `record_count` records of `producer_id` starting at
        `base_sequence`, offered to a leader in `term` (see the module's equations)."""
        if not producer_id:
            return Fresh(base_sequence + record_count)
        earlier = self.table.lookup(producer_id, base_sequence)
        if earlier is not None:
            return Duplicate(earlier)
        expected = self.expected(producer_id, term)
        if expected is None:
            if base_sequence != 0:
                return ProducerUnknown()
        elif base_sequence != expected:
            return OutOfOrder(expected)
        return Fresh(base_sequence + record_count)

    def expected(self, producer_id: int, term: int) -> int | None:
        """The sequence this producer's next batch must start at, for a leader in `term`; None
        when the producer is not known here (new, expired or evicted)."""
        proposed = self._proposed_next.get(producer_id)
        if proposed is not None and proposed[0] == term:
            return proposed[1]
        return self.table.next_sequence(producer_id)

    def refusal(
        self, verdict: Verdict, producer_id: int, base_sequence: int, term: int, group: str
    ) -> OutOfOrderSequence | None:
        """The error a leader answers a batch it must not propose with (None for `Fresh`). A
        `Duplicate` reaching the proposal raced its first copy into the log after the service
        looked: it is refused as out of order (retriable; the retry is answered as a duplicate
        on receipt), never written twice. `behind` ("written long ago": a copier takes the copy
        as written) only for a sequence below what the log holds and no longer remembered: never
        for a batch in the log or proposed in this term and not appended yet, whose first copy
        may still be truncated by a new leader."""
        if isinstance(verdict, Fresh):
            return None
        if isinstance(verdict, ProducerUnknown):
            return UnknownProducer(
                f"producer {producer_id} is not known on {group} (new, or its state "
                f"expired), so its first batch must start at sequence 0, not sequence "
                f"{base_sequence}; nothing was written: send it again under a new producer id"
            )
        expected = (
            verdict.expected
            if isinstance(verdict, OutOfOrder)
            else self.expected(producer_id, term)
        )
        if isinstance(verdict, Duplicate):
            # in the log (perhaps not committed, perhaps to be truncated): never "long ago"
            return OutOfOrderSequence(
                f"batch of producer {producer_id} on {group} starts at sequence "
                f"{base_sequence}, but {expected} comes next: this batch reached the log a "
                "moment ago (a retry raced its first copy); retry to be answered with its offsets",
                in_flight=True,
            )
        in_log = self.table.next_sequence(producer_id) or 0  # not in the log: it starts at 0
        if expected is not None and in_log <= base_sequence < expected:
            # proposed in this term, not appended yet: its first copy is in flight
            return OutOfOrderSequence(
                f"batch of producer {producer_id} on {group} starts at sequence "
                f"{base_sequence}, which this leader proposed a moment ago and has not written "
                "yet (in flight): retry to learn its outcome",
                in_flight=True,
            )
        if expected is not None and base_sequence < expected:
            return OutOfOrderSequence(
                f"batch of producer {producer_id} on {group} starts at sequence "
                f"{base_sequence}, but {expected} comes next: a batch of this producer at that "
                "sequence was written long ago (older than the batches remembered per producer)",
                behind=True,
            )
        return OutOfOrderSequence(
            f"batch of producer {producer_id} on {group} starts at sequence "
            f"{base_sequence}, but {expected} comes next: an earlier batch of this producer "
            "is not written yet; retry once it is"
        )

    # -- what happened -------------------------------------------------------------------------
    def proposed(self, producer_id: int, next_sequence: int, term: int) -> None:
        """The leader of `term` appended a batch of this producer to its log, after which the
        producer's next batch starts at `next_sequence` (`Fresh.next_sequence`)."""
        if producer_id:
            if len(self._proposed_next) >= 2 * self.table.max_producers:
                self._proposed_next.clear()  # bounded; the table still knows the log
            self._proposed_next[producer_id] = (term, next_sequence)

    def written(self, producer_id: int, base_sequence: int, ref: BatchRef) -> None:
        """The log holds this batch at `ref` (in log order, every entry holding records)."""
        self.table.note(producer_id, base_sequence, ref)

    def truncated(self, index: int) -> None:
        """Log entries from `index` on were cut (a Raft conflict; 0: the whole log was reset)."""
        self.table.forget_from(index)

    # -- saved state ---------------------------------------------------------------------------
    def copy_rows(self) -> tuple[int, list[tuple[int, Batches]]]:
        """(clock_ms, rows): a cheap copy of the table to save (`ProducerTable.dump_rows`)."""
        return self.table.clock_ms, self.table.copy_rows()

    def restore(self, dumped: list[Any], clock_ms: int) -> None:
        """Loads a saved table (`ProducerTable.load`) into this empty one."""
        self.table.load(dumped, clock_ms)

    def reset(self) -> None:
        """Forgets the table (a saved one failed to load half-way): empty, same bounds."""
        old = self.table
        self.table = ProducerTable(old.window, old.max_producers, old.expiration_ms)
