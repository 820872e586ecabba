"""Raft's hard state (term, vote, commit): what must be durable before a message of that term,
or granting that vote, is sent. A node keeps the hard states of all its groups in one
`storage.state_journal.StateJournal`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HardState"]


@dataclass(frozen=True, slots=True)
class HardState:
    term: int = 0
    vote: str | None = None
    commit: int = 0
