"""Majority arithmetic over a set of voters. Learners never appear here.

quorum(voters)          == len(voters) // 2 + 1
committed_index(...)    == the largest i such that at least quorum(voters) voters have
                           match_index >= i
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping

from raft.types import NodeId

__all__ = ["VoteResult", "committed_index", "has_quorum", "vote_result"]


class VoteResult(enum.IntEnum):
    PENDING = 0
    WON = 1
    LOST = 2


def committed_index(voters: Collection[NodeId], match_index: Callable[[NodeId], int]) -> int:
    if not voters:
        return 0
    matches = sorted((match_index(v) for v in voters), reverse=True)
    return matches[len(matches) // 2]


def vote_result(voters: Collection[NodeId], votes: Mapping[NodeId, bool]) -> VoteResult:
    quorum = len(voters) // 2 + 1
    granted = rejected = 0
    for voter in voters:
        answer = votes.get(voter)
        if answer is True:
            granted += 1
        elif answer is False:
            rejected += 1
    if granted >= quorum:
        return VoteResult.WON
    if len(voters) - rejected < quorum:
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(voters: Collection[NodeId], is_active: Callable[[NodeId], bool]) -> bool:
    return sum(1 for v in voters if is_active(v)) >= len(voters) // 2 + 1
