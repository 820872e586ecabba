"""The checker: a pure function of a history and the replicas' final committed logs.

Run it after every fault is healed and the replicas have converged. `final[p][replica]` is the
committed log of partition p as `replica` serves it: (offset, value) pairs from offset 0. The
reference log of p is the longest replica log; every other replica log must be a prefix of it.

Anomalies (any one makes `CheckResult.ok` false):
- lost:        an acknowledged produce whose value is not in the reference log;
- duplicated:  a value present more than once across the reference logs;
- divergent:   two replicas of one partition whose committed logs differ where both have entries;
- offsets:     a log or a read whose offsets are not dense and increasing; one (partition, offset)
               read with two different values; an ack whose offset holds another value;
- phantom:     a read returned (offset, value) that the reference log does not hold at that offset;
- unexpected:  a value in a log that no producer ever sent, or that a producer saw `fail`;
- faults:      a fault whose required effect was not seen (`fault-check` failed: e.g. a node that
               did not stop on a storage error).
Unknown outcomes (`info`) may be present or absent: at most once is the duplicate check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from chaos.history import Event, EventType

__all__ = ["Availability", "CheckResult", "FinalLogs", "check", "reference_logs", "with_group"]

FinalLogs = Mapping[int, Mapping[str, Sequence[tuple[int, str]]]]
MAX_EXAMPLES = 10  # examples kept per anomaly kind in the report


@dataclass(frozen=True, slots=True)
class Availability:
    produces_during_faults: int
    ok_during_faults: int
    first_ok_after_heal_s: tuple[float, ...]  # per healed fault; -1.0 = none before the run ended
    leader_changes: int

    @property
    def fraction_during_faults(self) -> float:
        if not self.produces_during_faults:
            return 1.0
        return self.ok_during_faults / self.produces_during_faults


@dataclass(frozen=True, slots=True)
class CheckResult:
    acked: int
    failed: int
    unknown: int
    unknown_committed: int
    reads: int
    lost: tuple[str, ...]
    duplicated: tuple[str, ...]
    divergent: tuple[str, ...]
    offsets: tuple[str, ...]
    phantom: tuple[str, ...]
    unexpected: tuple[str, ...]
    faults: tuple[str, ...]
    availability: Availability
    counts: Mapping[str, int] = field(default_factory=dict)  # anomaly kind -> total found
    # the consumer-group checker's examples (`chaos.group_checker`), when a group workload ran
    group: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def examples(self, kind: str) -> tuple[str, ...]:
        found: tuple[str, ...] = self.group[kind] if kind in self.group else getattr(self, kind)
        return found

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())

    def summary(self) -> str:
        a = self.availability
        lines = [
            f"acked={self.acked} failed={self.failed} unknown={self.unknown} "
            f"(committed {self.unknown_committed}) reads={self.reads}",
            "anomalies: " + ", ".join(f"{kind}={n}" for kind, n in self.counts.items()),
            f"availability during faults: {a.fraction_during_faults:.2f} "
            f"({a.ok_during_faults}/{a.produces_during_faults}); leader changes {a.leader_changes}; "
            f"first write after heal (s): {[round(s, 2) for s in a.first_ok_after_heal_s]}",
        ]
        for kind in self.counts:
            for example in self.examples(kind)[:3]:
                lines.append(f"  {kind}: {example}")
        return "\n".join(lines)


def _dense(pairs: Sequence[tuple[int, str]], start: int | None) -> str:
    """'' if offsets run start, start+1, ... (start None: from the first pair); else the problem."""
    expected = pairs[0][0] if start is None and pairs else start
    for offset, _ in pairs:
        if offset != expected:
            return f"offset {offset} where {expected} was expected"
        expected = offset + 1
    return ""


def _reference(logs: Mapping[str, Sequence[tuple[int, str]]]) -> Sequence[tuple[int, str]]:
    return max(logs.values(), key=len, default=())


def reference_logs(final: FinalLogs) -> dict[int, Sequence[tuple[int, str]]]:
    """Each partition's reference log: its longest replica log."""
    return {partition: _reference(logs) for partition, logs in final.items()}


def with_group(result: CheckResult, found: Mapping[str, Sequence[str]]) -> CheckResult:
    """`result` with the consumer-group checker's anomalies added (`chaos.group_checker`)."""
    counts = {**result.counts, **{kind: len(items) for kind, items in found.items()}}
    group = {kind: tuple(items[:MAX_EXAMPLES]) for kind, items in found.items()}
    return replace(result, counts=counts, group=group)


