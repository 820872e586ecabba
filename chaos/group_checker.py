"""The consumer-group checker: a pure function of a history's group events and the partitions'
final committed logs (`chaos.checker.FinalLogs`).

Group events (process "member-<k>", see `chaos.group_workload`):
- `poll` invoke, then `consume` ok events (one per partition the poll returned records of:
  `partition`, `records` as (offset, value)), then `poll` ok — all from the same member;
- `assign` / `revoke` ok: `partition` gained or given up (a lost session counts as a revoke);
- `commit` invoke, then ok / fail / info: `records` as (partition, "offset") pairs — the positions
  the member committed (all or nothing);
- `drained` ok (process "group"): the members read every partition to the end of its final log.

Anomalies:
- skipped:     a committed record of the final log that no member consumed, when the members
               drained the topic (`drained` present); at-least-once means none is skipped;
- rewound:     a record consumed at an offset below a commit of its partition that was
               acknowledged before the poll began (a new owner starts at the last commit; only
               records after it may be delivered again);
- interleaved: a partition consumed by member A, then B, then A again with no new assignment of
               it to A in between: two members owned it at once. "Then" is provable order: a
               poll that began before the other member's delivery was recorded (a member paused
               with its fetch out, a zombie) is concurrent with it and orders nothing;
- regressed:   the group's final committed offset of a partition is below an acknowledged commit
               of it (a commit survives any failover and is never lowered by a stale one).
- wrong:       a consumed (offset, value) that the final log does not hold at that offset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chaos.history import Event, EventType

__all__ = ["GROUP_ANOMALIES", "check_group"]

GROUP_ANOMALIES = ("skipped", "rewound", "interleaved", "regressed", "wrong")
MAX_EXAMPLES = 10


def check_group(
    events: Sequence[Event],
    final: Mapping[int, Sequence[tuple[int, str]]],
    committed: Mapping[int, int],
) -> dict[str, list[str]]:
    """`final[p]`: partition p's reference log; `committed[p]`: the group's committed offset of p
    read back after the run (absent: none)."""
    found: dict[str, list[str]] = {kind: [] for kind in GROUP_ANOMALIES}
    by_offset = {p: dict(log) for p, log in final.items()}
    consumed: dict[int, set[int]] = {}
    acked_commits: list[tuple[float, int, int]] = []  # (ack time, partition, offset)
    poll_started: dict[str, float] = {}
    last_consumer: dict[int, tuple[str, float]] = {}  # p -> (member, when its consume was seen)
    # (member, p): the member consumed p, then another member did; it may consume p again only
    # after a new assignment of p
    needs_assign: set[tuple[str, int]] = set()
    pending_commits: dict[str, tuple[tuple[int, str], ...]] = {}
    for event in events:
        member = event.process
        if event.f == "poll" and event.type is EventType.INVOKE:
            poll_started[member] = event.t
        elif event.f == "commit":
            if event.type is EventType.INVOKE:
                pending_commits[member] = event.records
            elif event.type is EventType.OK:
                for partition, position in pending_commits.pop(member, event.records):
                    acked_commits.append((event.t, partition, int(position)))
            else:
                pending_commits.pop(member, None)
        elif event.f == "assign":
            needs_assign.discard((member, event.partition))
        elif event.f == "consume" and event.type is EventType.OK:
            p = event.partition
            began = poll_started.get(member, event.t)
            floor = max(
                (offset for t, q, offset in acked_commits if q == p and t < began), default=0
            )
            for offset, value in event.records:
                consumed.setdefault(p, set()).add(offset)
                if offset < floor:
                    found["rewound"].append(
                        f"p{p} offset {offset} consumed by {member} at t={event.t:.3f}, below "
                        f"the commit {floor} acknowledged before its poll began"
                    )
                if by_offset.get(p, {}).get(offset) != value:
                    found["wrong"].append(
                        f"p{p} offset {offset} consumed as {value!r} by {member}; final log: "
                        f"{by_offset.get(p, {}).get(offset)!r}"
                    )
            previous, recorded = last_consumer.get(p, (None, 0.0))
            if previous is not None and previous != member and began <= recorded:
                # this poll was out before the other member's delivery was seen (e.g. a member
                # paused with its fetch in flight): which came first is unknown, so it proves
                # nothing about ownership (rewound above still judges its offsets)
                continue
            if previous is not None and previous != member:
                needs_assign.add((previous, p))
            if (member, p) in needs_assign:
                needs_assign.discard((member, p))
                found["interleaved"].append(
                    f"p{p} consumed by {member} at t={event.t:.3f} after {previous} did, with "
                    f"no new assignment of it to {member} in between"
                )
            last_consumer[p] = (member, event.t)
    if any(e.f == "drained" and e.type is EventType.OK for e in events):
        for p, log in sorted(final.items()):
            missing = [offset for offset, _ in log if offset not in consumed.get(p, set())]
            if missing:
                found["skipped"].append(
                    f"p{p}: {len(missing)} committed records never consumed, first {missing[:5]}"
                )
    for p in sorted({q for _, q, _ in acked_commits}):
        highest = max(offset for _, q, offset in acked_commits if q == p)
        if committed.get(p, -1) < highest:
            found["regressed"].append(
                f"p{p}: committed offset read back {committed.get(p)} below the acknowledged "
                f"commit {highest}"
            )
    return {kind: items for kind, items in found.items()}
