"""The queue checker: a pure function of a history's queue events, the source partitions' final
committed logs and the dead-letter topic read whole after the run.

Queue events (process "receiver-<k>", see `chaos.queue_workload`); times that are compared with
the servers' deadlines are wall-clock epoch ms (`wall_ms`; every node runs on this machine):
- `lease` ok: one hand-out — `partition`, `offset`, `value`, `count` (its delivery_count),
  `deadline_ms`, and `wall_ms` when it was granted (its deadline minus the invisible time asked);
- `ack` / `release` / `reject`: one delivery's settlement — `partition`, `offset`, `count`, and
  `wall_ms` when the call began; an `invoke` before the call, then `ok` applied, `fail` not
  applied (LeaseLost) or `info` unknown; an invoke with no completion (the receiver was killed
  during the call) is unknown;
- `extend`: an invoke, then `ok` with the lease's new `deadline_ms` (-1: applied, deadline
  unknown), `fail` (LeaseLost) or `info`; an applied extend moves the lease's deadline;
- `crash` ok: the receiver stopped without releasing: its leases end with its session, not
  before half `session_timeout_ms` after the crash (it heartbeats more often than that);
  `close` ok: it closed its queue (which releases every lease it holds);
- `drained` ok (process "queue"): the drain saw every partition settled to its end;
- `fault-start` / `fault-stop` (process "nemesis", `value` names the window): while a fault
  lasts and FAILOVER_GRACE_S after, a coordinator may change.

A LeaseLost answer (`fail`) counts as "nothing changed", as the API says (`strict_lost`, the
default). The SDK retries a settlement at the new coordinator when an attempt fails; before the
coordinator remembered its members' recent settlements (`PartitionQueue.recent`), a retry whose
first attempt had committed was answered "lost" although this very call applied it (seen in
chaos runs: an ack answered LeaseLost whose record was never handed out again). `strict_lost=
False` judges such answers during a fault window (and a grace after) unknown instead: for
histories of nodes from before that fix.

Anomalies:
- unsettled:               a record of a final log neither acked (an ack answered applied, or of
                           unknown outcome) nor in the dead-letter topic;
- acked-twice:             a record with two acks answered applied (accepted once, only from
                           the holder: a second holder's ack means the record was handed out
                           again after it was acked);
- acked-and-dead-lettered: a record acked (applied) and also in the dead-letter topic;
- dead-lettered-twice:     a record in the dead-letter topic twice;
- overlapping:             a record handed out while an earlier lease of it still held: granted
                           before that lease's deadline (as an applied extend moved it), which
                           its holder had not settled,
                           released or given up (crash, close) by then;
- delivery-count:          hand-outs of one record whose delivery_count does not grow (in grant
                           order), or one above max_deliveries;
- bad-dead-letter:         a dead letter whose flotilla-dlq-* headers are missing or malformed,
                           name a record the source log does not hold or another value, give a
                           wrong reason (rejected without a reject; max-deliveries below the
                           limit; an applied reject dead-lettered for another reason), a delivery
                           count below a hand-out's, or land in the wrong partition;
- wrong:                   a lease whose value is not the final log's at that offset, or a
                           settlement of a record the final log does not hold.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from chaos.history import Event, EventType

__all__ = ["DLQ_HEADERS", "QUEUE_ANOMALIES", "DeadLetter", "check_queue"]

QUEUE_ANOMALIES = (
    "unsettled",
    "acked-twice",
    "acked-and-dead-lettered",
    "dead-lettered-twice",
    "overlapping",
    "delivery-count",
    "bad-dead-letter",
    "wrong",
)
DLQ_HEADERS = (
    "flotilla-dlq-topic",
    "flotilla-dlq-partition",
    "flotilla-dlq-offset",
    "flotilla-dlq-deliveries",
    "flotilla-dlq-reason",
)
REASONS = ("max-deliveries", "rejected")
SETTLEMENTS = ("ack", "release", "reject")
# the servers and the workload read one wall clock (one machine); this absorbs rounding only
TOLERANCE_MS = 20
FAILOVER_GRACE_S = 5.0  # after a fault ends, a coordinator may still be changing


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One record of the dead-letter topic as read back: where it is there, its value, and its
    headers ((name, value) pairs as written)."""

    partition: int
    offset: int
    value: str
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> str | None:
        found = [value for key, value in self.headers if key == name]
        return found[-1].decode("ascii", "replace") if len(found) == 1 else None


