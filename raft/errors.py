"""The errors of `raft`, rooted in `RaftError`. Every message names the bad value and what would
have been valid; a call that raises has changed nothing (except where a docstring says so)."""

from __future__ import annotations

__all__ = [
    "CodecError",
    "ConfigChangeRejected",
    "InvalidProposal",
    "InvariantViolation",
    "LogError",
    "NotLeader",
    "ProposalDropped",
    "RaftConfigError",
    "RaftError",
    "TransferRejected",
]


class RaftError(Exception):
    """Base class of every error raised by `raft`."""


class RaftConfigError(RaftError, ValueError):
    """A `RaftConfig` field is out of range."""


class NotLeader(RaftError):
    """The node is not the leader; `leader_hint` is the leader it knows of, if any."""

    def __init__(self, node_id: str, leader_hint: str | None) -> None:
        self.node_id = node_id
        self.leader_hint = leader_hint
        where = f"try {leader_hint}" if leader_hint is not None else "no leader is known yet"
        super().__init__(f"node {node_id} is not the leader ({where})")


class ProposalDropped(RaftError):
    """The leader refused the proposal for now (e.g. a leadership transfer is under way);
    retrying later, possibly on another leader, may succeed."""


class InvalidProposal(RaftError, ValueError):
    """The proposal itself is malformed; retrying it will never succeed."""


class ConfigChangeRejected(RaftError, ValueError):
    """The configuration change does not apply to the current configuration."""


class TransferRejected(RaftError, ValueError):
    """The leadership transfer target is not a voter other than the leader."""


class CodecError(RaftError, ValueError):
    """Bytes that do not decode to a Raft message or configuration entry."""


class LogError(RaftError):
    """A Raft log operation was asked for something outside the log."""


class InvariantViolation(RaftError, AssertionError):
    """The core found its state impossible (e.g. asked to overwrite a committed entry). This is
    a bug or corrupted storage, never a condition to retry."""
