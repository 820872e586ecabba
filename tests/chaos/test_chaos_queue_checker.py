"""The queue checker (chaos.queue_checker) on hand-made histories: a clean one passes, and each
rule it states is caught in a history broken to violate it."""

from __future__ import annotations

from chaos.history import Event, EventType
from chaos.queue_checker import QUEUE_ANOMALIES, DeadLetter, check_queue

OK, FAIL, INFO, INVOKE = EventType.OK, EventType.FAIL, EventType.INFO, EventType.INVOKE
TOPIC, MAX = "jobs", 3
FINAL = {0: [(0, "a"), (1, "b"), (2, "c")], 1: [(0, "x"), (1, "y")]}
INVISIBLE_MS = 1000


class History:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.letters: list[DeadLetter] = []

    def add(self, process: str, type_: EventType, f: str, **fields: object) -> History:
        t = float(len(self.events))
        self.events.append(Event(t, process, type_, f, **fields))  # type: ignore[arg-type]
        return self

    def lease(self, who: str, p: int, offset: int, count: int, at_ms: int) -> History:
        value = dict(FINAL[p]).get(offset, "?")
        return self.add(who, OK, "lease", partition=p, offset=offset, value=value, count=count,
                        wall_ms=at_ms, deadline_ms=at_ms + INVISIBLE_MS)  # fmt: skip

    def settle(
        self, who: str, f: str, p: int, offset: int, count: int, at_ms: int, type_: EventType = OK
    ) -> History:
        """One delivery's settlement as the workload writes it: its invoke, then `type_` (an
        invoke alone: the receiver died during the call)."""
        fields = {"partition": p, "offset": offset, "count": count, "wall_ms": at_ms}
        self.add(who, INVOKE, f, **fields)
        return self if type_ is INVOKE else self.add(who, type_, f, **fields)

    def letter(
        self, p: int, offset: int, deliveries: int, reason: str, **changes: object
    ) -> History:
        headers = {
            "flotilla-dlq-topic": TOPIC,
            "flotilla-dlq-partition": str(p),
            "flotilla-dlq-offset": str(offset),
            "flotilla-dlq-deliveries": str(deliveries),
            "flotilla-dlq-reason": reason,
        }
        headers.update({name: str(v) for name, v in changes.items() if v is not None})
        for name, v in changes.items():
            if v is None:
                del headers[name]
        value = dict(FINAL[p]).get(offset, "?")
        pairs = tuple((name, text.encode()) for name, text in headers.items())
        self.letters.append(DeadLetter(p % 2, len(self.letters), value, pairs))
        return self

    def check(self) -> dict[str, list[str]]:
        return check_queue(self.events, FINAL, self.letters, topic=TOPIC, max_deliveries=MAX,
                           dead_letter_partitions=2)  # fmt: skip

    def counts(self) -> dict[str, int]:
        return {kind: len(items) for kind, items in self.check().items() if items}


def clean() -> History:
    """Every way a record ends: acked at once; released and acked by another; its lease expired
    and acked later; rejected; expired max-deliveries times; held by a receiver that crashed
    and acked by another after the deadline; an ack of unknown outcome (never redelivered)."""
    h = History()
    h.lease("r0", 0, 0, 1, 1000).settle("r0", "ack", 0, 0, 1, 1100)
    h.lease("r0", 0, 1, 1, 1000).settle("r0", "release", 0, 1, 1, 1200)
    h.lease("r1", 0, 1, 2, 1300).settle("r1", "ack", 0, 1, 2, 1400)
    h.lease("r1", 0, 2, 1, 1000).lease("r2", 0, 2, 2, 2500)  # r1 let it expire
    h.settle("r1", "ack", 0, 2, 1, 2600, FAIL).settle("r2", "ack", 0, 2, 2, 2700)
    h.lease("r2", 1, 0, 1, 1000).settle("r2", "reject", 1, 0, 1, 1500).letter(1, 0, 1, "rejected")
    for count in range(1, MAX + 1):
        h.lease(f"r{count}", 1, 1, count, 1000 + 2000 * count)
    h.letter(1, 1, MAX, "max-deliveries")
    return h.add("queue", OK, "drained")


