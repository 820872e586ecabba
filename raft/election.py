"""Elections, the part of `RaftNode` that campaigns and votes: PreVote, real and
transfer campaigns, vote granting (one vote per term, only for an up-to-date log), and counting."""

from __future__ import annotations

import enum

from raft.node_state import NodeState
from raft.quorum import VoteResult, vote_result
from raft.types import (
    AppendRequest,
    Heartbeat,
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

    def _on_vote_request(self, m: VoteRequest) -> None:
        if m.pre_vote:
            can_vote = m.term > self.term or self.vote == m.sender
            can_vote = can_vote or (self.vote is None and self.leader_id is None)
        else:
            can_vote = self.vote == m.sender or (self.vote is None and self.leader_id is None)
            if self._faults.double_vote and self.role is not Role.LEADER:
                can_vote = True
        up_to_date = self.log.is_up_to_date(m.last_log_index, m.last_log_term)
        if can_vote and (up_to_date or self._faults.vote_ignores_log):
            self._send(VoteResponse(m.term, self.id, m.sender, True, m.pre_vote))
            if not m.pre_vote:
                self._election_elapsed = 0
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
