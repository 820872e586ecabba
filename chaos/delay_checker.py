"""The delayed-delivery checker: a pure function of a history's delayed-record events and the
delayed topic's final committed logs (issue 26).

Events (`chaos.delay_workload`); times compared with due times are wall-clock epoch ms (every
node runs on this machine):
- `delay-produce` (process "delayer-<k>"): an `invoke` with `value` and `partition` and
  `wall_ms` (when it was sent), then `ok` (`wall_ms`: when it was acknowledged), `fail` (nothing
  was written) or `info` (unknown). The value names the record and its due time:
  `d<k>-<n>@<due_ms>` (`delayed_value`), so a record found in a log says when it was due;
- `delay-seen` ok (process "follower-<p>-<replica>"): a reader following partition `partition`
  (one per replica it starts at) received `value` at `offset`, at `wall_ms`; the earliest
  sighting of a record is when it was seen;
- `delay-followed` ok: the followers' last wall-clock time (`wall_ms`): every record due a bound
  before it should have been seen;
- `fault-start` / `fault-stop` (process "nemesis", `value` names the window), in monotonic `t`:
  while a fault lasts and `grace_s` after it, the fault bound on lateness applies.

Lateness is measured from the later of the due time and the acknowledgement (a record cannot be
due before it is accepted, and the ack follows its acceptance by a round trip), for acknowledged
records that a follower saw.

Anomalies:
- lost:        an acknowledged record due a bound before the final read, not in the final log;
- twice:       a record in the final logs more than once (fired twice), or seen at two offsets;
- early:       a record seen before its due time;
- late:        a record seen (or, unseen, still missing when the followers stopped) later than
               the bound after its due time: `fault_ms` if it fell due during a fault window
               or in the `quiet_ms` before one (it may have been firing when the fault hit),
               `quiet_ms` otherwise;
- unexpected:  a record in the final logs that no delayer sent, that one saw `fail`, or in
               another partition than it was sent to;
- wrong:       a record seen at an offset where the final log holds another value;
- order:       two records of one partition, both acknowledged `ORDER_MARGIN_MS` before either
               was due, appended against their due order.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chaos.history import Event, EventType

__all__ = [
    "DELAY_ANOMALIES",
    "DelayBounds",
    "DelayCheck",
    "check_delayed",
    "delayed_value",
    "due_of",
    "percentile",
]

DELAY_ANOMALIES = ("lost", "twice", "early", "late", "unexpected", "wrong", "order")
# both records accepted this long before either fell due: the timer leader knew both at once
ORDER_MARGIN_MS = 500


def delayed_value(producer: int, number: int, due_ms: int) -> str:
    """The value of delayer `producer`'s record `number`, due at `due_ms`."""
    return f"d{producer}-{number}@{due_ms}"


def due_of(value: str) -> int | None:
    """The due time a delayed value names (None: not one of ours)."""
    _, at, due = value.partition("@")
    return int(due) if at and value.startswith("d") and due.isdecimal() else None


@dataclass(frozen=True, slots=True)
class DelayBounds:
    """How late a record may be seen: `quiet_ms` without faults; `fault_ms` (an election plus
    one second) when it fell due during a fault window or within `grace_s` after one."""

    quiet_ms: int = 1000
    fault_ms: int = 2000
    grace_s: float = 2.0


@dataclass(frozen=True, slots=True)
class DelayCheck:
    acked: int
    failed: int
    unknown: int
    fired: int  # distinct records in the final logs
    seen: int  # acknowledged records a follower saw (their lateness is measured)
    lateness_ms: tuple[int, ...]  # sorted, of the acknowledged records seen
    found: Mapping[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.found.values())

    def lateness(self) -> dict[str, int | None]:
        """p50 / p99 / max lateness (ms) of the acknowledged records seen."""
        return {name: percentile(self.lateness_ms, q) for name, q in (("p50", 50), ("p99", 99),
                                                                       ("max", 100))}  # fmt: skip

    def anomalies(self) -> dict[str, list[str]]:
        """The anomaly kinds found, prefixed "delay-" (for the run's report beside the others)."""
        return {f"delay-{kind}": items for kind, items in self.found.items()}

    def summary(self) -> str:
        counts = ", ".join(f"{kind}={len(items)}" for kind, items in self.found.items())
        return (
            f"delayed: acked={self.acked} failed={self.failed} unknown={self.unknown} "
            f"fired={self.fired} seen={self.seen} lateness ms {self.lateness()}\n"
            f"delayed anomalies: {counts}"
        )