def test_a_clean_history_passes() -> None:
    assert clean().counts() == {}


def test_a_record_neither_acked_nor_dead_lettered_is_unsettled() -> None:
    h = clean()
    h.letters.pop()  # the max-deliveries record never reached the dead letters
    found = h.check()
    assert len(found["unsettled"]) == 1 and "p1 offset 1" in found["unsettled"][0]
    assert "after a complete drain" in found["unsettled"][0]


def test_an_ack_of_unknown_outcome_settles_a_record_but_a_lost_one_does_not() -> None:
    h = History().lease("r0", 0, 0, 1, 1000).settle("r0", "ack", 0, 0, 1, 1100, INFO)
    assert not any("p0 offset 0" in item for item in h.check()["unsettled"])
    h2 = History().lease("r0", 0, 0, 1, 1000).settle("r0", "ack", 0, 0, 1, 1100, FAIL)
    assert any("p0 offset 0" in item for item in h2.check()["unsettled"])
    # an ack whose receiver died during the call (an invoke, no completion) may have applied
    h3 = History().lease("r0", 0, 0, 1, 1000).settle("r0", "ack", 0, 0, 1, 1100, INVOKE)
    assert not any("p0 offset 0" in item for item in h3.check()["unsettled"])
    # the same invoke completed as lost settles nothing
    h3.settle("r0", "ack", 0, 0, 1, 1100, FAIL)
    assert any("p0 offset 0" in item for item in h3.check()["unsettled"])


def test_a_record_acked_twice_is_caught() -> None:
    h = clean()
    h.lease("r3", 0, 0, 2, 9000).settle("r3", "ack", 0, 0, 2, 9100)  # handed out again after ack
    assert h.counts() == {"acked-twice": 1}


def test_a_record_acked_and_dead_lettered_is_caught() -> None:
    h = clean().letter(0, 0, 1, "rejected")
    counts = h.counts()
    assert counts["acked-and-dead-lettered"] == 1
    # the letter also claims a reject that never happened
    assert counts["bad-dead-letter"] == 1


def test_a_record_dead_lettered_twice_is_caught() -> None:
    h = clean().letter(1, 1, MAX, "max-deliveries")  # a copy repeated after a failover
    assert h.counts() == {"dead-lettered-twice": 1}


def test_two_receivers_holding_a_record_before_its_deadline_overlap() -> None:
    h = History().lease("r0", 0, 0, 1, 1000)  # deadline 2000
    h.lease("r1", 0, 0, 2, 1500).settle("r1", "ack", 0, 0, 2, 1600)
    assert h.counts() == {"overlapping": 1, "unsettled": 4}
    found = h.check()["overlapping"][0]
    assert "500 ms before the deadline of r0's lease" in found


def test_a_lease_ended_by_its_holder_may_be_handed_out_before_its_deadline() -> None:
    for how in ("release", "reject"):
        h = History().lease("r0", 0, 0, 1, 1000).settle("r0", how, 0, 0, 1, 1200)
        h.lease("r1", 0, 0, 2, 1500)
        assert "overlapping" not in h.counts(), how
    # a release of unknown outcome may have ended it; a lost one (LeaseLost) did not
    h = History().lease("r0", 0, 0, 1, 1000).settle("r0", "release", 0, 0, 1, 1200, INFO)
    assert "overlapping" not in h.lease("r1", 0, 0, 2, 1500).counts()
    h = History().lease("r0", 0, 0, 1, 1000).settle("r0", "release", 0, 0, 1, 1200, FAIL)
    assert h.lease("r1", 0, 0, 2, 1500).counts()["overlapping"] == 1
    # a release by another receiver (not the holder) ends nothing
    h = History().lease("r0", 0, 0, 1, 1000).settle("r9", "release", 0, 0, 1, 1200)
    assert h.lease("r1", 0, 0, 2, 1500).counts()["overlapping"] == 1
    # a release begun after the second hand-out did not end the lease in time
    h = History().lease("r0", 0, 0, 1, 1000).settle("r0", "release", 0, 0, 1, 1700)
    assert h.lease("r1", 0, 0, 2, 1500).counts()["overlapping"] == 1


