"""Members, their states, the events placement consumes, and the gossip updates that carry state.

Contracts:

- A `Member` is identified by `id`; `address` is where its messages go (the host's dial address,
  opaque to the core). `weight`, `rack` and `version` are metadata for placement and operators.
- Member state advances by *incarnation*: only the member itself raises its own incarnation (to
  refute a suspicion, to announce new metadata, or to leave). For one member, updates are ordered

      Alive(i)   overrides Alive(j), Suspect(j)         when i > j, and Dead(j)/Left(j) when i > j
      Suspect(i) overrides Alive(j)                     when i >= j, and Suspect(j) when i > j
      Dead(i)    overrides Alive(j), Suspect(j)         when i >= j
      Leave(i)   overrides Alive(j), Suspect(j), Dead(j) when i >= j

  so the member's own newest word (a higher incarnation) always wins over rumours about it.
- Events are emitted once per transition as seen by this node: `JOIN` when a member becomes live
  (new, or back from dead/left), `UPDATE` when a live member's address or metadata changes,
  `LEAVE` when it left gracefully, `DEAD` when it was declared failed. Alive and suspect members are
  *live* (placement keeps them); dead and left members are not.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from membership.errors import InvalidMember

__all__ = [
    "Alive",
    "Dead",
    "EventKind",
    "Leave",
    "Member",
    "MemberRecord",
    "MemberState",
    "MembershipEvent",
    "Suspect",
    "Update",
]


class MemberState(enum.IntEnum):
    """A member's state in one node's view. The integer values are the wire encoding."""

    ALIVE = 0
    SUSPECT = 1
    DEAD = 2
    LEFT = 3

    @property
    def is_live(self) -> bool:
        """Alive and suspect members are live (placement keeps them); dead and left are not."""
        return self is MemberState.ALIVE or self is MemberState.SUSPECT


class EventKind(enum.Enum):
    JOIN = "join"
    UPDATE = "update"
    LEAVE = "leave"
    DEAD = "dead"


# In a member's wire encoding the raft address follows the version after this mark (a node of
# an earlier release reads exactly five fields per member: membership.codec)
RAFT_ADDRESS_MARK = "+raft="


@dataclass(frozen=True, slots=True)
class Member:
    """Who a member is and where to reach it.

    id:      unique, stable name of the member (non-empty).
    address: where the host delivers messages for it (non-empty, opaque to the core).
    weight:  relative capacity for weighted rendezvous placement (> 0, finite; default 1.0).
    rack:    failure domain for rack-aware placement ("" when unknown).
    version: software version the member runs (informational; "" when unknown; never holds
             `RAFT_ADDRESS_MARK`, which the wire format uses after it).
    raft_address: a second address for the member's Raft frames ("": none, use `address`;
             opaque to the core).
    """

    id: str
    address: str
    weight: float = 1.0
    rack: str = ""
    version: str = ""
    raft_address: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidMember(f"member id {self.id!r} is not valid: use a non-empty string")
        if not isinstance(self.address, str) or not self.address:
            raise InvalidMember(
                f"address {self.address!r} of member {self.id!r} is not valid: "
                "use a non-empty string"
            )
        weight = self.weight
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not math.isfinite(weight)
            or weight <= 0
        ):
            raise InvalidMember(
                f"weight {weight!r} of member {self.id!r} is not valid: use a finite number > 0"
            )
        if not isinstance(self.rack, str) or not isinstance(self.version, str):
            raise InvalidMember(
                f"rack {self.rack!r} / version {self.version!r} of member {self.id!r} "
                "are not valid: use strings"
            )
        if not isinstance(self.raft_address, str) or RAFT_ADDRESS_MARK in self.version:
            raise InvalidMember(
                f"raft address {self.raft_address!r} / version {self.version!r} of member "
                f"{self.id!r} are not valid: use strings, the version without "
                f"{RAFT_ADDRESS_MARK!r}"
            )


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One row of a node's member table as exchanged in push-pull."""

    member: Member
    state: MemberState
    incarnation: int


@dataclass(frozen=True, slots=True)
class MembershipEvent:
    """A change in this node's view, for placement and operators.

    `declared_by` names the member whose suspicion timer declared a `DEAD` (None otherwise).
    """

    kind: EventKind
    member: Member
    incarnation: int
    declared_by: str | None = None


@dataclass(frozen=True, slots=True)
class Alive:
    """`member` is alive at `incarnation` (also how metadata changes and refutations travel)."""

    member: Member
    incarnation: int

    @property
    def member_id(self) -> str:
        return self.member.id


@dataclass(frozen=True, slots=True)
class Suspect:
    """`accuser_id` failed to reach `member_id` at `incarnation` (directly and indirectly)."""

    member_id: str
    incarnation: int
    accuser_id: str


@dataclass(frozen=True, slots=True)
class Dead:
    """`declared_by` saw its suspicion of `member_id` at `incarnation` expire unrefuted."""

    member_id: str
    incarnation: int
    declared_by: str


@dataclass(frozen=True, slots=True)
class Leave:
    """`member_id` left the cluster gracefully at `incarnation` (sent by the member itself)."""

    member_id: str
    incarnation: int


Update = Alive | Suspect | Dead | Leave
