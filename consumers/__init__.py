"""Consumer groups as a pure core: the state of the groups one `__groups` partition holds (members,
their epochs and assignments, committed offsets), folded from that partition's committed log
entries, and the coordinator's decisions (joins, heartbeats, incremental rebalances, fencing,
session expiry), taken on requests and ticks and returned as commands to replicate. No I/O, no
clock, no threads: the node (`cluster/groups.py`) feeds it and carries its commands out, and
`consumers/sim/` checks its promises under a seeded simulation."""

from consumers.coordinator import Coordinator, CoordinatorConfig, Outcome
from consumers.types import (
    CommitRequest,
    FencedMember,
    GroupError,
    GroupNotEmpty,
    GroupNotFound,
    GroupView,
    HeartbeatReply,
    HeartbeatRequest,
    InvalidGroupRequest,
    MemberView,
    PartitionView,
    TopicMeta,
    TopicPartition,
    UnknownTopic,
)

__all__ = [
    "CommitRequest",
    "Coordinator",
    "CoordinatorConfig",
    "FencedMember",
    "GroupError",
    "GroupNotEmpty",
    "GroupNotFound",
    "GroupView",
    "HeartbeatReply",
    "HeartbeatRequest",
    "InvalidGroupRequest",
    "MemberView",
    "Outcome",
    "PartitionView",
    "TopicMeta",
    "TopicPartition",
    "UnknownTopic",
]
