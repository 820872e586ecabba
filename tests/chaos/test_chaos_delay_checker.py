"""The delayed-delivery checker (chaos.delay_checker) on hand-made histories: a clean one passes,
and each rule it states is caught in a history broken to violate it."""

from __future__ import annotations

from chaos.delay_checker import (
    DELAY_ANOMALIES,
    DelayBounds,
    check_delayed,
    delayed_value,
    due_of,
    percentile,
)
from chaos.history import Event, EventType

OK, FAIL, INFO, INVOKE = EventType.OK, EventType.FAIL, EventType.INFO, EventType.INVOKE
T0_MS = 1_800_000_000_000  # wall ms at monotonic t = 0
A = delayed_value(0, 0, T0_MS + 2000)
B = delayed_value(0, 1, T0_MS + 3000)
C = delayed_value(1, 0, T0_MS + 3000)  # due at B's instant
D = delayed_value(1, 1, T0_MS + 500)  # due before it was sent: due at once


class History:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.final: dict[int, list[tuple[int, str]]] = {0: [], 1: []}

    def add(self, process: str, type_: EventType, f: str, at_ms: int, **fields: object) -> History:
        event = Event((at_ms - T0_MS) / 1000, process, type_, f, wall_ms=at_ms, **fields)  # type: ignore[arg-type]
        self.events.append(event)
        return self

    def produce(self, value: str, p: int, at_ms: int, type_: EventType = OK) -> History:
        self.add("delayer-0", INVOKE, "delay-produce", at_ms, value=value, partition=p)
        return self.add("delayer-0", type_, "delay-produce", at_ms + 5, value=value, partition=p)

    def fire(self, value: str, p: int, seen_ms: int | None) -> History:
        offset = len(self.final[p])
        self.final[p].append((offset, value))
        if seen_ms is not None:
            self.add(f"follower-{p}", OK, "delay-seen", seen_ms, value=value, partition=p,
                     offset=offset)  # fmt: skip
        return self

    def fault(self, name: str, start_ms: int, stop_ms: int) -> History:
        self.events.append(Event((start_ms - T0_MS) / 1000, "nemesis", INFO, "fault-start",
                                 value=name))  # fmt: skip
        self.events.append(Event((stop_ms - T0_MS) / 1000, "nemesis", INFO, "fault-stop",
                                 value=name))  # fmt: skip
        return self

    def check(self, final_ms: int = T0_MS + 10_000) -> dict[str, list[str]]:
        self.events.sort(key=lambda e: e.t)
        self.add("delayer", OK, "delay-followed", final_ms - 100)
        result = check_delayed(self.events, self.final, final_ms=final_ms, bounds=BOUNDS)
        return {kind: items for kind, items in result.found.items() if items}


BOUNDS = DelayBounds(quiet_ms=1000, fault_ms=2000, grace_s=1.0)


def clean() -> History:
    h = History()
    h.produce(A, 0, T0_MS).produce(B, 0, T0_MS + 10).produce(C, 1, T0_MS + 20)
    h.produce(D, 1, T0_MS + 1000)
    h.fire(D, 1, T0_MS + 1040).fire(A, 0, T0_MS + 2030).fire(B, 0, T0_MS + 3010)
    return h.fire(C, 1, T0_MS + 3090)


def test_a_clean_history_passes_and_reports_lateness_from_the_due_time_or_the_ack() -> None:
    h = clean()
    h.events.sort(key=lambda e: e.t)
    result = check_delayed(h.events, h.final, final_ms=T0_MS + 10_000, bounds=BOUNDS)
    assert result.ok, result.found
    assert set(result.found) == set(DELAY_ANOMALIES)
    assert (result.acked, result.failed, result.unknown, result.fired) == (4, 0, 0, 4)
    # D was due before its ack (at T0+1005): its lateness counts from the ack
    assert result.lateness_ms == (10, 30, 35, 90)
    assert result.lateness() == {"p50": 30, "p99": 90, "max": 90}
    assert "lateness ms" in result.summary()


def test_fired_twice_is_caught() -> None:
    h = clean().fire(B, 0, None)  # the mutation to catch: a timer fired twice
    assert list(h.check()) == ["twice"]


def test_one_record_seen_at_two_offsets_is_caught() -> None:
    h = clean()
    h.add("follower-0", OK, "delay-seen", T0_MS + 3500, value=B, partition=0, offset=7)
    assert list(h.check()) == ["twice"]


