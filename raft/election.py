"""Elections, the part of `RaftNode` that campaigns and votes: PreVote, real and
transfer campaigns, vote granting (one vote per term, only for an up-to-date log), and counting.

The vote floor (issue 21). A vote is a promise backed by the log — "I hold every entry I
acknowledged; I elect only a log at least as up to date". A replica that deleted its log broke
the promise: in group {s, x, y} with s cut off, y commits entries with x; x is removed, retires,
and is added back; a stale s whose configuration still names x a voter then won x's vote with a
log lacking those entries, and both s and y committed. So a replica votes (and campaigns) as if
it still held every log it deleted: a candidate must be at least as up to date as its own log
*and* as the `vote_floor`, the end of the logs it deleted (the ends only grow, by max, across
retirements). Safety: every committed entry it ever acknowledged is in its current log or was
in a deleted one; a candidate at least as up to date as a log holding a committed entry holds it
(the usual Leader Completeness argument, which needs only that such a log existed), so its
votes count exactly as those of a replica that never lost anything. Liveness: it refuses only
candidates less up to date than a log it held (as a replica that kept that log would), and it
reaches the floor by catching up: a leader it accepts has a term no older than the replica's
kept term, so that leader's log holds an entry of a later term than any the replica held, or, in
the same term, every entry of that term the replica held. Pre-votes follow the same rule (a
pre-vote promises what the vote would do); a `LogReset` leaves the floor as it is, a second
retirement saves the greater of it and the log then held, and `probe_membership` (a pre-vote
request, which changes no one's state) needs nothing. A rule "vote only while a configuration in your own log
names you" would not do: catching up, the replica first holds the configurations of its earlier
membership, voter included, with a log no longer than the stale candidate's; nor would "only a
voter of the latest configuration votes", which is not live (a learner promoted by an entry it
has not received yet must vote to elect a leader that has it: Raft thesis §4.2.3).
"""

from __future__ import annotations

import enum

from raft.errors import RaftConfigError
from raft.node_state import NodeState
from raft.quorum import VoteResult, vote_result
from raft.types import (
    AppendRequest,
    Heartbeat,
    LogPosition,
    LogReset,
    Message,
    Role,
    VoteRequest,
    VoteResponse,
)

__all__ = ["Campaign", "ElectionMixin"]


class Campaign(enum.Enum):
    PRE_VOTE = 0
    ELECTION = 1
    TRANSFER = 2


class ElectionMixin(NodeState):
    # -- the election timer: which ticks only count ------------------------------------------
    def quiet_ticks(self) -> int:
        """How many of the next ticks only count: each would move the node's clocks and nothing
        else (no message, no change of role, term or vote, nothing for a Ready, and
        `ticks_without_leader` stays on the same side of an election timeout). The host may
        pass them with one `pass_ticks(n)` instead of n `tick()`s (issue 28: a host of tens of
        thousands of groups then touches only the groups whose timer is due). 0 for a leader
        (its ticks send heartbeats and check its quorum) and for a quiesced node (a tick wakes
        it). Changes only with the node's inputs (a step, a tick, a proposal, a call)."""
        if self.role is Role.LEADER or self.quiesced:
            return 0
        # the tick that brings `_election_elapsed` to the timeout may campaign (`tick`)
        quiet = self._randomized_timeout + self._deferred_ticks - self._election_elapsed - 1
        silent = self._clock - max(self._leader_contact, 0)  # `ticks_without_leader`
        election_ticks = self.config.election_ticks
        if silent < election_ticks:
            quiet = min(quiet, election_ticks - silent - 1)
        return max(quiet, 0)

    def pass_ticks(self, ticks: int) -> None:
        """`ticks` ticks at once, at most `quiet_ticks()`: exactly what as many `tick()` calls
        would do (they only count)."""
        if not 0 <= ticks <= self.quiet_ticks():
            raise RaftConfigError(
                f"pass_ticks({ticks}): only 0..{self.quiet_ticks()} ticks are quiet now "
                "(quiet_ticks); tick() the others"
            )
        self._clock += ticks
        self._election_elapsed += ticks

    def _campaign(self, campaign: Campaign) -> None:
        if campaign is Campaign.PRE_VOTE:
            self._reset(self.term)
            self.role = Role.PRE_CANDIDATE
            vote_term = self.term + 1
        else:
            self._reset(self.term + 1)
            self.role = Role.CANDIDATE
            self.vote = self.id
            vote_term = self.term
        self._votes = {self.id: True}
        if vote_result(self._voters, self._votes) is VoteResult.WON:
            self._won(campaign)
            return
        last_index, last_term = self.log.last_index, self.log.last_term
        pre_vote = campaign is Campaign.PRE_VOTE
        transfer = campaign is Campaign.TRANSFER
        for voter in self._voters:
            if voter != self.id:
                request = VoteRequest(
                    vote_term, self.id, voter, last_index, last_term, pre_vote, transfer
                )
                self._send(request)

    def _won(self, campaign: Campaign) -> None:
        if campaign is Campaign.PRE_VOTE:
            self._campaign(Campaign.ELECTION)
        else:
            self._become_leader()

    def _below_vote_floor(self, last: LogPosition) -> bool:
        """Is a log ending at `last` less up to date than a log this replica deleted?"""
        return last < self._deleted_log_end and not self._faults.rejoined_votes_blind

    def _on_vote_request(self, m: VoteRequest) -> None:
        if m.pre_vote:
            can_vote = m.term > self.term or self.vote == m.sender
            can_vote = can_vote or (self.vote is None and self.leader_id is None)
        else:
            can_vote = self.vote == m.sender or (self.vote is None and self.leader_id is None)
            if self._faults.double_vote and self.role is not Role.LEADER:
                can_vote = True
        up_to_date = self.log.is_up_to_date(m.last_log_index, m.last_log_term)
        # and as up to date as any log this replica deleted when it retired (`vote_floor`)
        up_to_date = up_to_date and not self._below_vote_floor(
            LogPosition(m.last_log_term, m.last_log_index)
        )
        if can_vote and (up_to_date or self._faults.vote_ignores_log):
            self._send(VoteResponse(m.term, self.id, m.sender, True, m.pre_vote))
            if not m.pre_vote:
                self._election_elapsed = self._deferred_ticks = 0  # a leader is being elected
                self.vote = m.sender
        else:
            self._send(VoteResponse(self.term, self.id, m.sender, False, m.pre_vote))

    def _step_candidate(self, m: Message) -> None:
        kind = type(m)
        if kind is AppendRequest or kind is Heartbeat or kind is LogReset:
            self._become_follower(self.term, m.sender)
            self._step_follower(m)
        elif kind is VoteResponse:
            assert isinstance(m, VoteResponse)
            if m.pre_vote != (self.role is Role.PRE_CANDIDATE):
                return  # an answer to an earlier round
            self._votes.setdefault(m.sender, m.granted)
            result = vote_result(self._voters, self._votes)
            if result is VoteResult.WON:
                self._won(Campaign.PRE_VOTE if m.pre_vote else Campaign.ELECTION)
            elif result is VoteResult.LOST:
                self._become_follower(self.term, None)