@dataclass(frozen=True, slots=True)
class _Lease:
    holder: str
    count: int
    granted_ms: int
    deadline_ms: int
    value: str


Key = tuple[int, int]  # (partition, offset)


def check_queue(
    events: Sequence[Event],
    final: Mapping[int, Sequence[tuple[int, str]]],
    dead_letters: Sequence[DeadLetter],
    *,
    topic: str,
    max_deliveries: int,
    dead_letter_partitions: int = 0,
    strict_lost: bool = True,
    session_timeout_ms: int = 0,
) -> dict[str, list[str]]:
    """`final[p]`: source partition p's reference log; `dead_letters`: the dead-letter topic
    read whole; `dead_letter_partitions`: its partition count (0: do not check placement);
    `strict_lost`: trust LeaseLost answers during faults too (see the module text);
    `session_timeout_ms`: the receivers' (0: a crash may end its leases at once)."""
    found: dict[str, list[str]] = {kind: [] for kind in QUEUE_ANOMALIES}
    values = {(p, offset): value for p, log in final.items() for offset, value in log}
    leases: dict[Key, list[_Lease]] = defaultdict(list)
    # (key, count) -> [(holder, type, f, wall_ms)] of its settlements
    settled: dict[tuple[Key, int], list[tuple[str, EventType, str, int]]] = defaultdict(list)
    # holder -> (when it crashed or closed, when its leases may have ended), wall ms
    gone: dict[str, list[tuple[int, int]]] = defaultdict(list)
    acks: dict[Key, list[EventType]] = defaultdict(list)
    rejects: dict[Key, list[int]] = defaultdict(list)  # counts of applied (or unknown) rejects
    # (holder, f, key, count) -> the settlement's outcome and when its call began
    calls: dict[tuple[str, str, Key, int], tuple[EventType, int]] = {}
    began: dict[tuple[str, str, Key, int], float] = {}  # the call's invoke time (monotonic)
    windows = [] if strict_lost else _fault_windows(events)
    extended: dict[tuple[str, Key, int], int] = {}  # (holder, key, count) -> its new deadline
    drained = False
    for event in events:
        key = (event.partition, event.offset)
        if event.f == "drained" and event.type is EventType.OK:
            drained = True
        elif event.f in ("crash", "close"):
            later = session_timeout_ms // 2 if event.f == "crash" else 0
            gone[event.process].append((event.wall_ms, event.wall_ms + later))
        elif event.f == "extend" and event.type is EventType.OK and event.deadline_ms > 0:
            extended[(event.process, key, event.count)] = max(
                extended.get((event.process, key, event.count), 0), event.deadline_ms
            )
        elif event.f == "lease" and event.type is EventType.OK:
            leases[key].append(_Lease(event.process, event.count, event.wall_ms,
                                      event.deadline_ms, event.value))  # fmt: skip
            if values.get(key, event.value) != event.value or key not in values:
                found["wrong"].append(
                    f"p{key[0]} offset {key[1]} leased to {event.process} as {event.value!r}; "
                    f"final log: {values.get(key)!r}"
                )
        elif event.f in SETTLEMENTS:
            call = (event.process, event.f, key, event.count)
            if event.type is EventType.INVOKE:
                calls[call] = (EventType.INFO, event.wall_ms)  # unknown until it completes
                began[call] = event.t
            elif event.type is EventType.FAIL and any(
                start <= event.t and began.get(call, event.t) <= end for start, end in windows
            ):
                calls[call] = (EventType.INFO, event.wall_ms)  # a retried call's "lost"
            else:
                calls[call] = (event.type, event.wall_ms)
    for (process, f, key, count), (type_, wall_ms) in calls.items():
        settled[(key, count)].append((process, type_, f, wall_ms))
        if key not in values:
            found["wrong"].append(f"{f} of p{key[0]} offset {key[1]} by {process}: not in the log")
        if f == "ack":
            acks[key].append(type_)
        elif f == "reject" and type_ is not EventType.FAIL:
            rejects[key].append(count)
    lettered = _check_dead_letters(found, dead_letters, values, leases, rejects, topic,
                                   max_deliveries, dead_letter_partitions)  # fmt: skip
    for key in sorted(values):
        applied = acks[key].count(EventType.OK)
        maybe = acks[key].count(EventType.INFO)
        letters = lettered.get(key, 0)
        where = f"p{key[0]} offset {key[1]}"
        if applied >= 2:
            found["acked-twice"].append(f"{where}: {applied} acks answered applied")
        if applied and letters:
            found["acked-and-dead-lettered"].append(f"{where}: acked and {letters} dead letter(s)")
        if letters >= 2:
            found["dead-lettered-twice"].append(f"{where}: {letters} times in the dead letters")
        if not (applied or maybe or letters):
            handed = len(leases.get(key, ()))
            lost = acks[key].count(EventType.FAIL)
            hint = f"; {lost} acks answered LeaseLost: applied after all?" if lost else ""
            found["unsettled"].append(
                f"{where}: never acked nor dead-lettered ({handed} hand-outs seen; "
                f"{'after' if drained else 'without'} a complete drain{hint})"
            )
    for key, its_leases in sorted(leases.items()):
        moved = [
            replace(lease, deadline_ms=max(lease.deadline_ms,
                                           extended.get((lease.holder, key, lease.count), 0)))
            for lease in its_leases
        ]  # fmt: skip
        _check_leases(found, key, moved, settled, gone, max_deliveries)
    return found


