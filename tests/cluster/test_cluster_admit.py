"""The verdicts of `cluster.idempotence.Idempotence`, the one owner of idempotence: pure, no
cluster, no gRPC (milliseconds). The equations are in the module's docstring; the last test shows
the checks here catch a deliberately broken owner."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cluster.idempotence import (
    Duplicate,
    Fresh,
    Idempotence,
    OutOfOrder,
    OutOfOrderSequence,
    ProducerUnknown,
    UnknownProducer,
    Verdict,
)
from cluster.producers import WINDOW, BatchRef, ProducerTable

TERM = 3


def written(owner: Idempotence, producer: int, base: int, count: int, index: int) -> BatchRef:
    ref = BatchRef(index, TERM, count, 1000 + index)
    owner.written(producer, base, ref)
    return ref


def check_verdicts(owner: Idempotence) -> None:
    """Every kind of verdict, on one owner, through its public calls only."""
    # a producer of id 0 is not idempotent: always fresh, whatever its sequence
    assert owner.admit(0, 17, 4, TERM) == Fresh(21)
    # a new producer must start at 0
    assert owner.admit(7, 0, 5, TERM) == Fresh(5)
    assert owner.admit(7, 5, 5, TERM) == ProducerUnknown()
    # proposed (ahead of the log): the next batch follows it in this term
    owner.proposed(7, 5, TERM)
    assert owner.admit(7, 5, 2, TERM) == Fresh(7)
    assert owner.admit(7, 9, 2, TERM) == OutOfOrder(5)
    assert owner.admit(7, 0, 5, TERM) == OutOfOrder(5)  # its first copy is not written yet
    # written: a retry of it is a duplicate, answered with where the first copy is
    first = written(owner, 7, 0, 5, index=10)
    assert owner.admit(7, 0, 5, TERM) == Duplicate(first)
    second = written(owner, 7, 5, 2, index=11)
    assert owner.admit(7, 5, 2, TERM) == Duplicate(second)
    # a new leader (another term) expects what the log says, not what an old leader proposed
    owner.proposed(7, 40, TERM)
    assert owner.admit(7, 7, 1, TERM + 1) == Fresh(8)
    assert owner.admit(7, 40, 1, TERM + 1) == OutOfOrder(7)
    # a truncation forgets the cut batches: no longer duplicates, and the sequence steps back
    owner.truncated(11)
    assert owner.admit(7, 5, 2, TERM + 1) == Fresh(7)
    assert owner.admit(7, 0, 5, TERM + 1) == Duplicate(first)
    owner.truncated(0)
    assert owner.admit(7, 0, 5, TERM + 1) == Fresh(5)
    assert owner.admit(7, 5, 2, TERM + 1) == ProducerUnknown()


def test_verdicts() -> None:
    check_verdicts(Idempotence())


def test_an_expired_producer_is_unknown() -> None:
    owner = Idempotence.with_expiration(1000)
    owner.written(7, 0, BatchRef(1, TERM, 5, 100))
    assert owner.admit(7, 5, 1, TERM) == Fresh(6)
    owner.written(8, 0, BatchRef(2, TERM, 1, 1101))  # the log's clock moves past 7's expiry
    assert owner.admit(7, 5, 1, TERM) == ProducerUnknown()
    assert owner.admit(7, 0, 5, TERM) == Fresh(5)  # not a duplicate any more: starts afresh


def test_an_unknown_producer_must_start_at_sequence_zero() -> None:
    """A producer the partition does not know (new, or its state expired) may only start at
    sequence 0; any other first sequence is refused with UnknownProducer (retriable: the client
    moves to a new producer id), as the batch may follow batches the replica has forgotten."""
    owner = Idempotence()

    def check(producer_id: int, base_sequence: int) -> None:  # as the leader, before proposing
        verdict = owner.admit(producer_id, base_sequence, 0, TERM)
        error = owner.refusal(verdict, producer_id, base_sequence, TERM, "t/0")
        if error is not None:
            raise error

    check(7, 0)  # a new producer
    with pytest.raises(UnknownProducer, match=r"producer 7 .* sequence 5"):
        check(7, 5)
    owner.written(8, 0, BatchRef(1, 1, 5))
    check(8, 5)  # known: follows its latest batch
    with pytest.raises(OutOfOrderSequence):
        check(8, 9)


def test_refusals_name_the_producer_and_the_sequences() -> None:
    owner = Idempotence()
    assert owner.refusal(Fresh(5), 7, 0, TERM, "t/0") is None
    unknown = owner.refusal(owner.admit(7, 5, 1, TERM), 7, 5, TERM, "t/0")
    assert isinstance(unknown, UnknownProducer)
    assert "producer 7 is not known on t/0" in str(unknown) and "not sequence 5" in str(unknown)
    owner.written(7, 0, BatchRef(1, TERM, 5))
    gap = owner.refusal(owner.admit(7, 9, 1, TERM), 7, 9, TERM, "t/0")
    assert type(gap) is OutOfOrderSequence
    assert "starts at sequence 9, but 5 comes next" in str(gap)
    assert not gap.in_flight and not gap.behind  # a sequence missing: a copier rebases it
    # a duplicate reaching the proposal (it raced its first copy into the log) is refused as
    # out of order, retriable, never proposed twice
    verdict = owner.admit(7, 0, 5, TERM)
    assert isinstance(verdict, Duplicate)
    raced = owner.refusal(verdict, 7, 0, TERM, "t/0")
    assert type(raced) is OutOfOrderSequence
    assert "starts at sequence 0, but 5 comes next" in str(raced)
    assert not raced.behind  # its first copy is in the log, maybe not committed: not "long ago"
    assert raced.in_flight  # to be sent again the same: rebased, it would be written twice


def test_saved_state_round_trips() -> None:
    owner = Idempotence()
    first = written(owner, 7, 0, 5, index=1)
    written(owner, 9, 0, 1, index=2)
    clock_ms, rows = owner.copy_rows()
    again = Idempotence()
    again.restore(ProducerTable.dump_rows(rows), clock_ms)
    assert again.admit(7, 0, 5, TERM) == Duplicate(first)
    assert again.admit(7, 5, 1, TERM) == Fresh(6)
    assert again.admit(9, 3, 1, TERM) == OutOfOrder(1)
    again.reset()
    assert again.admit(7, 5, 1, TERM) == ProducerUnknown()


def test_the_proposed_map_is_bounded() -> None:
    owner = Idempotence(ProducerTable(max_producers=2))
    for producer in range(1, 6):
        owner.proposed(producer, 3, TERM)
    # cleared at 2 * max_producers: the earliest are forgotten (the table still knows the log)
    assert owner.admit(1, 3, 1, TERM) == ProducerUnknown()
    assert owner.admit(5, 3, 1, TERM) == Fresh(4)


class _NoDuplicates(Idempotence):
    """Broken on purpose: never finds the first copy (a retry would be written twice)."""

    def admit(self, producer_id: int, base_sequence: int, record_count: int, term: int) -> Verdict:
        verdict = super().admit(producer_id, base_sequence, record_count, term)
        if isinstance(verdict, Duplicate):
            expected = self.expected(producer_id, term)
            return Fresh(base_sequence + record_count) if expected is None else OutOfOrder(expected)
        return verdict


class _IgnoresTerm(Idempotence):
    """Broken on purpose: trusts an old leader's proposals after the term moved on."""

    def expected(self, producer_id: int, term: int) -> int | None:
        return super().expected(producer_id, TERM)