def test_a_holder_that_crashed_or_closed_gives_its_leases_up() -> None:
    for how in ("crash", "close"):
        h = History().lease("r0", 0, 0, 1, 1000).add("r0", OK, how, wall_ms=1200)
        assert "overlapping" not in h.lease("r1", 0, 0, 2, 1500).counts(), how
    # with the session timeout known, a crash ends leases no sooner than half of it later
    h = History().lease("r0", 0, 0, 1, 1000).add("r0", OK, "crash", wall_ms=1200)
    h.lease("r1", 0, 0, 2, 1500)
    strict = check_queue(h.events, FINAL, [], topic=TOPIC, max_deliveries=MAX,
                         session_timeout_ms=800)  # fmt: skip
    assert len(strict["overlapping"]) == 1  # the session could not have ended by 1500
    relaxed = check_queue(h.events, FINAL, [], topic=TOPIC, max_deliveries=MAX,
                          session_timeout_ms=400)  # fmt: skip
    assert not relaxed["overlapping"]  # 1200 + 200 <= 1500: it may have
    # a crash before the lease was granted (an earlier life of the receiver) ends nothing
    h = History().add("r0", OK, "crash", wall_ms=900).lease("r0", 0, 0, 1, 1000)
    assert h.lease("r1", 0, 0, 2, 1500).counts()["overlapping"] == 1


def test_a_delivery_count_that_does_not_grow_is_caught() -> None:
    h = History().lease("r0", 0, 0, 2, 1000).lease("r1", 0, 0, 1, 2500)  # decreased
    assert h.counts()["delivery-count"] == 1
    h = History().lease("r0", 0, 0, 1, 1000).lease("r1", 0, 0, 1, 2500)  # did not grow
    assert h.counts()["delivery-count"] == 1
    h = History().lease("r0", 0, 0, 1, 1000).lease("r1", 0, 0, 3, 2500)  # a hand-out unseen
    assert "delivery-count" not in h.counts()
    h = History().lease("r0", 0, 0, MAX + 1, 1000)  # past max_deliveries
    assert h.counts()["delivery-count"] == 1


def test_dead_letters_with_wrong_or_missing_headers_are_caught() -> None:
    broken: list[dict[str, str | None]] = [
        {"flotilla-dlq-reason": None},  # missing
        {"flotilla-dlq-topic": "other"},
        {"flotilla-dlq-deliveries": "three"},  # not decimal
        {"flotilla-dlq-deliveries": str(MAX - 1)},  # max-deliveries before the limit
        {"flotilla-dlq-reason": "expired"},  # no such reason
        {"flotilla-dlq-offset": "7"},  # names a record the source does not hold
    ]
    for change in broken:
        h = clean()
        h.letters.pop()
        h.letter(1, 1, MAX, "max-deliveries", **change)
        assert h.counts().get("bad-dead-letter", 0) >= 1, change
    # a rejected record dead-lettered for max-deliveries
    h = clean()
    h.letters.pop(0)
    h.letter(1, 0, MAX, "max-deliveries")
    assert h.counts()["bad-dead-letter"] >= 1
    # a dead letter in the wrong partition of the dead-letter topic, or with another value
    h = clean()
    letter = h.letters.pop()
    h.letters.append(DeadLetter(0, letter.offset, letter.value, letter.headers))
    assert h.counts() == {"bad-dead-letter": 1}
    h.letters[-1] = DeadLetter(1, letter.offset, "zz", letter.headers)
    assert h.counts() == {"bad-dead-letter": 1}
    # deliveries below a count a receiver saw
    h = clean().lease("r9", 1, 0, 2, 1200)
    h.letters[0] = DeadLetter(1, 0, "x", h.letters[0].headers)
    assert h.counts().get("bad-dead-letter", 0) >= 1