def test_seen_before_due_is_early() -> None:
    h = History().produce(A, 0, T0_MS).fire(A, 0, T0_MS + 1999)
    assert list(h.check()) == ["early"]


def test_lateness_beyond_the_quiet_bound_is_caught_and_a_fault_allows_more() -> None:
    late = History().produce(A, 0, T0_MS).fire(A, 0, T0_MS + 3100)  # 1100 ms late
    assert list(late.check()) == ["late"]
    during = History().produce(A, 0, T0_MS).fire(A, 0, T0_MS + 3100)
    during.fault("kill-leader#0", T0_MS + 1500, T0_MS + 1800)  # due within stop + grace
    assert during.check() == {}
    # due just before the fault began: it may have been firing when the fault hit
    before = History().produce(A, 0, T0_MS).fire(A, 0, T0_MS + 3100)
    before.fault("kill-leader#0", T0_MS + 2900, T0_MS + 3500)
    assert before.check() == {}
    long_before = History().produce(A, 0, T0_MS).fire(A, 0, T0_MS + 3100)
    long_before.fault("kill-leader#0", T0_MS + 3050, T0_MS + 3500)
    assert list(long_before.check()) == ["late"]
    too_late = History().produce(A, 0, T0_MS).fire(A, 0, T0_MS + 4100)  # 2100 ms late
    too_late.fault("kill-leader#0", T0_MS + 1500, T0_MS + 1800)
    assert list(too_late.check()) == ["late"]


def test_a_record_in_the_log_that_the_followers_never_saw_is_late() -> None:
    h = History().produce(A, 0, T0_MS).fire(A, 0, None)
    assert list(h.check()) == ["late"]


def test_an_acknowledged_record_missing_from_the_log_is_lost_once_due() -> None:
    h = History().produce(A, 0, T0_MS).produce(B, 0, T0_MS)
    h.fire(A, 0, T0_MS + 2010)
    assert list(h.check()) == ["lost"]
    # not yet due (within the bound) at the final read: not judged
    assert h.check(final_ms=T0_MS + 3500) == {}


def test_unknown_and_failed_outcomes() -> None:
    h = History().produce(A, 0, T0_MS, INFO).produce(B, 0, T0_MS, INFO)
    h.fire(A, 0, T0_MS + 2100)  # an unknown one in the log once: fine; B absent: fine
    assert h.check() == {}
    h.fire(A, 0, None)
    assert list(h.check()) == ["twice"]
    failed = History().produce(A, 0, T0_MS, FAIL).fire(A, 0, T0_MS + 2100)
    assert list(failed.check()) == ["unexpected"]


def test_a_record_never_produced_or_in_another_partition_is_unexpected() -> None:
    h = History().fire(A, 0, T0_MS + 2010)
    assert list(h.check()) == ["unexpected"]
    moved = History().produce(A, 1, T0_MS).fire(A, 0, T0_MS + 2010)
    assert list(moved.check()) == ["unexpected"]


def test_a_sighting_the_final_log_contradicts_is_wrong() -> None:
    h = History().produce(A, 0, T0_MS).fire(A, 0, T0_MS + 2010)
    h.add("follower-0", OK, "delay-seen", T0_MS + 2020, value=B, partition=0, offset=0)
    found = h.check()
    assert "wrong" in found, found


def test_records_known_together_fire_in_due_order() -> None:
    h = History().produce(B, 0, T0_MS).produce(A, 0, T0_MS)  # A is due first
    h.fire(B, 0, T0_MS + 3010).fire(A, 0, T0_MS + 3020)
    assert set(h.check()) == {"order", "late"}
    # accepted too late to be ordered with the other: no order claim
    close = History().produce(B, 0, T0_MS).produce(A, 0, T0_MS + 1800)
    close.fire(B, 0, T0_MS + 3010).fire(A, 0, T0_MS + 3020)
    assert set(close.check()) == {"late"}


def test_values_and_percentiles() -> None:
    assert due_of(delayed_value(3, 14, 1234)) == 1234
    assert due_of("p0-1") is None and due_of("d0-1@x") is None
    assert percentile((), 50) is None
    values = tuple(range(1, 101))
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (
        50,
        99,
        100,
    )
    assert percentile((7,), 99) == 7
