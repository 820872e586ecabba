"""The SWIM host: drives the pure `membership.Swim` core from the event loop.

A `Ticker` (`cluster.clock`; a `LoopTicker` unless a test passes a `FakeTicker`) calls `tick()`
every `SwimConfig.tick_ms`; received packets are decoded and handed to the
core; after each input the core's outbox is sent (one unary `Peer.Swim` call per message, fire
and forget, as over UDP) and its events are passed to `on_events`. A message to a known member is
dialled through the dial map, so chaos proxies cut gossip as well as Raft.

Every change of a member's state is logged at INFO, one line each (`member_joined`,
`member_updated`, `member_suspected`, `member_alive` (a suspicion refuted), `member_dead` (with
who declared it), `member_left`). The core reports suspicion as a state, not an event: the
host compares the suspects once per tick (O(members) every `tick_ms`).

Every packet sent is dated and signed with the cluster secret (`PeerAuth.sign_swim`); the peer
service checks received ones before they reach `receive` (a forged "dead" changes nothing).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from cluster.clock import Ticker, ticker_or_loop
from cluster.logs import event, log_event
from cluster.peer_auth import PeerAuth
from cluster.transport import PeerTransport
from membership import (
    CodecError,
    EventKind,
    Member,
    MembershipEvent,
    MemberState,
    Swim,
    SwimConfig,
)
from membership.codec import decode, encode
from proto import peer_pb2

__all__ = ["GossipHost"]

log = logging.getLogger("flotilla.gossip")

_EVENT_NAMES = {
    EventKind.JOIN: "member_joined",
    EventKind.UPDATE: "member_updated",
    EventKind.DEAD: "member_dead",
    EventKind.LEAVE: "member_left",
}


class GossipHost:
    def __init__(
        self,
        member: Member,
        config: SwimConfig,
        transport: PeerTransport,
        on_events: Callable[[list[MembershipEvent]], None],
        rng: random.Random | None = None,
        ticker: Ticker | None = None,
        peer_auth: PeerAuth | None = None,
    ) -> None:
        """`peer_auth`: signs every packet sent (receivers check it: `cluster.peer_service`)."""
        self.peer_auth = peer_auth
        self.member = member
        self.swim = Swim(member, config, rng or random.Random())
        self.ticker = ticker_or_loop(ticker, config.tick_ms / 1000)
        self.transport = transport
        self.on_events = on_events
        self._sends: set[asyncio.Task[bool]] = set()
        self.malformed_packets = 0
        self.suspects: set[str] = set()  # as last logged

    def start(self, seeds: list[str]) -> None:
        if seeds:
            self.swim.join(seeds)
        self.ticker.start(self._on_tick)
        self._flush()

    def address_of(self, member_id: str) -> str | None:
        member = self.swim.member(member_id)
        return member.address if member is not None else None

    def raft_address_of(self, member_id: str) -> str | None:
        """Where `member_id` takes Raft frames over raw TCP (None: unknown, or it takes them
        over its gRPC port only)."""
        member = self.swim.member(member_id)
        return (member.raft_address or None) if member is not None else None

    def receive(self, packet: peer_pb2.SwimPacket) -> None:
        try:
            message = decode(packet.payload)
        except CodecError as error:
            self.malformed_packets += 1
            log.warning("dropped a malformed SWIM packet from %s: %s", packet.from_node, error)
            return
        self.swim.receive(message)
        self._flush()

    def leave(self) -> None:
        self.swim.leave()
        self._flush()

    def _on_tick(self, at: float) -> None:
        self.swim.tick()
        self._flush()
        self._log_suspicions()

    def _flush(self) -> None:
        for outgoing in self.swim.take_outbox():
            address = outgoing.to_address
            if outgoing.to_id is not None:
                address = self.transport.dial_map.address_for(outgoing.to_id, address)
            packet = peer_pb2.SwimPacket(
                from_node=self.member.id,
                from_address=self.member.address,
                payload=encode(outgoing.message),
            )
            if self.peer_auth is not None:
                self.peer_auth.sign_swim(packet)
            task = asyncio.get_running_loop().create_task(self.transport.send_swim(address, packet))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
        events = self.swim.take_events()
        if events:
            for each in events:
                _log_event(each)
            self.on_events(events)

    def _log_suspicions(self) -> None:
        suspects = {r.member.id for r in self.swim.records() if r.state is MemberState.SUSPECT}
        if suspects == self.suspects:
            return
        for member_id in sorted(suspects - self.suspects):
            event(log, "member_suspected", member=member_id, address=self.address_of(member_id))
        for member_id in sorted(self.suspects - suspects):
            if self.swim.member_state(member_id) is MemberState.ALIVE:
                event(log, "member_alive", member=member_id, reason="suspicion refuted")
        self.suspects = suspects

    async def stop(self) -> None:
        await self.ticker.stop()
        for task in list(self._sends):
            task.cancel()


def _log_event(change: MembershipEvent) -> None:
    member = change.member
    fields: dict[str, object] = {"member": member.id, "address": member.address}
    if change.kind is EventKind.JOIN:
        fields.update(rack=member.rack, weight=member.weight, version=member.version)
        if member.raft_address:
            fields.update(raft_address=member.raft_address)
    if change.declared_by:
        fields["declared_by"] = change.declared_by
    level = logging.WARNING if change.kind is EventKind.DEAD else logging.INFO
    fields["incarnation"] = change.incarnation
    log_event(log, _EVENT_NAMES[change.kind], fields, level)
