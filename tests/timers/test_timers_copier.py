"""The simulator's source partition and copier against the node's (`cluster.producers`,
`cluster.idempotence`, `cluster.copy_produce`): a partition remembers a producer's last batches
only, so a batch older than those is answered behind and the copier takes it as written; and
the sweep catches the copier that rebased such a batch (the failover of a CI run that fired
timers twice) as "fired-twice", while the right copier gives no violation."""

from __future__ import annotations

from timers.faults import NO_FAULTS, TimerFaults
from timers.sim.firing import FIRE_PRODUCER, Copier
from timers.sim.parts import FORGET_AFTER_MS, SOURCE_WINDOW, SourcePartition
from timers.sim.runner import sweep

P = (FIRE_PRODUCER, -1)


def written(source: SourcePartition, batches: int, now_ms: int = 0) -> None:
    """`batches` batches of 2 records from sequence 0, each appended."""
    for number in range(batches):
        assert source.append(P, 2 * number, 2, now_ms) == "appended"


def test_the_source_remembers_only_the_last_batches_of_a_producer() -> None:
    source = SourcePartition()
    written(source, SOURCE_WINDOW + 2)  # sequences 0, 2, ... ; next is 2 * (window + 2)
    assert source.append(P, 2 * (SOURCE_WINDOW + 1), 2, 0) == "duplicate"  # the latest
    assert source.append(P, 4, 2, 0) == "duplicate"  # the oldest still remembered
    assert source.append(P, 2, 2, 0) == "behind"  # written, forgotten
    assert source.append(P, 0, 2, 0) == "behind"
    assert source.append(P, 2 * (SOURCE_WINDOW + 3), 2, 0) == "out-of-order"  # a gap ahead
    assert source.append((FIRE_PRODUCER, 7), 5, 1, 0) == "unknown"  # unknown, not at 0
    assert source.append((FIRE_PRODUCER, 7), 0, 1, 0) == "appended"  # a producer starts at 0
    assert source.next_sequence(P) == 2 * (SOURCE_WINDOW + 2)  # refusals changed nothing


def test_an_idle_producer_is_forgotten_and_starts_again() -> None:
    source = SourcePartition()
    written(source, 2, now_ms=0)
    assert source.append(P, 2, 2, FORGET_AFTER_MS) == "duplicate"  # idle, not for too long
    assert source.append(P, 2, 2, FORGET_AFTER_MS + 1) == "unknown"  # forgotten
    assert source.forgotten == 1
    assert source.append(P, 0, 2, FORGET_AFTER_MS + 2) == "appended"  # starts afresh at 0


def test_the_copier_takes_behind_as_written_and_rebases_a_gap_once() -> None:
    stats = {"behind_answers": 0, "rebases": 0}
    source = SourcePartition()
    copier = Copier(source, NO_FAULTS, stats)
    for number in range(SOURCE_WINDOW + 2):
        assert copier.copy(2 * number, 2, 0) == "landed"
    assert copier.copy(0, 2, 0) == "written"  # behind: never sent under another id
    assert copier.copy(2 * SOURCE_WINDOW, 2, 0) == "written"  # a duplicate
    assert stats == {"behind_answers": 1, "rebases": 0}
    ahead = 2 * (SOURCE_WINDOW + 5)
    assert copier.copy(ahead, 2, 0) == "landed"  # a gap ahead: rebased, at sequence 0
    assert copier.copy(ahead, 2, 0) == "written"  # its repeat: a duplicate where it went
    assert stats == {"behind_answers": 1, "rebases": 2}


def test_the_old_copier_writes_a_behind_batch_twice() -> None:
    """The deliberate bug the sweep must catch: behind rebased lands a second copy."""
    stats = {"behind_answers": 0, "rebases": 0}
    copier = Copier(SourcePartition(), TimerFaults(rebase_behind=True), stats)
    for number in range(SOURCE_WINDOW + 1):
        assert copier.copy(2 * number, 2, 0) == "landed"
    assert copier.copy(0, 2, 0) == "landed"
    assert stats == {"behind_answers": 1, "rebases": 1}


def test_a_resend_that_races_its_first_copy_is_answered_in_flight_then_as_a_duplicate() -> None:
    """A pipeline's Produce that failed on its deadline while the leader still had the batch
    proposed: the one-by-one resend is refused as in flight (SEQUENCE_IN_FLIGHT) and the first
    copy lands; the copier sends the same again (a duplicate), never rebased."""
    source = SourcePartition()
    written(source, 2)
    source.hold(P, 4, 2, "held")
    assert source.append(P, 2, 2, 0) == "duplicate"  # an earlier batch: the held one waits
    assert source.take_landed() == []
    assert source.append(P, 4, 2, 0) == "in-flight"
    assert source.take_landed() == ["held"] and source.next_sequence(P) == 6
    stats = {"in_flight_answers": 0, "rebases": 0}
    copier = Copier(source, NO_FAULTS, stats)
    source.hold(P, 6, 2, "again")
    assert copier.copy(6, 2, 0) == "written"  # in flight, then a duplicate: written once
    assert source.take_landed() == ["again"]
    assert stats == {"in_flight_answers": 1, "rebases": 0}


def test_the_old_copier_writes_a_batch_in_flight_twice() -> None:
    """The deliberate bug the sweep must catch: any ABORTED but behind rebased, as before
    SEQUENCE_IN_FLIGHT: the first copy lands, and the rebased one."""
    stats = {"in_flight_answers": 0, "rebases": 0}
    source = SourcePartition()
    copier = Copier(source, TimerFaults(rebase_in_flight=True), stats)
    source.hold(P, 0, 2, "first")
    assert copier.copy(0, 2, 0) == "landed"
    assert source.take_landed() == ["first"]  # and the rebased copy landed too
    assert stats == {"in_flight_answers": 1, "rebases": 1}


SEEDS, STEPS = range(4), 300


def test_the_sweep_catches_the_old_copier_and_passes_the_right_one() -> None:
    broken = sweep(SEEDS, STEPS, fault="rebase_behind")
    assert len(broken.failures) >= 2, [f.replay for f in broken.failures]
    for failure in broken.failures:
        assert failure.violation == "fired-twice", f"{failure.violation}: {failure.detail}"
    right = sweep(SEEDS, STEPS)
    assert not right.failures, [f"{f.violation}: {f.detail}" for f in right.failures]
    # the model was exercised: plans fired again past the window after a crash, behind answers
    assert right.stats["crashes_after_fire"] > 0 and right.stats["behind_answers"] > 0
    assert right.stats["pipeline_failures"] > 0
    # a plan after a long gap fires as a new fire producer: the source never forgot the one it
    # continues, so nothing is rebased (the rebase path is the pure tests' above)
    assert right.stats["fire_epochs"] > 0 and right.stats["rebases"] == 0
