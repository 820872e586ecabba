"""Raft's hard state (term, vote, commit), persisted with an atomic, fsynced write.

A vote must be durable before the message granting it is sent, and a term before any message of
that term: `HardStateStore.save` returns only once the new state would survive a crash, and a
crash during `save` leaves the previous state intact (temp file + fsync + rename + fsync dir).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from storage.atomic import write_atomic
from storage.errors import CorruptLog, InvalidArgument

__all__ = ["HardState", "HardStateStore"]

_NAME = "raft.state"


@dataclass(frozen=True, slots=True)
class HardState:
    term: int = 0
    vote: str | None = None
    commit: int = 0


class HardStateStore:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = os.path.join(os.fspath(directory), _NAME)

    def load(self) -> HardState:
        """The saved state, or the zero state if none was ever saved."""
        try:
            with open(self.path, "rb") as file:
                raw = file.read()
        except FileNotFoundError:
            return HardState()
        try:
            data = json.loads(raw)
            state = HardState(int(data["term"]), data["vote"], int(data["commit"]))
        except (ValueError, KeyError, TypeError) as error:
            raise CorruptLog(f"{self.path} is not a Raft hard state ({error})") from None
        if state.vote is not None and not isinstance(state.vote, str):
            raise CorruptLog(f"{self.path}: vote {state.vote!r} is not a node id")
        return state

    def save(self, state: HardState) -> None:
        if state.term < 0 or state.commit < 0:
            raise InvalidArgument(f"{state}: term and commit must be >= 0")
        payload = {"term": state.term, "vote": state.vote, "commit": state.commit}
        write_atomic(self.path, json.dumps(payload).encode())
