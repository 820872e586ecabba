"""The SWIM host on fake clocks: three `GossipHost`s join and then detect a crashed member,
tick by tick, with no real time passing and no timing to flake; the same seeds give the same run.

The hosts talk through an in-memory datagram network (the way memberlist ships a mock network for
its tests): a packet sent waits until the test delivers it, and packets to a crashed member are
lost, as over UDP. Everything above the network (the host's encoding, decoding, dial map, event
logging, suspicion tracking) is the real one.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Coroutine
from typing import cast

from cluster.clock import FakeTicker
from cluster.dialmap import DialMap
from cluster.gossip import GossipHost
from cluster.transport import PeerTransport
from membership import EventKind, Member, MembershipEvent, MemberState, SwimConfig
from proto import peer_pb2

TICK_MS = 100
IDS = ("a", "b", "c")


class _Network:
    def __init__(self) -> None:
        self.dial_map = DialMap()
        self.hosts: dict[str, GossipHost] = {}  # by address
        self.in_flight: deque[tuple[str, peer_pb2.SwimPacket]] = deque()
        self.crashed: set[str] = set()  # addresses whose packets are lost

    def send_swim(self, address: str, packet: peer_pb2.SwimPacket) -> Coroutine[None, None, bool]:
        # queued at once (not when the host's send task runs), so `deliver` sees every packet
        self.in_flight.append((address, packet))
        return _sent()

    def deliver(self) -> None:
        for _ in range(10_000):  # bounded: each delivery may send more
            if not self.in_flight:
                return
            address, packet = self.in_flight.popleft()
            if address not in self.crashed and packet.from_address not in self.crashed:
                self.hosts[address].receive(packet)
        raise AssertionError("the network never went quiet")


async def _sent() -> bool:
    return True


async def _run(seed: int) -> tuple[int, list[tuple[str, EventKind, str]]]:
    """Ticks until all three know each other, crashes `c`, ticks until `a` and `b` declare it
    dead; returns the ticks that took and every membership event seen, in order."""
    network = _Network()
    events: list[tuple[str, EventKind, str]] = []
    config = SwimConfig.lan(tick_ms=TICK_MS)
    hosts: dict[str, tuple[GossipHost, FakeTicker]] = {}
    for index, member_id in enumerate(IDS):
        address = f"127.0.0.1:{7001 + index}"
        ticker = FakeTicker(TICK_MS / 1000)

        def on_events(changes: list[MembershipEvent], me: str = member_id) -> None:
            events.extend((me, change.kind, change.member.id) for change in changes)

        host = GossipHost(
            Member(member_id, address),
            config,
            cast(PeerTransport, network),
            on_events,
            rng=random.Random(seed + index),
            ticker=ticker,
        )
        network.hosts[address] = host
        hosts[member_id] = (host, ticker)
    try:
        for member_id, (host, _) in hosts.items():
            host.start([] if member_id == "a" else ["127.0.0.1:7001"])
        network.deliver()

        def tick(ids: tuple[str, ...]) -> None:
            for member_id in ids:
                hosts[member_id][1].advance(1)
            network.deliver()

        def sees(viewer: str, member_id: str, state: MemberState) -> bool:
            return hosts[viewer][0].swim.member_state(member_id) is state

        for _ in range(20 * config.probe_interval_ticks):
            if all(sees(v, m, MemberState.ALIVE) for v in IDS for m in IDS if v != m):
                break
            tick(IDS)
        else:
            raise AssertionError("the three members never all saw each other alive")

        network.crashed.add(hosts["c"][0].member.address)  # c stops: no ticks, no packets
        for ticks in range(1, 100 * config.probe_interval_ticks):
            tick(("a", "b"))
            if sees("a", "c", MemberState.DEAD) and sees("b", "c", MemberState.DEAD):
                return ticks, events
        raise AssertionError("the crashed member was never declared dead")
    finally:
        for host, _ in hosts.values():
            await host.stop()


def test_the_hosts_detect_a_crashed_member_on_fake_clocks_the_same_way_each_run() -> None:
    ticks, events = asyncio.run(_run(seed=7))
    config = SwimConfig.lan(tick_ms=TICK_MS)
    # a probe must fail, then a suspicion must time out: more than one protocol period
    assert config.probe_interval_ticks < ticks < 100 * config.probe_interval_ticks
    assert ("a", EventKind.DEAD, "c") in events and ("b", EventKind.DEAD, "c") in events
    assert not any(kind is EventKind.DEAD and member != "c" for _, kind, member in events)
    # no wall clock in the loop: the same seeds replay the same run, event for event
    assert asyncio.run(_run(seed=7)) == (ticks, events)
