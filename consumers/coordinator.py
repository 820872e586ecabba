"""The coordinator of the groups one `__groups` partition holds (CONTRACT: signatures fixed, body
to be written; see the module docstring of `consumers`).

Lifecycle, driven by the node when it leads the partition:
    c = Coordinator(config)
    for each committed entry of the partition, in log order:  c.load(entry_bytes)
    c.start()           # loading done; every member's session restarts now (failover: no rebalance)
    then, on the event loop, one call at a time:
        c.heartbeat(req, topics) / c.commit(req, topics) / c.reset_offsets(...) / c.delete_group(...)
            -> Outcome: `reply`, and `entries` (bytes) ALREADY applied to c's state, which the node
               appends to the partition (acks=all) and answers `reply` only once they commit
               (none: answer at once). A GroupError raised = refused, nothing changed.
        c.tick() -> list[bytes]     # every config.tick_ms: expired sessions -> entries to append
    If an append fails (leadership lost, timeout), the node drops `c` and, if still the leader,
    builds a new one from the log.
Entries are self-describing (a format version first); `load` raises `UnknownEntry` for one it
cannot read (a newer node wrote it) and the node stops serving that partition's groups rather than
guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from consumers.types import (
    CommitRequest,
    GroupView,
    HeartbeatReply,
    HeartbeatRequest,
    TopicMeta,
    TopicPartition,
)

__all__ = ["Coordinator", "CoordinatorConfig", "Outcome", "UnknownEntry"]

T = TypeVar("T")


class UnknownEntry(Exception):
    """An entry of a format this version cannot read."""


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    tick_ms: int = 100  # how often the node calls `tick`
    heartbeat_interval_ms: int = 500
    default_session_timeout_ms: int = 10_000
    min_session_timeout_ms: int = 1_000
    max_session_timeout_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    reply: T
    entries: list[bytes] = field(default_factory=list)


class Coordinator:
    def __init__(self, config: CoordinatorConfig = CoordinatorConfig()) -> None:
        raise NotImplementedError

    # -- loading -------------------------------------------------------------------------------
    def load(self, entry: bytes) -> None:
        """Folds one committed entry (a record value of the partition) into the state."""
        raise NotImplementedError

    def start(self) -> None:
        """Loading is done: sessions of every loaded member start now."""
        raise NotImplementedError

    # -- requests --------------------------------------------------------------------------------
    def heartbeat(
        self, request: HeartbeatRequest, topics: Mapping[str, TopicMeta]
    ) -> Outcome[HeartbeatReply]:
        raise NotImplementedError

    def commit(self, request: CommitRequest, topics: Mapping[str, TopicMeta]) -> Outcome[None]:
        raise NotImplementedError

    def offsets(
        self, group: str, topics: Mapping[str, TopicMeta], only: frozenset[str] = frozenset()
    ) -> dict[TopicPartition, int]:
        """Committed offsets of the topics' current incarnations (`only`: those topics)."""
        raise NotImplementedError

    def describe(self, group: str, topics: Mapping[str, TopicMeta]) -> GroupView:
        raise NotImplementedError

    def groups(self) -> list[str]:
        raise NotImplementedError

    def reset_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], topics: Mapping[str, TopicMeta]
    ) -> Outcome[None]:
        raise NotImplementedError

    def delete_group(self, group: str) -> Outcome[None]:
        raise NotImplementedError

    # -- time ------------------------------------------------------------------------------------
    def tick(self) -> list[bytes]:
        raise NotImplementedError