def _fault_windows(events: Sequence[Event]) -> list[tuple[float, float]]:
    """(start, end + FAILOVER_GRACE_S) of every nemesis fault window (to the end of time if
    it never stopped)."""
    started: dict[str, float] = {}
    windows: list[tuple[float, float]] = []
    for event in events:
        if event.process == "nemesis" and event.f == "fault-start":
            started[event.value] = event.t
        elif event.process == "nemesis" and event.f == "fault-stop" and event.value in started:
            windows.append((started.pop(event.value), event.t + FAILOVER_GRACE_S))
    return windows + [(start, float("inf")) for start in started.values()]


def _ended_by(
    lease: _Lease,
    key: Key,
    at_ms: int,
    settled: Mapping[tuple[Key, int], Sequence[tuple[str, EventType, str, int]]],
    gone: Mapping[str, Sequence[tuple[int, int]]],
) -> bool:
    """Whether `lease` may have ended before `at_ms`, other than by its deadline: a settlement
    by its holder (applied or of unknown outcome) begun by then, or the holder's crash or close."""
    for holder, type_, _, wall_ms in settled.get((key, lease.count), ()):
        if holder == lease.holder and type_ is not EventType.FAIL and wall_ms <= at_ms:
            return True
    return any(
        lease.granted_ms <= when and ended <= at_ms for when, ended in gone.get(lease.holder, ())
    )


def _check_leases(
    found: dict[str, list[str]],
    key: Key,
    handed: Sequence[_Lease],
    settled: Mapping[tuple[Key, int], Sequence[tuple[str, EventType, str, int]]],
    gone: Mapping[str, Sequence[tuple[int, int]]],
    max_deliveries: int,
) -> None:
    where = f"p{key[0]} offset {key[1]}"
    ordered = sorted(handed, key=lambda lease: (lease.granted_ms, lease.count))
    for index, later in enumerate(ordered):
        if later.count < 1 or later.count > max_deliveries:
            found["delivery-count"].append(
                f"{where} handed to {later.holder} with delivery_count {later.count}; valid: "
                f"1..{max_deliveries}"
            )
        if index and later.count <= ordered[index - 1].count:
            before = ordered[index - 1]
            found["delivery-count"].append(
                f"{where}: delivery_count {later.count} to {later.holder} at {later.granted_ms} "
                f"after {before.count} to {before.holder} at {before.granted_ms}"
            )
        for earlier in ordered[:index]:
            at = later.granted_ms + TOLERANCE_MS
            if later.granted_ms + TOLERANCE_MS < earlier.deadline_ms and not _ended_by(
                earlier, key, at, settled, gone
            ):
                found["overlapping"].append(
                    f"{where} handed to {later.holder} (count {later.count}) at "
                    f"{later.granted_ms}, {earlier.deadline_ms - later.granted_ms} ms before the "
                    f"deadline of {earlier.holder}'s lease (count {earlier.count}), which it had "
                    f"not settled"
                )


