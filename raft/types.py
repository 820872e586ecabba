"""The values that cross the Raft core's boundary: entries, configurations, hard state, messages.

Everything here is a frozen, slotted dataclass or an enum. Node ids are short strings (the
same ids `storage.HardState.vote` holds); a message names its sender and recipient but not its
group: the MultiRaft host wraps messages with the group id on the wire.

Entries:

    kind == NORMAL  <=>  record_count >= 1     (a producer's record batch, opaque bytes)
    kind == NOOP    <=>  record_count == 0 and data == b""
    kind == CONFIG  <=>  record_count == 0 and data == encode_config_entry(...)

so the kind is derivable from `(record_count, len(data))` alone, which is how the storage-backed
log recovers it from an on-disk header that has no kind field.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from storage import HardState

__all__ = [
    "ENTRY_OVERHEAD_BYTES",
    "AppendRequest",
    "AppendResponse",
    "ConfigChange",
    "ConfigChangeOp",
    "Configuration",
    "Entry",
    "EntryKind",
    "HardState",
    "Heartbeat",
    "HeartbeatResponse",
    "LogBoundary",
    "LogPosition",
    "LogReset",
    "Message",
    "NodeId",
    "Removed",
    "Role",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
    "entry_kind",
]

NodeId = str

# What an entry costs beyond its data when sizing messages and in-flight windows: the storage
# header is 48 bytes; the wire encoding is smaller. One figure keeps the accounting simple.
ENTRY_OVERHEAD_BYTES = 48


class EntryKind(enum.IntEnum):
    NORMAL = 0
    NOOP = 1
    CONFIG = 2


def entry_kind(record_count: int, data_bytes: int) -> EntryKind:
    """The kind of an entry from its record count and data length (see the module docstring)."""
    if record_count > 0:
        return EntryKind.NORMAL
    return EntryKind.CONFIG if data_bytes else EntryKind.NOOP


@dataclass(frozen=True, slots=True)
class Entry:
    """One Raft entry: a record batch (NORMAL) or one of Raft's own zero-record entries."""

    index: int
    term: int
    kind: EntryKind
    record_count: int
    data: bytes
    timestamp_ms: int = 0

    @property
    def size_bytes(self) -> int:
        return len(self.data) + ENTRY_OVERHEAD_BYTES


class Role(enum.IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


@dataclass(frozen=True, slots=True)
class Configuration:
    """Who votes and who only receives the log. `voters` and `learners` are disjoint."""

    voters: frozenset[NodeId] = frozenset()
    learners: frozenset[NodeId] = frozenset()

    def __post_init__(self) -> None:
        both = self.voters & self.learners
        if both:
            raise ValueError(f"nodes {sorted(both)} cannot be both voters and learners")

    @property
    def members(self) -> frozenset[NodeId]:
        return self.voters | self.learners

    @property
    def quorum(self) -> int:
        return len(self.voters) // 2 + 1


@dataclass(frozen=True, slots=True, order=True)
class LogPosition:
    """The (term, index) of a log's last entry. Ordered as Raft compares logs: a later term is
    more up to date; in the same term, a longer log is."""

    term: int = 0
    index: int = 0


class ConfigChangeOp(enum.IntEnum):
    ADD_LEARNER = 0
    PROMOTE = 1
    REMOVE = 2


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One single-server step: add a learner, promote a learner to voter, or remove a member."""

    op: ConfigChangeOp
    node_id: NodeId


@dataclass(frozen=True, slots=True)
class LogBoundary:
    """Where a log's retained suffix begins: the "snapshot" of a log whose state is its suffix.

    `index` and `term` are those of the entry just before the first retained one
    (`first_index == index + 1`); `next_offset` is the record offset the first retained entry
    starts at; `config` is the configuration in force at `index` (None when it is the bootstrap
    configuration the node was constructed with).
    """

    index: int = 0
    term: int = 0
    next_offset: int = 0
    config: Configuration | None = None


# -- messages -------------------------------------------------------------------------------
# `term` is the sender's term, except in a granted pre-vote response, which carries the term
# of the pre-vote it answers.


@dataclass(frozen=True, slots=True)
class VoteRequest:
    term: int
    sender: NodeId
    recipient: NodeId
    last_log_index: int
    last_log_term: int
    pre_vote: bool = False
    transfer: bool = False  # campaign started by TimeoutNow: overrides the leader lease


@dataclass(frozen=True, slots=True)
class VoteResponse:
    term: int
    sender: NodeId
    recipient: NodeId
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class AppendRequest:
    term: int
    sender: NodeId
    recipient: NodeId
    prev_index: int
    prev_term: int
    commit: int
    entries: tuple[Entry, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """Success: `index` is the last index the recipient now holds durably and matching the
    leader's log. Rejection: `index` is the rejected `prev_index`, and `(hint_index, hint_term)`
    is the recipient's guess of where the logs may still agree."""

    term: int
    sender: NodeId
    recipient: NodeId
    index: int
    reject: bool = False
    hint_index: int = 0
    hint_term: int = 0


@dataclass(frozen=True, slots=True)
class Heartbeat:
    term: int
    sender: NodeId
    recipient: NodeId
    commit: int
    quiesce: bool = False  # the leader is idle: the recipient may stop ticking
    lease_tick: int = 0  # the leader's clock when it sent this; echoed in the response


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    term: int
    sender: NodeId
    recipient: NodeId
    lease_tick: int = 0  # the `lease_tick` of the heartbeat this answers


@dataclass(frozen=True, slots=True)
class LogReset:
    """The leader no longer holds the entries the recipient needs next: start over at
    `boundary.index + 1` (every entry up to `boundary.index` is committed).

    `state`: the host's state as of `boundary.index` (Raft's snapshot of the state machine),
    opaque to the core: the leader's host fills it in before sending, and the recipient's host
    gets it with the reset (`Ready.boundary_state`). Empty when the host keeps no such state."""

    term: int
    sender: NodeId
    recipient: NodeId
    boundary: LogBoundary
    state: bytes = b""


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    term: int
    sender: NodeId
    recipient: NodeId


@dataclass(frozen=True, slots=True)
class Removed:
    """The recipient is not a member of the configuration set by the entry at `config_index`,
    which the sender knows is committed. A recipient whose own configuration is older (it never
    received that entry) was removed from the group: it may delete its log, keeping its term
    and vote. One whose configuration is as new or newer ignores it (it was added back)."""

    term: int
    sender: NodeId
    recipient: NodeId
    config_index: int


Message = (
    VoteRequest
    | VoteResponse
    | AppendRequest
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | LogReset
    | TimeoutNow
    | Removed
)
