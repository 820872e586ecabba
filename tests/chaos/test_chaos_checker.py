"""The checker on crafted histories: a clean one passes, and each anomaly is caught."""

from __future__ import annotations

from pathlib import Path

from chaos.checker import check
from chaos.history import Event, EventType, HistoryWriter, load_history

INVOKE, OK, FAIL, INFO = EventType.INVOKE, EventType.OK, EventType.FAIL, EventType.INFO


def produce(t: float, type_: EventType, value: str, offset: int = -1) -> Event:
    return Event(t, "producer-1", type_, "produce", partition=0, value=value, offset=offset)


def read(t: float, replica: str, records: list[tuple[int, str]]) -> Event:
    return Event(t, f"reader-{replica}", OK, "read", 0, replica=replica, records=tuple(records))


def clean_history() -> list[Event]:
    return [
        produce(1, INVOKE, "a"),
        produce(2, OK, "a", 0),
        produce(3, INVOKE, "b"),
        produce(4, INFO, "b"),
        produce(5, INVOKE, "c"),
        produce(6, OK, "c", 2),
        read(7, "n2", [(0, "a"), (1, "b")]),
    ]


LOG = [(0, "a"), (1, "b"), (2, "c")]


def test_a_clean_history_passes() -> None:
    result = check(clean_history(), {0: {"n1": LOG, "n2": LOG, "n3": LOG[:2]}})
    assert result.ok, result.summary()
    assert (result.acked, result.unknown, result.unknown_committed) == (2, 1, 1)


def test_an_unknown_outcome_may_be_absent() -> None:
    log = [(0, "a"), (1, "c")]
    events = [*clean_history()[:4], produce(5, INVOKE, "c"), produce(6, OK, "c", 1)]
    assert check(events, {0: {"n1": log, "n2": log}}).ok


def test_lost_acknowledged_write() -> None:
    result = check(clean_history(), {0: {"n1": LOG[:2], "n2": LOG[:2]}})
    assert result.counts["lost"] == 1 and "'c'" in result.lost[0]


def test_duplicated_value_including_an_unknown_outcome_twice() -> None:
    log = [*LOG, (3, "b")]
    result = check(clean_history(), {0: {"n1": log, "n2": log}})
    assert result.counts["duplicated"] == 1 and "'b'" in result.duplicated[0]


def test_divergent_replicas() -> None:
    other = [(0, "a"), (1, "x"), (2, "c")]
    result = check(clean_history(), {0: {"n1": LOG, "n2": other}})
    assert result.counts["divergent"] == 1


def test_offsets_not_dense_in_a_log_or_a_read() -> None:
    gap = [(0, "a"), (2, "b"), (3, "c")]
    assert check(clean_history(), {0: {"n1": gap}}).counts["offsets"] >= 1
    events = [*clean_history(), read(8, "n1", [(0, "a"), (2, "c")])]
    assert check(events, {0: {"n1": LOG}}).counts["offsets"] == 1


def test_one_offset_read_with_two_values() -> None:
    events = [*clean_history(), read(8, "n3", [(1, "c")])]
    result = check(events, {0: {"n1": LOG}})
    assert result.counts["offsets"] == 1 and "offset 1" in result.offsets[0]


def test_phantom_read() -> None:
    events = [*clean_history(), read(8, "n1", [(3, "ghost")])]
    result = check(events, {0: {"n1": LOG}})
    assert result.counts["phantom"] == 1 and "ghost" in result.phantom[0]


def test_failed_write_that_is_committed() -> None:
    events = [*clean_history()[:2], produce(3, INVOKE, "b"), produce(4, FAIL, "b")]
    assert check(events, {0: {"n1": LOG[:2]}}).counts["unexpected"] == 1


def test_a_fault_whose_effect_was_not_seen() -> None:
    problem = "n2 was still running 30 s after EIO on fsync was armed"
    events = [*clean_history(), Event(8, "nemesis", FAIL, "fault-check", value=problem)]
    result = check(events, {0: {"n1": LOG}})
    assert result.counts["faults"] == 1 and result.faults == (problem,) and not result.ok


def test_availability_figures() -> None:
    events = [
        Event(0, "monitor", OK, "leader", 0, value="n1"),
        Event(1, "nemesis", INFO, "fault-start", value="kill-leader"),
        produce(1.1, INVOKE, "a"),
        produce(1.5, INFO, "a"),
        Event(2, "monitor", OK, "leader", 0, value="n2"),
        Event(3, "nemesis", INFO, "fault-stop", value="kill-leader"),
        produce(3.1, INVOKE, "b"),
        produce(3.5, OK, "b", 0),
    ]
    figures = check(events, {0: {"n1": [(0, "b")]}}).availability
    assert figures.produces_during_faults == 1 and figures.fraction_during_faults == 0.0
    assert figures.leader_changes == 1
    assert [round(s, 2) for s in figures.first_ok_after_heal_s] == [0.5]


def test_history_round_trips_through_jsonl(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / "history.jsonl")
    writer.record("producer-1", INVOKE, "produce", partition=0, value="p1-0")
    writer.record("reader-n1", OK, "read", partition=0, replica="n1", records=((0, "p1-0"),))
    writer.close()
    loaded = load_history(tmp_path / "history.jsonl")
    assert loaded == writer.events
    assert loaded[0].t <= loaded[1].t