def _check_dead_letters(
    found: dict[str, list[str]],
    dead_letters: Sequence[DeadLetter],
    values: Mapping[Key, str],
    leases: Mapping[Key, Sequence[_Lease]],
    rejects: Mapping[Key, Sequence[int]],
    topic: str,
    max_deliveries: int,
    partitions: int,
) -> dict[Key, int]:
    """Judges each dead letter's headers; returns how many dead letters name each record."""
    lettered: dict[Key, int] = defaultdict(int)
    reasons: dict[Key, list[str]] = defaultdict(list)
    for letter in dead_letters:
        where = f"dead letter at {letter.partition}/{letter.offset}"
        problems: list[str] = []
        fields = {name: letter.header(name) for name in DLQ_HEADERS}
        missing = [name for name, text in fields.items() if text is None]
        numbers = {}
        for name in ("flotilla-dlq-partition", "flotilla-dlq-offset", "flotilla-dlq-deliveries"):
            text = fields[name]
            if text is not None and not (text.isascii() and text.isdecimal()):
                problems.append(f"{name} {text!r} is not ASCII decimal")
            elif text is not None:
                numbers[name] = int(text)
        if missing:
            problems.append(f"headers missing or repeated: {missing}")
        if fields["flotilla-dlq-topic"] not in (None, topic):
            problems.append(f"flotilla-dlq-topic {fields['flotilla-dlq-topic']!r}, not {topic!r}")
        reason = fields["flotilla-dlq-reason"]
        if reason is not None and reason not in REASONS:
            problems.append(f"flotilla-dlq-reason {reason!r}; valid: {list(REASONS)}")
        source = (numbers.get("flotilla-dlq-partition"), numbers.get("flotilla-dlq-offset"))
        if None not in source:
            key: Key = (source[0], source[1])  # type: ignore[assignment]
            lettered[key] += 1
            problems += _judge_source(letter, key, values, leases, rejects, reason,
                                      numbers.get("flotilla-dlq-deliveries"), max_deliveries,
                                      partitions)  # fmt: skip
            if reason is not None:
                reasons[key].append(reason)
        found["bad-dead-letter"] += [f"{where}: {problem}" for problem in problems]
    for key, counts in sorted(rejects.items()):
        if key in reasons and "rejected" not in reasons[key]:
            found["bad-dead-letter"].append(
                f"p{key[0]} offset {key[1]} rejected (count {counts[0]}) but dead-lettered "
                f"for {reasons[key]}"
            )
    return lettered


def _judge_source(
    letter: DeadLetter,
    key: Key,
    values: Mapping[Key, str],
    leases: Mapping[Key, Sequence[_Lease]],
    rejects: Mapping[Key, Sequence[int]],
    reason: str | None,
    deliveries: int | None,
    max_deliveries: int,
    partitions: int,
) -> list[str]:
    problems: list[str] = []
    if key not in values:
        return [f"names p{key[0]} offset {key[1]}, which the source log does not hold"]
    if values[key] != letter.value:
        problems.append(f"value {letter.value!r}; the source's is {values[key]!r}")
    if partitions and letter.partition != key[0] % partitions:
        problems.append(f"in partition {letter.partition}, not {key[0]} % {partitions}")
    if deliveries is None:
        return problems
    highest = max((lease.count for lease in leases.get(key, ())), default=0)
    if deliveries < highest:
        problems.append(f"deliveries {deliveries}, below a hand-out's count {highest}")
    if reason == "max-deliveries" and deliveries != max_deliveries:
        problems.append(f"reason max-deliveries at {deliveries} deliveries, not {max_deliveries}")
    if reason == "rejected" and deliveries not in rejects.get(key, ()):
        problems.append(
            f"reason rejected at {deliveries} deliveries; rejects seen at {list(rejects.get(key, ()))}"
        )
    return problems
