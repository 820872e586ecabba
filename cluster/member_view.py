"""What a node makes of its membership over time: who is live, who is in doubt, since when a
member is gone or alive (on the node's ticker's clock), and so who may still hold replicas.

SWIM (`membership.Swim`) says what each member is now; this adds the history the node's
decisions need: placement keeps a member dead for less than `replace_after_s` (a crash and a
quick restart move no data), or gone gracefully for less than `replace_left_after_s` (a SIGTERM
is a restart, as a Kafka or Redpanda broker's controlled shutdown), and leader balancing waits
until a preferred leader has been alive `leader_balance_after_s` (`alive_since`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cluster.config import NodeConfig
from cluster.placement import Candidate
from membership import EventKind, MembershipEvent, MemberState, Swim

__all__ = ["MemberView"]


class MemberView:
    def __init__(self, swim: Swim, config: NodeConfig, clock: Callable[[], float]) -> None:
        """`clock`: seconds now on the node's ticker's clock (never the wall clock)."""
        self.swim = swim
        self.config = config
        self.clock = clock
        self._gone_since: dict[str, float] = {}  # member id -> when SWIM said dead or left
        self._left: set[str] = set()  # of those, the members that left gracefully (restarts)
        self._alive_since: dict[str, float] = {}  # member id -> when it was last seen come alive

    def note(self, events: Iterable[MembershipEvent]) -> set[str]:
        """Takes SWIM's events in order; returns the members they say are gone (dead, left)."""
        now = self.clock()
        gone: set[str] = set()
        for change in events:
            member_id = change.member.id
            if change.kind in (EventKind.DEAD, EventKind.LEAVE):
                gone.add(member_id)
                self._gone_since.setdefault(member_id, now)
                self._alive_since.pop(member_id, None)
                if change.kind is EventKind.LEAVE:
                    self._left.add(member_id)
            else:
                self._gone_since.pop(member_id, None)
                self._left.discard(member_id)
                self._alive_since.setdefault(member_id, now)
        return gone

    def alive_since(self, member_id: str) -> float | None:
        """When this node last saw `member_id` come alive (None: it is not alive now)."""
        return self._alive_since.get(member_id)

    def is_live(self, member_id: str) -> bool:
        state = self.swim.member_state(member_id)
        return state is not None and state.is_live

    def in_doubt(self, member_id: str) -> bool:
        """Is `member_id` anything but alive here (suspected, dead, left, or unknown)? A
        quiesced follower's reads go by it (`cluster.reads.leaderless`)."""
        return self.swim.member_state(member_id) is not MemberState.ALIVE

    def live_candidates(self) -> list[Candidate]:
        return [Candidate(m.id, m.weight, m.rack) for m in self.swim.live_members()]

    def placement_candidates(self) -> list[Candidate]:
        """Live members, plus members dead for less than `replace_after_s` and members that
        left gracefully less than `replace_left_after_s` ago (module docstring)."""
        now = self.clock()
        candidates = self.live_candidates()
        live = {c.node_id for c in candidates}
        config = self.config
        for record in self.swim.records():
            member = record.member
            if member.id in live:
                continue
            since = self._gone_since.get(member.id, now)
            limit = (
                config.replace_left_after_s if member.id in self._left else config.replace_after_s
            )
            if now - since < limit:
                candidates.append(Candidate(member.id, member.weight, member.rack))
        return candidates
