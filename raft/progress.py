"""What a leader knows of each member's log, and its flow control.

    match_index < next_index                    (always)
    match_index: the highest index known to be durably stored by the member and equal to
                 the leader's entry; the commit quorum counts only these
    next_index:  the next index to send

States:
- PROBE: the leader does not know where the logs agree. It sends one AppendRequest and waits
  (`probe_sent`) for the answer, or for an answer to a heartbeat sent after it (`append_tick`:
  messages to a member keep their order, so that append or its answer was lost), before
  sending another; a rejection moves `next_index` back (by the follower's hint).
- REPLICATE: the logs agree up to `match_index`; the leader streams entries optimistically,
  advancing `next_index` as it sends, and pauses when the unacknowledged bytes or messages
  reach `max_inflight_bytes` / `max_inflight_msgs`. A rejection drops back to PROBE.

A follower whose `next_index` falls below the leader's first retained index is sent a `LogReset`
and probed from the boundary.
"""

from __future__ import annotations

import enum
from collections import deque

__all__ = ["Progress", "ProgressState"]


class ProgressState(enum.IntEnum):
    PROBE = 0
    REPLICATE = 1


class Progress:
    __slots__ = (
        "append_tick",
        "commit_sent",
        "inflight",
        "inflight_bytes",
        "is_learner",
        "match_index",
        "next_index",
        "probe_sent",
        "recent_active",
        "state",
        "was_active",
    )

    def __init__(self, next_index: int, *, is_learner: bool = False) -> None:
        self.match_index = 0
        self.next_index = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflight: deque[tuple[int, int]] = deque()  # (last index of a message, its bytes)
        self.inflight_bytes = 0
        self.recent_active = False
        # answered within the last whole check-quorum window (True until one has passed: a new
        # member, a new leader's or a woken one's, gets a window to answer): a member unmatched
        # and silent that long does not hold its leader's quiescence (`LeaderMixin.quiesce`)
        self.was_active = True
        self.is_learner = is_learner
        self.commit_sent = 0  # the highest commit index sent to the member
        self.append_tick = (
            -1
        )  # the leader's clock when it last sent the member entries (or a reset)

    def __repr__(self) -> str:
        return (
            f"Progress(match={self.match_index}, next={self.next_index}, {self.state.name}, "
            f"probe_sent={self.probe_sent}, inflight={len(self.inflight)})"
        )

    def become_probe(self) -> None:
        self.state = ProgressState.PROBE
        self.next_index = self.match_index + 1
        self.probe_sent = False
        self._clear_inflight()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next_index = self.match_index + 1
        self.probe_sent = False
        self._clear_inflight()

    def reset_to(self, boundary_index: int) -> None:
        """A LogReset was sent: probe from the boundary, paused until the member answers."""
        self.state = ProgressState.PROBE
        self.next_index = boundary_index + 1
        self.probe_sent = True
        self._clear_inflight()

    def maybe_update(self, index: int) -> bool:
        """The member acknowledged `index`; True if that raised `match_index`."""
        updated = index > self.match_index
        if updated:
            self.match_index = index
            self.probe_sent = False
        self.next_index = max(self.next_index, index + 1)
        return updated

    def forget_lost(self, rejected: int, hint_index: int) -> bool:
        """The member rejected an append at `rejected` (no older than `match_index`, and the one
        it was sent in probe state) with a log ending below `match_index`: it lost entries it
        had acknowledged — a replica that retired (log deleted) while still counted here, and
        re-opened. Probe again from its log's end; True if so. Lowering `match_index` is always
        safe (a commit already made stands; it only counts the member for less)."""
        if hint_index >= self.match_index or rejected < self.match_index:
            return False
        if self.state is ProgressState.PROBE and rejected != self.next_index - 1:
            return False
        self.match_index = hint_index
        self.become_probe()
        return True

    def maybe_decrease_to(self, rejected: int, hint_index: int) -> bool:
        """The member rejected an append whose prev_index was `rejected`; False if stale."""
        if rejected == 0 and hint_index < self.match_index:
            # No append is rejected at index 0 (every log agrees there): this is a member
            # answering a heartbeat whose commit its log does not reach. It lost entries it
            # acknowledged (its log was found damaged, and it is rebuilt from its peers keeping
            # its vote floor: cluster.opener). Probing from its end is safe: a lower match index
            # only delays commits (the commit index never goes back).
            self.match_index = hint_index
            self.become_probe()
            return True
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match_index:
                return False
            self.next_index = self.match_index + 1
            return True
        if self.next_index - 1 != rejected:
            return False
        self.next_index = max(min(rejected, hint_index + 1), self.match_index + 1)
        self.probe_sent = False
        return True

    def sent(self, last_index: int, size_bytes: int, entry_count: int) -> None:
        """An AppendRequest ending at `last_index` went out."""
        if self.state is ProgressState.REPLICATE:
            if entry_count:
                self.next_index = last_index + 1
                self.inflight.append((last_index, size_bytes))
                self.inflight_bytes += size_bytes
        else:
            self.probe_sent = True

    def free_to(self, index: int) -> None:
        """Messages ending at or below `index` are acknowledged."""
        inflight = self.inflight
        while inflight and inflight[0][0] <= index:
            self.inflight_bytes -= inflight.popleft()[1]

    def free_first(self) -> None:
        if self.inflight:
            self.inflight_bytes -= self.inflight.popleft()[1]

    def is_paused(self, max_inflight_bytes: int, max_inflight_msgs: int) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        return self.inflight_bytes >= max_inflight_bytes or len(self.inflight) >= max_inflight_msgs

    def _clear_inflight(self) -> None:
        self.inflight.clear()
        self.inflight_bytes = 0
