"""The consumer-group checker (chaos.group_checker) on hand-made histories: a clean one passes,
and each anomaly it names is caught in a history made to have it."""

from __future__ import annotations

from chaos.group_checker import GROUP_ANOMALIES, check_group
from chaos.history import Event, EventType

OK, INVOKE = EventType.OK, EventType.INVOKE
FINAL = {0: [(0, "a"), (1, "b"), (2, "c"), (3, "d")], 1: [(0, "x")]}


class History:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, process: str, type_: EventType, f: str, **fields: object) -> History:
        t = float(len(self.events))
        self.events.append(Event(t, process, type_, f, **fields))  # type: ignore[arg-type]
        return self

    def poll(self, member: str, partition: int, pairs: list[tuple[int, str]]) -> History:
        self.add(member, INVOKE, "poll")
        self.add(member, OK, "consume", partition=partition, records=tuple(pairs))
        return self.add(member, OK, "poll")

    def commit(self, member: str, partition: int, offset: int, type_: EventType = OK) -> History:
        self.add(member, INVOKE, "commit", records=((partition, str(offset)),))
        return self.add(member, type_, "commit")


def clean() -> History:
    h = History()
    h.add("member-0", OK, "assign", partition=0).add("member-0", OK, "assign", partition=1)
    h.poll("member-0", 0, [(0, "a"), (1, "b")]).commit("member-0", 0, 2)
    h.add("member-0", OK, "revoke", partition=0).add("member-1", OK, "assign", partition=0)
    h.poll("member-1", 0, [(2, "c"), (3, "d")]).poll("member-0", 1, [(0, "x")])
    h.commit("member-1", 0, 4).commit("member-0", 1, 1)
    return h.add("group", OK, "drained")


def counts(h: History, committed: dict[int, int]) -> dict[str, int]:
    return {kind: len(items) for kind, items in check_group(h.events, FINAL, committed).items()}


def test_a_clean_history_passes() -> None:
    assert counts(clean(), {0: 4, 1: 1}) == dict.fromkeys(GROUP_ANOMALIES, 0)


def test_a_record_no_member_consumed_is_skipped() -> None:
    h = History()
    h.poll("member-0", 0, [(0, "a"), (1, "b"), (3, "d")]).poll("member-0", 1, [(0, "x")])
    h.add("group", OK, "drained")
    found = check_group(h.events, FINAL, {})
    assert len(found["skipped"]) == 1 and "[2]" in found["skipped"][0]
    # without the drain the run may have ended early: nothing is called skipped
    assert not check_group(h.events[:-1], FINAL, {})["skipped"]


def test_a_new_owner_reading_below_an_acknowledged_commit_is_rewound() -> None:
    h = History().poll("member-0", 0, [(0, "a"), (1, "b"), (2, "c")]).commit("member-0", 0, 3)
    h.add("member-1", OK, "assign", partition=0).poll("member-1", 0, [(1, "b"), (2, "c")])
    assert counts(h, {0: 3})["rewound"] == 2
    # a commit that was not acknowledged sets no floor
    h2 = History().poll("member-0", 0, [(0, "a")])
    h2.commit("member-0", 0, 3, EventType.INFO).poll("member-1", 0, [(1, "b")])
    assert counts(h2, {})["rewound"] == 0


def test_two_members_taking_turns_without_a_new_assignment_interleave() -> None:
    h = History().add("member-0", OK, "assign", partition=0)
    h.poll("member-0", 0, [(0, "a")]).poll("member-1", 0, [(1, "b")])
    h.poll("member-0", 0, [(2, "c")])
    assert counts(h, {})["interleaved"] == 1
    # the same turns with the partition assigned back in between are fine
    h2 = History().poll("member-0", 0, [(0, "a")]).poll("member-1", 0, [(1, "b")])
    h2.add("member-0", OK, "assign", partition=0).poll("member-0", 0, [(2, "c")])
    assert counts(h2, {})["interleaved"] == 0


def test_a_final_committed_offset_below_an_acknowledged_commit_regressed() -> None:
    assert counts(clean(), {0: 2, 1: 1})["regressed"] == 1
    assert counts(clean(), {1: 1})["regressed"] == 1  # lost altogether


def test_a_record_consumed_with_another_value_is_wrong() -> None:
    h = History().poll("member-0", 0, [(0, "a"), (1, "zz")])
    assert counts(h, {})["wrong"] == 1


def test_a_poll_already_out_when_another_member_took_over_orders_nothing() -> None:
    """A member paused with its fetch out delivers after the partition moved (a zombie: its
    commit is fenced): its poll began before the new owner's delivery, so the two are
    concurrent and prove no double ownership; the new owner goes on without a new assignment."""
    h = History().add("member-0", OK, "assign", partition=0)
    h.poll("member-0", 0, [(0, "a")])
    h.add("member-0", INVOKE, "poll")  # the fetch goes out; the process is paused
    h.add("member-1", OK, "assign", partition=0).poll("member-1", 0, [(1, "b")])
    h.add("member-0", OK, "consume", partition=0, records=((1, "b"),)).add("member-0", OK, "poll")
    h.poll("member-1", 0, [(2, "c")])
    assert counts(h, {})["interleaved"] == 0
    # but once its next poll begins after the new owner's delivery, it is judged again
    h.poll("member-0", 0, [(3, "d")])
    assert counts(h, {})["interleaved"] == 1
