"""The state every part of `RaftNode` shares, declared once for the role mixins
(`raft.election`, `raft.follower`, `raft.leader`), and the hooks they call on each other.
`RaftNode.__init__` (raft.core) initialises all of it."""

from __future__ import annotations

import random

from raft.config import RaftConfig
from raft.faults import RaftFaults
from raft.log_view import LogView
from raft.progress import Progress
from raft.types import Configuration, LogPosition, Message, NodeId, Role

__all__ = ["NodeState"]


class NodeState:
    # State, initialised by RaftNode.__init__.
    id: NodeId
    config: RaftConfig
    log: LogView
    term: int
    commit: int
    role: Role
    leader_id: NodeId | None
    quiesced: bool
    _rng: random.Random
    _faults: RaftFaults
    _messages: list[Message]
    _progress: dict[NodeId, Progress]
    _transferee: NodeId | None
    _transfer_elapsed: int
    _pending_conf_index: int
    _uncommitted: list[tuple[int, int]]
    _uncommitted_bytes: int
    _election_elapsed: int
    _deferred_ticks: int
    _randomized_timeout: int
    _clock: int  # ticks since this node object was created
    _leader_contact: int  # _clock when a leader was last heard from (or the node started)
    _lease_acks: dict[NodeId, int]  # leader: the latest echoed lease_tick of each member
    _lease_void: bool  # leader: a transfer began this term, so no lease reads
    _heartbeat_elapsed: int
    _durable_index: int
    vote: NodeId | None
    _votes: dict[NodeId, bool]
    _applied: int
    _boundary_state: bytes  # the host state that came with the pending log boundary
    _configuration: Configuration
    _configs: list[tuple[int, Configuration]]
    _voters: tuple[NodeId, ...]
    _members: tuple[NodeId, ...]
    _deleted_log_end: LogPosition  # see RaftNode.vote_floor

    # Hooks implemented by RaftNode.
    def _send(self, message: Message) -> None:
        raise NotImplementedError

    def _reset(self, term: int) -> None:
        raise NotImplementedError

    def _become_follower(self, term: int, leader: NodeId | None) -> None:
        raise NotImplementedError

    def _become_leader_hook(self) -> None:
        raise NotImplementedError

    def _require_leader(self) -> None:
        raise NotImplementedError

    def _config_at(self, index: int) -> Configuration:
        raise NotImplementedError

    def _use_configuration(self, config: Configuration) -> None:
        raise NotImplementedError

    def wake(self) -> None:
        raise NotImplementedError

    def _become_leader(self) -> None:
        raise NotImplementedError

    def _step_follower(self, m: Message) -> None:
        raise NotImplementedError

    def _promotable(self) -> bool:
        raise NotImplementedError
