"""The SWIM host: drives the pure `membership.Swim` core from the event loop.

A timer calls `tick()` every `SwimConfig.tick_ms`; received packets are decoded and handed to the
core; after each input the core's outbox is sent (one unary `Peer.Swim` call per message, fire
and forget, as over UDP) and its events are passed to `on_events`. A message to a known member is
dialled through the dial map, so chaos proxies cut gossip as well as Raft.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable

from cluster.transport import PeerTransport
from membership import CodecError, Member, MembershipEvent, Swim, SwimConfig
from membership.codec import decode, encode
from proto import peer_pb2

__all__ = ["GossipHost"]

log = logging.getLogger("flotilla.gossip")


class GossipHost:
    def __init__(
        self,
        member: Member,
        config: SwimConfig,
        transport: PeerTransport,
        on_events: Callable[[list[MembershipEvent]], None],
        rng: random.Random | None = None,
    ) -> None:
        self.member = member
        self.swim = Swim(member, config, rng or random.Random())
        self.transport = transport
        self.on_events = on_events
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[bool]] = set()
        self.malformed_packets = 0

    def start(self, seeds: list[str]) -> None:
        if seeds:
            self.swim.join(seeds)
        self._task = asyncio.get_running_loop().create_task(self._ticker())
        self._flush()

    def address_of(self, member_id: str) -> str | None:
        member = self.swim.member(member_id)
        return member.address if member is not None else None

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

    async def _ticker(self) -> None:
        tick_s = self.swim.config.tick_ms / 1000
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += tick_s
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if loop.time() - next_at > 10 * tick_s:
                next_at = loop.time()  # we were paused: do not replay the missed ticks in a burst
            self.swim.tick()
            self._flush()

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
            task = asyncio.get_running_loop().create_task(self.transport.send_swim(address, packet))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
        events = self.swim.take_events()
        if events:
            self.on_events(events)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._sends):
            task.cancel()