def check(events: Sequence[Event], final: FinalLogs) -> CheckResult:
    lost: list[str] = []
    duplicated: list[str] = []
    divergent: list[str] = []
    offsets: list[str] = []
    phantom: list[str] = []
    unexpected: list[str] = []

    reference: dict[int, dict[int, str]] = {}
    where: dict[str, list[tuple[int, int]]] = {}
    for partition, logs in sorted(final.items()):
        for replica, log in sorted(logs.items()):
            if problem := _dense(log, 0):
                offsets.append(f"p{partition} {replica} final log: {problem}")
        longest = _reference(logs)
        by_offset = dict(longest)
        reference[partition] = by_offset
        for replica, log in sorted(logs.items()):
            differ = [o for o, v in log if by_offset.get(o) != v]
            if differ:
                divergent.append(
                    f"p{partition} {replica} differs from the longest log at offset {differ[0]}"
                )
        for offset, value in longest:
            where.setdefault(value, []).append((partition, offset))
    for value, places in where.items():
        if len(places) > 1:
            duplicated.append(f"{value!r} at {places}")

    produces = [e for e in events if e.f == "produce"]
    sent = {e.value for e in produces if e.type is EventType.INVOKE}
    acked = [e for e in produces if e.type is EventType.OK]
    failed = [e for e in produces if e.type is EventType.FAIL]
    unknown = [e for e in produces if e.type is EventType.INFO]
    for event in acked:
        places = where.get(event.value, [])
        if not places:
            lost.append(f"{event.value!r} acked at p{event.partition} offset {event.offset}")
        elif event.offset >= 0 and (event.partition, event.offset) not in places:
            offsets.append(f"{event.value!r} acked at offset {event.offset}, committed at {places}")
    for event in failed:
        if event.value in where:
            unexpected.append(f"{event.value!r} failed ({event.error}) but is committed")
    for value, places in where.items():
        if value not in sent:
            unexpected.append(f"{value!r} at {places} was never sent")

    seen: dict[tuple[int, int], tuple[str, str]] = {}
    reads = [e for e in events if e.f == "read" and e.type is EventType.OK]
    for event in reads:
        if problem := _dense(event.records, None):
            offsets.append(f"read of p{event.partition} on {event.replica}: {problem}")
        committed = reference.get(event.partition, {})
        for offset, value in event.records:
            key = (event.partition, offset)
            earlier = seen.setdefault(key, (value, event.replica))
            if earlier[0] != value:
                offsets.append(
                    f"p{event.partition} offset {offset} read as {earlier[0]!r} on {earlier[1]} "
                    f"and as {value!r} on {event.replica}"
                )
            if committed.get(offset) != value:
                phantom.append(
                    f"p{event.partition} offset {offset} = {value!r} read on {event.replica} at "
                    f"t={event.t:.3f}; committed: {committed.get(offset)!r}"
                )

    faults = [e.value for e in events if e.f == "fault-check" and e.type is EventType.FAIL]

    counts = {
        "lost": len(lost),
        "duplicated": len(duplicated),
        "divergent": len(divergent),
        "offsets": len(offsets),
        "phantom": len(phantom),
        "unexpected": len(unexpected),
        "faults": len(faults),
    }
    return CheckResult(
        acked=len(acked),
        failed=len(failed),
        unknown=len(unknown),
        unknown_committed=sum(1 for e in unknown if e.value in where),
        reads=len(reads),
        lost=tuple(lost[:MAX_EXAMPLES]),
        duplicated=tuple(duplicated[:MAX_EXAMPLES]),
        divergent=tuple(divergent[:MAX_EXAMPLES]),
        offsets=tuple(offsets[:MAX_EXAMPLES]),
        phantom=tuple(phantom[:MAX_EXAMPLES]),
        unexpected=tuple(unexpected[:MAX_EXAMPLES]),
        faults=tuple(faults[:MAX_EXAMPLES]),
        availability=availability(events),
        counts=counts,
    )


def availability(events: Sequence[Event]) -> Availability:
    """Produce completions inside fault windows; for each fault-stop, the delay to the next ok."""
    windows: list[tuple[float, float]] = []
    open_at: dict[str, float] = {}
    for event in events:
        if event.f == "fault-start":
            open_at[event.value] = event.t
        elif event.f == "fault-stop" and event.value in open_at:
            windows.append((open_at.pop(event.value), event.t))
    end = events[-1].t if events else 0.0
    windows += [(start, end) for start in open_at.values()]
    completions = [e for e in events if e.f == "produce" and e.type is not EventType.INVOKE]
    during = [e for e in completions if any(a <= e.t <= b for a, b in windows)]
    oks = [e.t for e in completions if e.type is EventType.OK]
    first_after: list[float] = []
    for event in events:
        if event.f == "fault-stop":
            later = [t for t in oks if t >= event.t]
            first_after.append(min(later) - event.t if later else -1.0)
    leaders: dict[int, str] = {}
    changes = 0
    for event in events:
        if event.f == "leader" and event.value:
            if leaders.get(event.partition, event.value) != event.value:
                changes += 1
            leaders[event.partition] = event.value
    return Availability(
        produces_during_faults=len(during),
        ok_during_faults=sum(1 for e in during if e.type is EventType.OK),
        first_ok_after_heal_s=tuple(first_after),
        leader_changes=changes,
    )
