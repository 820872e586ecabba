"""The promises of consumer groups, checked as the simulation runs.

(a) single owner: no partition is owned by two members that each still consider themselves live
    (running, and not past their own session deadline), counting every phase of ownership:
    starting, processing, and revoking until the member dropped it.
(b) offsets never go backwards: the committed offset of (topic uid, partition), folded from the
    log's committed entries in order, never decreases (the simulation never resets); a commit is
    acknowledged only once that fold holds it (so a failover cannot lose it); and a fresh
    coordinator that loaded the committed entries (a failover) reads back exactly that fold.
(c) fencing: a commit the coordinator refuses changes no offset; one it accepts with a change
    comes from a member of the group that holds every named partition in its assignment.
(d) liveness: after faults stop, within a bound of ticks every partition of a subscribed topic
    is owned by a live member (checked by the world at the end of the quiet phase).
(e) determinism: the same seed gives the same trace (checked by running a seed twice).
(f) at-least-once, bounded: no record is skipped (a member processes a partition only from at
    or below the highest offset anyone processed), and a new owner starts exactly at the
    partition's committed offset (0 where none), so what it reads again is at most what came
    after the last commit.

A failed check raises `Violation`. `disabled` turns checks off by letter (the tests show each
checker catching a deliberately broken coordinator on its own).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from consumers.coordinator import Coordinator
from consumers.entries import Entry, OffsetsCommitted
from consumers.sim.member import SimMember
from consumers.types import GroupView, TopicMeta, TopicPartition

__all__ = ["CHECKS", "Checker", "Violation"]


class Violation(Exception):
    """A promise does not hold. `kind` is a short stable name for tests and summaries."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"{kind}: {detail}")


CHECKS = frozenset("abcdef")


class Checker:
    def __init__(self, disabled: frozenset[str] = frozenset()) -> None:
        if not disabled <= CHECKS:
            raise ValueError(f"checks {sorted(disabled - CHECKS)}: valid are {sorted(CHECKS)}")
        self.disabled = disabled
        self.committed: dict[tuple[str, int], int] = {}  # (uid, partition) -> offset
        self.frontier: dict[TopicPartition, int] = {}  # highest offset anyone processed to

    # (a)
    def single_owner(self, members: Iterable[SimMember]) -> None:
        if "a" in self.disabled:
            return
        seen: dict[TopicPartition, int] = {}
        for member in members:
            if not member.active:
                continue
            for tp in member.owned:
                if tp in seen:
                    raise Violation(
                        "double-owner",
                        f"{tp[0]}/{tp[1]} owned by live members pid {seen[tp]} and pid "
                        f"{member.pid} ({member.member_id})",
                    )
                seen[tp] = member.pid

    # (b)
    def committed_entry(self, entry: Entry) -> None:
        if not isinstance(entry, OffsetsCommitted):
            return
        for topic, uid, partition, offset in entry.offsets:
            before = self.committed.get((uid, partition))
            if before is not None and offset < before and "b" not in self.disabled:
                raise Violation(
                    "offset-regressed",
                    f"{topic}/{partition}: committed {offset} after {before}",
                )
            self.committed[(uid, partition)] = offset

    def commit_acknowledged(
        self, offsets: Iterable[tuple[str, int, int]], topics: Mapping[str, TopicMeta]
    ) -> None:
        if "b" in self.disabled:
            return
        for topic, partition, offset in offsets:
            committed = self.committed.get((topics[topic].uid, partition))
            if committed is None or committed < offset:
                raise Violation(
                    "ack-before-commit",
                    f"a commit of {topic}/{partition} at {offset} was acknowledged while the "
                    f"log's committed offset is {committed}",
                )

    def read_back(
        self, coordinator: Coordinator, group: str, topics: Mapping[str, TopicMeta]
    ) -> None:
        if "b" in self.disabled:
            return
        uids = {meta.uid: name for name, meta in topics.items()}
        expected = {(uids[uid], p): o for (uid, p), o in self.committed.items() if uid in uids}
        found = coordinator.offsets(group, topics)
        if found != expected:
            lower = {tp: (o, found.get(tp)) for tp, o in expected.items() if found.get(tp) != o}
            raise Violation(
                "offset-read-back",
                f"after a failover, (committed, read back) differ at {sorted(lower.items())[:4]}",
            )

    # (c)
    def commit_refused(
        self, before: dict[TopicPartition, int], after: dict[TopicPartition, int], why: str
    ) -> None:
        if before != after and "c" not in self.disabled:
            raise Violation("refused-commit-changed", f"a refused commit ({why}) changed offsets")

    def commit_accepted(
        self, view: GroupView | None, member_id: str, offsets: Iterable[tuple[str, int, int]]
    ) -> None:
        if "c" in self.disabled:
            return
        member = None
        if view is not None:
            member = next((m for m in view.members if m.id == member_id), None)
        if member is None:
            raise Violation(
                "zombie-commit", f"member {member_id!r}, not in the group, committed {offsets}"
            )
        for topic, partition, _ in offsets:
            if (topic, partition) not in member.assignment:
                raise Violation(
                    "commit-not-owned",
                    f"member {member_id!r} committed {topic}/{partition}, not in its assignment",
                )

    # (f)
    def starts_at_commit(self, pid: int, tp: TopicPartition, uid: str, position: int) -> None:
        committed = self.committed.get((uid, tp[1]), 0)
        if position != committed and "f" not in self.disabled:
            raise Violation(
                "start-not-at-commit",
                f"pid {pid} starts {tp[0]}/{tp[1]} at {position}; its committed offset is "
                f"{committed}",
            )

    def processing_starts(self, pid: int, tp: TopicPartition, start: int, end: int) -> None:
        reached = self.frontier.get(tp, 0)
        if start > reached and "f" not in self.disabled:
            raise Violation(
                "skipped-records",
                f"pid {pid} processed {tp[0]}/{tp[1]} from {start}; offsets {reached}..{start - 1} "
                "were never processed",
            )
        self.frontier[tp] = max(reached, end)
