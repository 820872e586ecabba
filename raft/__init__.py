"""raft: the Raft core as a pure state machine, its logs, and a deterministic simulator.

    node = RaftNode(node_id, bootstrap_configuration, log, hard_state, RaftConfig(), rng)
    node.tick(); node.step(message); node.propose(batch, record_count)
    while node.has_ready():
        ready = node.ready()   # persist (see raft.core for the contract), send, apply
        node.advance(ready)

`raft.core` states the persistence contract; `raft.log` the log interface and the in-memory
log; `raft.storage_log` the log over `storage.SegmentedLog`; `raft.codec` the wire encoding;
`python -m raft.sim` the simulator. Test-only faults live in `raft.faults` and are not exported.
"""

from raft.codec import decode_message, encode_message
from raft.config import RaftConfig
from raft.core import RaftNode
from raft.errors import (
    CodecError,
    ConfigChangeRejected,
    InvalidProposal,
    InvariantViolation,
    LogError,
    NotLeader,
    ProposalDropped,
    RaftConfigError,
    RaftError,
    TransferRejected,
)
from raft.log import LogReader, MemoryLog, RaftLogStorage
from raft.ready import Ready
from raft.storage_log import SegmentedRaftLog
from raft.types import (
    AppendRequest,
    AppendResponse,
    ConfigChange,
    ConfigChangeOp,
    Configuration,
    Entry,
    EntryKind,
    HardState,
    Heartbeat,
    HeartbeatResponse,
    LogBoundary,
    LogPosition,
    LogReset,
    Message,
    NodeId,
    Removed,
    Role,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

__all__ = [
    "AppendRequest",
    "AppendResponse",
    "CodecError",
    "ConfigChange",
    "ConfigChangeOp",
    "ConfigChangeRejected",
    "Configuration",
    "Entry",
    "EntryKind",
    "HardState",
    "Heartbeat",
    "HeartbeatResponse",
    "InvalidProposal",
    "InvariantViolation",
    "LogBoundary",
    "LogError",
    "LogPosition",
    "LogReader",
    "LogReset",
    "MemoryLog",
    "Message",
    "NodeId",
    "NotLeader",
    "ProposalDropped",
    "RaftConfig",
    "RaftConfigError",
    "RaftError",
    "RaftLogStorage",
    "RaftNode",
    "Ready",
    "Removed",
    "Role",
    "SegmentedRaftLog",
    "TimeoutNow",
    "TransferRejected",
    "VoteRequest",
    "VoteResponse",
    "decode_message",
    "encode_message",
]
