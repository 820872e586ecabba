"""Fire-producer epochs (issue 26): a plan made after the source partition may have forgotten
the idle fire producer fires as the next epoch's producer at sequence 0, and the epoch travels
in the plan record, so a plan fired again after a failover is a duplicate at the source.

Pure and fast: the planner (`TimerBook`), the plan record as the node writes and folds it
(`plan_batch` / `classify`), the producer id the node fires under (`fire_producer_id`) and the
source partition's own verdicts (`cluster.idempotence.Idempotence`, with its real one-day
expiry measured on entry timestamps)."""

from __future__ import annotations

import msgpack
import pytest

from cluster.idempotence import Duplicate, Fresh, Idempotence, ProducerUnknown
from cluster.producers import EXPIRATION_MS, BatchRef
from cluster.timer_log import TimerLogError, classify, decode_plan, plan_batch
from cluster.timers import fire_producer_id
from timers.book import TimerBook
from timers.types import FIRE_RENEW_MS, Plan, TimerBatch, TimerConfig

UID, PARTITION, TERM = "uid-7", 3, 2
T0 = 1_700_000_000_000
HOUR = 3_600_000


class Source:
    """The source partition's idempotence, fed what its log holds (one entry per batch)."""

    def __init__(self) -> None:
        self.idempotence = Idempotence()
        self.index = 0

    def append(self, producer: int, sequence: int, count: int, at_ms: int) -> object:
        verdict = self.idempotence.admit(producer, sequence, count, TERM)
        if isinstance(verdict, Fresh):
            self.index += 1
            ref = BatchRef(self.index, TERM, count, at_ms)
            self.idempotence.written(producer, sequence, ref)
        return verdict


def replicated(plan: Plan, offset: int) -> Plan:
    """The plan as every replica folds it from its record."""
    folded = classify(plan_batch(plan, plan.made_ms), offset, 1)
    assert folded == plan
    return folded


def fire(source: Source, plan: Plan, at_ms: int) -> list[object]:
    producer = fire_producer_id(UID, PARTITION, plan.epoch)
    sequence, verdicts = plan.sequence, []
    for batch in plan.batches:
        verdicts.append(source.append(producer, sequence, batch.record_count, at_ms))
        sequence += batch.record_count
    return verdicts


def test_the_renewal_leaves_half_the_source_expiry_to_spare() -> None:
    assert TimerConfig().fire_renew_ms == FIRE_RENEW_MS
    assert 2 * FIRE_RENEW_MS <= EXPIRATION_MS


def test_a_plan_after_a_day_idle_fires_as_a_new_producer_and_a_repeat_is_a_duplicate() -> None:
    source, book = Source(), TimerBook(TimerConfig())
    book.restore({}, None)
    book.buckets_to_load(T0)
    book.accepted(TimerBatch(T0, 0, 2))
    book.accepted(TimerBatch(T0, 1, 3))
    first = book.next_plan(T0)
    assert first is not None and (first.epoch, first.sequence) == (0, 0)
    book.planned(replicated(first, 2))
    assert all(isinstance(v, Fresh) for v in fire(source, first, T0))
    marker = book.done_marker()
    assert marker == Plan(5, (), 0, T0)
    book.planned(replicated(marker, 3))

    # within half a day: the same producer goes on
    soon = T0 + FIRE_RENEW_MS - 1
    book.buckets_to_load(soon)
    book.accepted(TimerBatch(soon, 4, 1))
    plan = book.next_plan(soon)
    assert plan is not None and (plan.epoch, plan.sequence) == (0, 5)
    book.planned(replicated(plan, 5))
    assert fire(source, plan, soon) == [Fresh(6)]
    marker = book.done_marker()
    assert marker == Plan(6, (), 0, soon)
    book.planned(replicated(marker, 6))

    # a day and an hour without firing; another producer's batch moves the source's clock
    later = soon + EXPIRATION_MS + HOUR
    source.append(99, 0, 1, later)
    old = fire_producer_id(UID, PARTITION, 0)
    # what the old rule fired: the forgotten producer's next sequence, refused unknown
    assert isinstance(source.idempotence.admit(old, 6, 1, TERM), ProducerUnknown)
    book.buckets_to_load(later)
    book.accepted(TimerBatch(later, 7, 2))
    renewed = book.next_plan(later)
    assert renewed is not None and (renewed.epoch, renewed.sequence) == (1, 0)
    assert fire_producer_id(UID, PARTITION, 1) not in (old, 0)
    book.planned(replicated(renewed, 9))
    assert fire(source, renewed, later) == [Fresh(2)]  # no rebase: written at once

    # a new leader (the marker lost with the old one) folds the record: the same epoch and
    # sequence again, answered as a duplicate
    again = TimerBook(TimerConfig())
    again.restore({}, renewed)
    assert again.last_plan == renewed
    repeat = fire(source, renewed, later + 1_000)
    assert len(repeat) == 1 and isinstance(repeat[0], Duplicate)
    # an older plan's record folded again is a repeat, also across epochs
    again.planned(plan)
    assert again.last_plan == renewed


def test_plan_records_from_before_epochs_are_read_as_epoch_zero() -> None:
    old = msgpack.packb([40, [[T0, 3, 5]]])
    assert decode_plan(old) == Plan(40, (TimerBatch(T0, 3, 5),), 0, 0)
    book = TimerBook(TimerConfig())
    book.restore({}, decode_plan(old))  # its time unknown: the next plan starts afresh
    book.buckets_to_load(T0)
    book.accepted(TimerBatch(T0, 9, 1))
    assert book.next_plan(T0) == Plan(0, (TimerBatch(T0, 9, 1),), 1, T0)
    for bad in ([40, [], -1, T0], [40, [], 1], [40], {"sequence": 40}):
        with pytest.raises(TimerLogError, match="epoch"):
            decode_plan(msgpack.packb(bad))