class _AnyFirstSequence(Idempotence):
    """Broken on purpose: lets an unknown producer start anywhere."""

    def admit(self, producer_id: int, base_sequence: int, record_count: int, term: int) -> Verdict:
        verdict = super().admit(producer_id, base_sequence, record_count, term)
        return Fresh(base_sequence + record_count) if verdict == ProducerUnknown() else verdict


@pytest.mark.parametrize("broken", [_NoDuplicates, _IgnoresTerm, _AnyFirstSequence])
def test_the_checks_catch_a_broken_owner(broken: Callable[[], Idempotence]) -> None:
    with pytest.raises(AssertionError):
        check_verdicts(broken())


def test_a_retry_of_a_batch_proposed_but_not_yet_in_the_log_is_not_called_behind() -> None:
    """Between a leader's proposal of a batch and the round that appends it (and feeds it to the
    table), a retry of the same batch (its sender timed out while the leader was starved) finds
    neither a duplicate nor its own sequence next. It must be refused as retriable — its first
    copy is in flight: the retry comes back to a duplicate, or, if that proposal is truncated by
    a new leader, to a fresh write — never as `behind` ("written long ago"), which a copier
    takes as written and would lose a truncated copy for."""
    owner = Idempotence()
    written(owner, 7, 0, 5, index=1)  # sequences 0-4 in the log
    first = owner.admit(7, 5, 2, TERM)
    assert first == Fresh(7)
    owner.proposed(7, 7, TERM)  # proposed; the round has not appended it yet
    retry = owner.refusal(owner.admit(7, 5, 2, TERM), 7, 5, TERM, "t/0")
    assert isinstance(retry, OutOfOrderSequence) and not retry.behind, retry
    assert "in flight" in str(retry) and retry.in_flight
    # the same for a producer's very first batch, before the log knows the producer at all
    assert owner.admit(8, 0, 3, TERM) == Fresh(3)
    owner.proposed(8, 3, TERM)
    first_retry = owner.refusal(owner.admit(8, 0, 3, TERM), 8, 0, TERM, "t/0")
    assert isinstance(first_retry, OutOfOrderSequence) and not first_retry.behind, first_retry
    assert first_retry.in_flight
    # below what the log holds, and older than the batches remembered: behind, as before
    for sequence in range(7, 7 + WINDOW):
        written(owner, 7, sequence, 1, index=sequence)
    old = owner.refusal(owner.admit(7, 5, 2, TERM), 7, 5, TERM, "t/0")
    assert isinstance(old, OutOfOrderSequence) and old.behind and not old.in_flight, old
    assert "written long ago" in str(old)