def test_a_lease_with_another_value_or_offset_is_wrong() -> None:
    h = clean().add("r0", OK, "lease", partition=0, offset=9, value="?", count=1, wall_ms=1,
                    deadline_ms=2)  # fmt: skip
    assert h.counts()["wrong"] == 1
    h = clean()
    h.events.append(Event(99.0, "r0", OK, "lease", partition=0, offset=0, value="zz", count=2,
                          wall_ms=9000, deadline_ms=10000))  # fmt: skip
    assert h.counts()["wrong"] == 1


def test_every_anomaly_kind_is_reported() -> None:
    assert set(clean().check()) == set(QUEUE_ANOMALIES)


def test_a_lease_lost_answer_is_trusted_unless_lenient_during_a_fault() -> None:
    """A settlement retried across a coordinator failover: its first attempt was applied, the
    retry is answered LeaseLost (the bug nodes had before they remembered recent settlements).
    Trusted (the default), the checker says what it implies; lenient (`strict_lost=False`),
    such an answer during a fault window (and a grace after) is judged unknown."""
    h = History().lease("r0", 0, 0, 1, 1000).settle("r0", "ack", 0, 0, 1, 1100, INVOKE)
    h.add("nemesis", INFO, "fault-start", value="kill-leader#0")
    h.settle("r0", "ack", 0, 0, 1, 1100, FAIL)  # completes after the kill: lost, yet applied
    h.lease("r1", 0, 1, 1, 1000).settle("r1", "release", 0, 1, 1, 1100, FAIL)
    h.lease("r2", 0, 1, 2, 1500).settle("r2", "ack", 0, 1, 2, 1600)  # before r1's deadline
    h.add("nemesis", INFO, "fault-stop", value="kill-leader#0")

    def about_offsets_0_and_1(found: dict[str, list[str]]) -> dict[str, list[str]]:
        return {
            k: [i for i in v if "p0 offset 0" in i or "p0 offset 1 " in i] for k, v in found.items()
        }

    lenient = check_queue(h.events, FINAL, h.letters, topic=TOPIC, max_deliveries=MAX,
                          strict_lost=False)  # fmt: skip
    lenient = about_offsets_0_and_1(lenient)
    assert not lenient["unsettled"] and not lenient["overlapping"], lenient
    found = about_offsets_0_and_1(h.check())
    assert len(found["unsettled"]) == 1 and "answered LeaseLost" in found["unsettled"][0]
    assert len(found["overlapping"]) == 1
    # outside any fault window a LeaseLost answer is trusted
    h2 = History().lease("r0", 0, 0, 1, 1000).settle("r0", "ack", 0, 0, 1, 1100, FAIL)
    assert any("p0 offset 0" in item for item in h2.check()["unsettled"])


def test_an_applied_extend_moves_the_deadline_the_overlap_is_judged_by() -> None:
    def run(extend: EventType | None) -> int:
        h = History().lease("r0", 0, 0, 1, 1000)  # deadline 2000
        if extend is not None:
            fields = {"partition": 0, "offset": 0, "count": 1, "wall_ms": 1500}
            h.add("r0", INVOKE, "extend", **fields)
            h.add("r0", extend, "extend", deadline_ms=3500 if extend is OK else -1, **fields)
        h.lease("r1", 0, 0, 2, 2500)
        return len(h.check()["overlapping"])

    assert run(None) == 0  # handed out after the first deadline
    assert run(OK) == 1  # but the holder had extended it to 3500
    assert run(INFO) == 0 and run(FAIL) == 0  # an extend not known to have applied moves nothing
