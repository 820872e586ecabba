"""SWIM with Lifeguard: cluster membership and failure detection as a pure state machine.

`Swim` is one member; the host (cluster/, or `membership.sim`) feeds it ticks and messages and
sends what it puts in its outbox. `membership.codec` turns messages into compact msgpack bytes.
This package imports nothing else of Flotilla's.
"""

from __future__ import annotations

from membership.config import SwimConfig
from membership.errors import CodecError, ConfigError, InvalidMember, MembershipError, NotRunning
from membership.messages import (
    Ack,
    Gossip,
    Message,
    Nack,
    Outgoing,
    Ping,
    PingReq,
    PushPullRequest,
    PushPullResponse,
)
from membership.swim import Swim
from membership.types import (
    Alive,
    Dead,
    EventKind,
    Leave,
    Member,
    MemberRecord,
    MembershipEvent,
    MemberState,
    Suspect,
    Update,
)

__all__ = [
    "Ack",
    "Alive",
    "CodecError",
    "ConfigError",
    "Dead",
    "EventKind",
    "Gossip",
    "InvalidMember",
    "Leave",
    "Member",
    "MemberRecord",
    "MemberState",
    "MembershipError",
    "MembershipEvent",
    "Message",
    "Nack",
    "NotRunning",
    "Outgoing",
    "Ping",
    "PingReq",
    "PushPullRequest",
    "PushPullResponse",
    "Suspect",
    "Swim",
    "SwimConfig",
    "Update",
]
