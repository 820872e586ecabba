"""The invariants of Raft (paper §5, Figure 3), checked as the simulation runs.

- Election safety: at most one leader per term.
- Log matching: two entries with the same index and term hold the same data, and the logs that
  hold them agree on the term of the entry before (so, by induction, on the whole prefix).
- Leader completeness: the leader of term T holds every entry committed in a term before T.
  (Only before T: a candidate of an older term may still win after a newer term committed
  something, when its vote responses arrive late; it then steps down as soon as it hears.)
- State-machine safety: no two nodes ever commit different entries at one index.
- Commit durability: when a leader's commit index advances to c, a quorum of its voters holds
  entry c durably (what a crash would keep), so an acknowledged write survives crashes.
- Linearizable lease reads: a leader's `lease_read_index()` is never below an index already
  committed anywhere (checked by the cluster driver after every step).
- No committed entry lost: after every crash, some node still holds the highest committed
  entry durably, and a restarted node's committed prefix is the cluster's.

Checks are incremental: each looks only at what just changed, so the checker costs about as much
as the simulation itself. A failed check raises `Violation`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from raft.log import RaftLogStorage
from raft.log_view import LogView
from raft.types import Entry, EntryKind, LogBoundary, NodeId

__all__ = ["Checker", "SimLog", "Violation"]


class SimLog(RaftLogStorage, Protocol):
    """A host's log as the checker sees it: `MemoryLog`, or `raft.sim.disk.DiskLog`."""

    @property
    def durable_boundary(self) -> LogBoundary: ...

    def durable_term(self, index: int) -> int | None: ...


class Violation(Exception):
    """A Raft invariant does not hold. `kind` is a short stable name for tests and summaries."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"{kind}: {detail}")


class Checker:
    def __init__(self) -> None:
        self.leaders: dict[int, NodeId] = {}  # term -> the node that led it
        # (index, term) -> (kind, data, term of index - 1 or -1 when unknown)
        self.entries: dict[tuple[int, int], tuple[EntryKind, bytes, int]] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, data)
        self.commit_terms: dict[int, int] = {}  # index -> the term it was first committed in
        self.commit_index = 0  # the highest index any node has committed
        self.committed_data: dict[bytes, int] = {}  # NORMAL data -> index, for the client

    # -- election safety and leader completeness ------------------------------------------------
    def on_leader(self, node_id: NodeId, term: int, log: LogView, applied: int) -> None:
        holder = self.leaders.setdefault(term, node_id)
        if holder != node_id:
            raise Violation(
                "election-safety", f"term {term} has two leaders: {holder} and {node_id}"
            )
        start = max(log.first_index, applied + 1)
        commit_terms = self.commit_terms
        for index in range(start, self.commit_index + 1):
            committed = self.committed.get(index)
            if committed is None or commit_terms[index] >= term:
                continue
            if log.term(index) != committed[0]:
                raise Violation(
                    "leader-completeness",
                    f"{node_id} leads term {term} but its log has term {log.term(index)} at "
                    f"index {index}, where term {committed[0]} was committed",
                )

    # -- log matching ------------------------------------------------------------------------------
    def on_append(self, node_id: NodeId, log: SimLog, entries: Iterable[Entry]) -> None:
        """Called after the host wrote `entries` to `log`."""
        known_entries = self.entries
        for entry in entries:
            index = entry.index
            prev_term = log.term(index - 1) if index > log.first_index - 1 else -1
            key = (index, entry.term)
            known = known_entries.get(key)
            if known is None:
                known_entries[key] = (entry.kind, entry.data, prev_term)
                continue
            if known[0] != entry.kind or known[1] != entry.data:
                raise Violation(
                    "log-matching",
                    f"{node_id} holds a different entry at index {index}, term {entry.term}",
                )
            if known[2] != -1 and prev_term != -1 and known[2] != prev_term:
                raise Violation(
                    "log-matching",
                    f"{node_id}: entry ({index}, {entry.term}) follows term {prev_term}, "
                    f"elsewhere term {known[2]}",
                )

    # -- state-machine safety ----------------------------------------------------------------------
    def on_commit(
        self, node_id: NodeId, entries: Iterable[Entry], decided_in_term: int | None = None
    ) -> None:
        """`entries` are committed, as decided by a leader of `decided_in_term` (None: not
        known here; the entry's own term is then taken, a lower bound)."""
        committed = self.committed
        for entry in entries:
            mine = (entry.term, entry.data)
            theirs = committed.get(entry.index)
            if theirs is None:
                committed[entry.index] = mine
                self.commit_terms[entry.index] = (
                    entry.term if decided_in_term is None else decided_in_term
                )
                self.commit_index = max(self.commit_index, entry.index)
                if entry.kind is EntryKind.NORMAL:
                    self.committed_data.setdefault(entry.data, entry.index)
            elif theirs != mine:
                raise Violation(
                    "state-machine-safety",
                    f"{node_id} committed term {entry.term} at index {entry.index}, "
                    f"where term {theirs[0]} was committed before",
                )

    def on_restart(self, node_id: NodeId, log: SimLog, commit: int) -> None:
        """A restarted node's committed prefix must be the cluster's (and now counts as
        committed: the node will serve it)."""
        if commit >= log.first_index:
            try:
                self.on_commit(node_id, log.entries(log.first_index, commit + 1, 1 << 62))
            except Violation as violation:
                raise Violation("lost-commit", f"after a restart: {violation.detail}") from None

    # -- durability ---------------------------------------------------------------------------------
    def on_leader_commit(
        self,
        leader: NodeId,
        term: int,
        commit: int,
        commit_term: int,
        voters: Iterable[NodeId],
        logs: Mapping[NodeId, SimLog],
    ) -> None:
        voters = list(voters)
        holders = [v for v in voters if v in logs and _holds(logs[v], commit, commit_term)]
        if len(holders) < len(voters) // 2 + 1:
            raise Violation(
                "commit-not-durable",
                f"leader {leader} (term {term}) committed index {commit} but only "
                f"{holders or 'no node'} of voters {voters} hold it durably",
            )

    def after_crash(self, logs: Mapping[NodeId, SimLog]) -> None:
        index = self.commit_index
        if index == 0:
            return
        term = self.committed[index][0]
        if not any(_holds(log, index, term) for log in logs.values()):
            raise Violation(
                "lost-commit",
                f"no node holds committed entry {index} (term {term}) durably any more",
            )


def _holds(log: SimLog, index: int, term: int) -> bool:
    """Does the durable part of `log` hold (index, term) or a boundary past it?"""
    return log.durable_boundary.index >= index or log.durable_term(index) == term