def percentile(sorted_values: Sequence[int], q: float) -> int | None:
    """The nearest-rank q-th percentile of ascending values (None when there are none)."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * q // 100))
    return sorted_values[min(len(sorted_values), int(rank)) - 1]


def check_delayed(
    events: Sequence[Event],
    final: Mapping[int, Sequence[tuple[int, str]]],
    *,
    final_ms: int,
    bounds: DelayBounds = DelayBounds(),
) -> DelayCheck:
    """`final[p]`: the delayed topic's partition p, (offset, value) pairs, read at `final_ms`
    (epoch ms) once every replica agreed."""
    found: dict[str, list[str]] = {kind: [] for kind in DELAY_ANOMALIES}
    places: dict[str, list[tuple[int, int]]] = defaultdict(list)
    held: dict[tuple[int, int], str] = {}
    for partition, log in sorted(final.items()):
        for offset, value in log:
            places[value].append((partition, offset))
            held[(partition, offset)] = value
    sent: dict[str, int] = {}  # value -> partition
    acked: dict[str, int] = {}  # value -> wall ms of the ack
    failed: set[str] = set()
    unknown: set[str] = set()
    first_seen: dict[str, tuple[int, int, int]] = {}  # value -> (wall ms, partition, offset)
    seen_at: dict[str, set[tuple[int, int]]] = defaultdict(set)
    followed_ms = -1
    for event in events:
        if event.f == "delay-produce":
            if event.type is EventType.INVOKE:
                sent[event.value] = event.partition
            elif event.type is EventType.OK:
                acked[event.value] = event.wall_ms
            elif event.type is EventType.FAIL:
                failed.add(event.value)
            else:
                unknown.add(event.value)
        elif event.f == "delay-seen" and event.type is EventType.OK:
            key = (event.partition, event.offset)
            seen_at[event.value].add(key)
            if event.value not in first_seen or event.wall_ms < first_seen[event.value][0]:
                first_seen[event.value] = (event.wall_ms, event.partition, event.offset)
            if held.get(key, event.value) != event.value:
                found["wrong"].append(
                    f"{event.value!r} seen at p{key[0]} offset {key[1]}; the final log holds "
                    f"{held[key]!r} there"
                )
        elif event.f == "delay-followed" and event.type is EventType.OK:
            followed_ms = max(followed_ms, event.wall_ms)
    for value, where in sorted(places.items()):
        if len(where) > 1:
            found["twice"].append(
                f"{value!r} in the final logs {len(where)} times, at {where[:5]}"
                f"{' ...' if len(where) > 5 else ''}"
            )
        if value not in sent:
            found["unexpected"].append(f"{value!r} at {where} was never sent")
        elif value in failed:
            found["unexpected"].append(f"{value!r} at {where}: its produce failed")
        elif any(partition != sent[value] for partition, _ in where):
            found["unexpected"].append(f"{value!r} at {where}, sent to p{sent[value]}")
    for value, keys in sorted(seen_at.items()):
        if len(keys) > 1 and len(places.get(value, ())) <= 1:
            found["twice"].append(f"{value!r} seen at {sorted(keys)}")
    windows = _fault_windows_ms(events, bounds.grace_s)
    lateness: list[int] = []
    for value, acked_ms in sorted(acked.items()):
        due = due_of(value)
        if due is None:
            found["unexpected"].append(f"{value!r} acknowledged: not a delayed value")
            continue
        hit = any(start - bounds.quiet_ms <= due <= end for start, end in windows)
        bound = bounds.fault_ms if hit else bounds.quiet_ms
        since = max(due, acked_ms)
        if value in first_seen:
            late = first_seen[value][0] - since
            lateness.append(late)
            if late > bound:
                found["late"].append(f"{value!r} seen {late} ms after it was due (bound {bound})")
        elif value in places and followed_ms >= 0 and since + bound < followed_ms:
            found["late"].append(
                f"{value!r} not seen by {followed_ms}, {followed_ms - since} ms after it was due "
                f"(bound {bound})"
            )
        if value not in places and since + bound < final_ms:
            found["lost"].append(
                f"{value!r} acknowledged (p{sent.get(value)}), due {final_ms - due} ms before the "
                f"final read, not in the final log"
            )
    for value, (seen_ms, partition, offset) in sorted(first_seen.items()):
        due = due_of(value)
        if due is not None and seen_ms < due:
            found["early"].append(
                f"{value!r} seen at p{partition} offset {offset} {due - seen_ms} ms before due"
            )
    _check_order(found, final, acked)
    return DelayCheck(
        acked=len(acked),
        failed=len(failed),
        unknown=len(unknown - set(acked)),
        fired=len(places),
        seen=len(lateness),
        lateness_ms=tuple(sorted(lateness)),
        found=found,
    )


def _check_order(
    found: dict[str, list[str]],
    final: Mapping[int, Sequence[tuple[int, str]]],
    acked: Mapping[str, int],
) -> None:
    """Within a partition, records the timer leader held together fire in due order: for each
    record, no later offset holds one due earlier that was acknowledged ORDER_MARGIN_MS before
    either fell due."""
    for partition, log in sorted(final.items()):
        known = [
            (offset, value, due, acked[value])
            for offset, value in log
            if value in acked and (due := due_of(value)) is not None
        ]
        for index, (offset, value, due, acked_ms) in enumerate(known):
            for later_offset, later_value, later_due, later_acked in known[index + 1 :]:
                margin = min(due, later_due) - ORDER_MARGIN_MS
                if later_due < due and acked_ms <= margin and later_acked <= margin:
                    found["order"].append(
                        f"p{partition}: {later_value!r} (due {later_due}) at offset "
                        f"{later_offset}, after {value!r} (due {due}) at offset {offset}"
                    )
                    break


def _fault_windows_ms(events: Sequence[Event], grace_s: float) -> list[tuple[float, float]]:
    """Fault windows (start, stop + grace) in wall-clock ms: the nemesis records monotonic
    times, the delayed events both clocks, whose offset converts one to the other."""
    offsets = [e.wall_ms - e.t * 1000 for e in events if e.f.startswith("delay-") and e.wall_ms > 0]
    if not offsets:
        return []
    shift = statistics.median(offsets)
    started: dict[str, float] = {}
    windows: list[tuple[float, float]] = []
    for event in events:
        if event.process == "nemesis" and event.f == "fault-start":
            started[event.value] = event.t
        elif event.process == "nemesis" and event.f == "fault-stop" and event.value in started:
            windows.append((started.pop(event.value), event.t + grace_s))
    windows += [(start, float("inf")) for start in started.values()]
    return [(start * 1000 + shift, end * 1000 + shift) for start, end in windows]
