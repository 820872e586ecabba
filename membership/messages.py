"""The messages SWIM nodes exchange, and the `Outgoing` envelope the core hands to its host.

Every message names its sender (`sender_id`, `sender_address`), so a host only has to deliver
bytes: replies go to `sender_address`, even when the sender is not (yet) in the receiver's table.
Probe-path messages (`Ping`, `Ack`, `PingReq`, `Nack`, `Gossip`) piggyback up to a byte budget of
gossip `updates`; push-pull messages carry the sender's whole member table instead.

The probe exchange, for one `seq_no` chosen by the prober P about target T:

    P -> T      Ping(seq_no, target_id=T)                       direct probe
    T -> P      Ack(seq_no)
    P -> R_i    PingReq(seq_no, T, T's address)                 after the direct timeout, k relays
    R_i -> T    Ping(relay seq_no, target_id=T)
    T -> R_i    Ack(relay seq_no);   R_i -> P  Ack(seq_no)      forwarded
    R_i -> P    Nack(seq_no)                                    when T did not answer R_i in time
"""

from __future__ import annotations

from dataclasses import dataclass

from membership.types import Member, MemberRecord, Update

__all__ = [
    "Ack",
    "Gossip",
    "Message",
    "Nack",
    "Outgoing",
    "Ping",
    "PingReq",
    "PushPullRequest",
    "PushPullResponse",
]


@dataclass(frozen=True, slots=True)
class Ping:
    """A probe of `target_id`; answered with `Ack(seq_no)` by that member only."""

    sender_id: str
    sender_address: str
    seq_no: int
    target_id: str
    updates: tuple[Update, ...] = ()


@dataclass(frozen=True, slots=True)
class Ack:
    """The answer to `Ping(seq_no)`, sent by the target or forwarded by a relay."""

    sender_id: str
    sender_address: str
    seq_no: int
    updates: tuple[Update, ...] = ()


@dataclass(frozen=True, slots=True)
class PingReq:
    """Asks the receiver to probe `target_id` at `target_address` for the sender."""

    sender_id: str
    sender_address: str
    seq_no: int
    target_id: str
    target_address: str
    updates: tuple[Update, ...] = ()


@dataclass(frozen=True, slots=True)
class Nack:
    """A relay's report that the target of `PingReq(seq_no)` did not answer it (Lifeguard)."""

    sender_id: str
    sender_address: str
    seq_no: int
    updates: tuple[Update, ...] = ()


@dataclass(frozen=True, slots=True)
class Gossip:
    """Updates sent on their own: a suspicion to the suspect, a refutation, a leave."""

    sender_id: str
    sender_address: str
    updates: tuple[Update, ...] = ()


@dataclass(frozen=True, slots=True)
class PushPullRequest:
    """The sender's full member table; the receiver merges it and answers with its own.

    `join` marks the request of a member joining through a seed address.
    """

    sender: Member
    states: tuple[MemberRecord, ...]
    join: bool = False

    @property
    def sender_id(self) -> str:
        return self.sender.id

    @property
    def sender_address(self) -> str:
        return self.sender.address


@dataclass(frozen=True, slots=True)
class PushPullResponse:
    """The answer to a `PushPullRequest`: the responder's full member table."""

    sender: Member
    states: tuple[MemberRecord, ...]

    @property
    def sender_id(self) -> str:
        return self.sender.id

    @property
    def sender_address(self) -> str:
        return self.sender.address


Message = Ping | Ack | PingReq | Nack | Gossip | PushPullRequest | PushPullResponse


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message the host must send to `to_address` (`to_id` is None when not yet known)."""

    to_address: str
    to_id: str | None
    message: Message
