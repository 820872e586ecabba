"""`Swim`: one member's SWIM + Lifeguard failure detector and gossip, as a pure state machine.

The host (cluster/, or the simulator) drives it with three inputs and drains two outputs:

    tick()               advance time by one tick of `config.tick_ms` (the only notion of time)
    receive(message)     a decoded message from the network (it names its sender)
    join / leave / update_metadata
    take_outbox()  -> [Outgoing(to_address, to_id, message)]   send each, best effort, any order
    take_events()  -> [MembershipEvent]                         join / update / leave / dead

It never reads a clock, sleeps, or touches a socket; its only randomness is the `random.Random`
it is given, so a seed replays it exactly. The transport may lose, delay and reorder messages.

One protocol period (length probe_interval · awareness multiplier):

    t0                  Ping the next target of a shuffled round-robin list (a Suspect about
                        the target rides along if we suspect it: the buddy system)
    t0 + timeout·mult   no Ack yet: PingReq to `indirect_checks` random alive members
    t0 + interval·mult  still no Ack: suspect the target (and tell it directly); the awareness
                        score rises by the relays' missing Nacks; the next period starts

Every probe-path message piggybacks the least-sent queued updates (an Ack or Nack to a member we
hold suspect, dead or left carries that verdict first, so it can refute). Every
`push_pull_interval` ticks the whole table is exchanged with one random alive member, and every
`reconnect_interval` ticks with one random dead member, which is how a healed partition merges
back; a message from a member we have never heard of also triggers an exchange with it.

After `leave()` the member stops probing but keeps answering, so its `Leave` rides on its acks;
the host should keep it running for about one probe interval and then stop it.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from membership.awareness import Awareness
from membership.codec import encoded_update_size
from membership.config import SwimConfig
from membership.errors import NotRunning
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
from membership.state import ClusterState
from membership.types import (
    Member,
    MemberRecord,
    MembershipEvent,
    MemberState,
    Update,
)

__all__ = ["Swim"]

# Bytes reserved in a probe-path message for its own fields (ids, addresses, sequence number).
_MESSAGE_OVERHEAD_BYTES = 128
_REAP_EVERY_TICKS = 600


@dataclass(slots=True)
class _Probe:
    target_id: str
    seq_no: int
    direct_deadline_tick: int
    end_tick: int
    indirect_sent: bool = False
    expected_nacks: int = 0
    nacks: int = 0


@dataclass(slots=True)
class _Relay:
    requester_id: str
    requester_address: str
    requester_seq_no: int
    nack_tick: int
    expire_tick: int
    nacked: bool = False


class Swim:
    """One SWIM member. See the module docstring for the contract."""

    state_class: ClassVar[type[ClusterState]] = ClusterState
    awareness_class: ClassVar[type[Awareness]] = Awareness

    def __init__(self, self_member: Member, config: SwimConfig, rng: random.Random) -> None:
        self._config = config
        self._rng = rng
        self._awareness = self.awareness_class(config.awareness_max_multiplier)
        self._state = self.state_class(self_member, config, rng, self._awareness)
        self._now = 0
        self._seq_no = 0
        self._probe: _Probe | None = None
        self._relays: dict[int, _Relay] = {}
        self._outbox: list[Outgoing] = []
        # Spread the members' timers so that they do not all fire on the same tick.
        self._next_probe_tick = rng.randint(1, config.probe_interval_ticks)
        self._next_push_pull_tick = rng.randint(1, config.push_pull_interval_ticks)
        self._next_reconnect_tick = rng.randint(1, config.reconnect_interval_ticks)
        self._join_seeds: tuple[str, ...] = ()
        self._next_join_tick = 0
        self._joined = False
        self._stranger_syncs: dict[str, int] = {}

    # -- reading ----------------------------------------------------------------------------

    @property
    def config(self) -> SwimConfig:
        return self._config

    @property
    def self_member(self) -> Member:
        return self._state.self_entry.member

    @property
    def incarnation(self) -> int:
        return self._state.self_incarnation

    @property
    def now_tick(self) -> int:
        return self._now

    @property
    def awareness_score(self) -> int:
        return self._awareness.score

    @property
    def joined(self) -> bool:
        """True once a seed answered `join` (or when no seed was needed)."""
        return self._joined

    @property
    def leaving(self) -> bool:
        return self._state.leaving

    def live_members(self) -> list[Member]:
        """Alive and suspect members, self included (what placement uses), sorted by id."""
        return sorted(
            (e.member for e in self._state.entries.values() if e.state.is_live),
            key=lambda m: m.id,
        )

    def live_count(self) -> int:
        return self._state.live_count

    def member_state(self, member_id: str) -> MemberState | None:
        entry = self._state.entries.get(member_id)
        return entry.state if entry is not None else None

    def member(self, member_id: str) -> Member | None:
        """The member known by this id (dead and left members included), in O(1)."""
        entry = self._state.entries.get(member_id)
        return entry.member if entry is not None else None

    def records(self) -> tuple[MemberRecord, ...]:
        """The whole table, dead and left members included."""
        return self._state.records()

    # -- outputs ----------------------------------------------------------------------------

    def take_outbox(self) -> list[Outgoing]:
        self._flush_direct()
        outbox, self._outbox = self._outbox, []
        return outbox

    def take_events(self) -> list[MembershipEvent]:
        events, self._state.events = self._state.events, []
        return events

    # -- commands ---------------------------------------------------------------------------

    def join(self, seed_addresses: Iterable[str]) -> None:
        """Push-pull with every seed (retried each join_retry_interval until one answers)."""
        if self._state.leaving:
            raise NotRunning(f"member {self.self_member.id!r} has left; it cannot join again")
        own = self.self_member.address
        self._join_seeds = tuple(a for a in seed_addresses if a != own)
        if not self._join_seeds:
            self._joined = True
            return
        self._joined = False
        self._send_join(self._now)

    def leave(self) -> None:
        """Announce a graceful leave: the `Leave` goes straight to `leave_fanout` live members
        and rides on every later message of this member."""
        if self._state.leaving:
            return
        leave = self._state.leave(self._now)
        self._probe = None
        live = (MemberState.ALIVE, MemberState.SUSPECT)
        for member in self._state.random_members(self._config.leave_fanout, live):
            self._send(member.address, member.id, Gossip(*self._sender(), (leave,)))

    def update_metadata(
        self,
        *,
        weight: float | None = None,
        rack: str | None = None,
        version: str | None = None,
        address: str | None = None,
    ) -> None:
        """Change this member's metadata; every member sees an `update` event."""
        if self._state.leaving:
            raise NotRunning(f"member {self.self_member.id!r} has left; it cannot update")
        current = self.self_member
        changed = dataclasses.replace(
            current,
            weight=current.weight if weight is None else weight,
            rack=current.rack if rack is None else rack,
            version=current.version if version is None else version,
            address=current.address if address is None else address,
        )
        if changed != current:
            self._state.update_self(changed)

    def tick(self) -> None:
        self._now += 1
        now = self._now
        self._advance_relays(now)
        if not self._state.leaving:
            self._advance_probe(now)
            if now >= self._next_probe_tick:
                self._start_probe(now)
            self._state.expire_suspicions(now)
            self._periodic_exchanges(now)
        if now % _REAP_EVERY_TICKS == 0:
            self._state.reap(now)

    def receive(self, message: Message) -> None:
        now = self._now
        if not isinstance(message, (PushPullRequest, PushPullResponse)):
            for update in message.updates:
                self._state.apply(update, now, message.sender_id)
            if message.sender_id not in self._state.entries and not self._state.leaving:
                self._sync_with_stranger(message.sender_id, message.sender_address, now)
        match message:
            case Ping():
                if message.target_id == self._state.self_id:
                    self._reply(message.sender_id, message.sender_address, Ack, message.seq_no)
            case Ack():
                self._on_ack(message, now)
            case Nack():
                probe = self._probe
                if probe is not None and probe.seq_no == message.seq_no:
                    probe.nacks += 1
            case PingReq():
                self._on_ping_req(message, now)
            case PushPullRequest():
                self._state.merge_remote(message.states, message.sender.id, now)
                response = PushPullResponse(self.self_member, self._state.records())
                self._send(message.sender.address, message.sender.id, response)
            case PushPullResponse():
                self._state.merge_remote(message.states, message.sender.id, now)
                self._joined = True
            case Gossip():
                pass

    # -- the probe cycle --------------------------------------------------------------------

    def _start_probe(self, now: int) -> None:
        target_id = self._state.ring.next(self._state.entries, self._rng)
        multiplier = self._awareness.multiplier
        self._next_probe_tick = now + self._config.probe_interval_ticks * multiplier
        if target_id is None:
            return
        entry = self._state.entries[target_id]
        buddy = self._state.rumour_about(target_id) if entry.state is MemberState.SUSPECT else None
        self._seq_no += 1
        self._probe = _Probe(
            target_id=target_id,
            seq_no=self._seq_no,
            direct_deadline_tick=now + self._config.probe_timeout_ticks * multiplier,
            end_tick=self._next_probe_tick,
        )
        ping = Ping(*self._sender(), self._seq_no, target_id, self._piggyback(buddy))
        self._send(entry.member.address, target_id, ping)

    def _advance_probe(self, now: int) -> None:
        probe = self._probe
        if probe is None:
            return
        if not probe.indirect_sent and now >= probe.direct_deadline_tick:
            probe.indirect_sent = True
            target = self._state.entries.get(probe.target_id)
            if target is not None:
                relays = self._state.random_members(
                    self._config.indirect_checks, (MemberState.ALIVE,), probe.target_id
                )
                probe.expected_nacks = len(relays)
                for relay in relays:
                    request = PingReq(
                        *self._sender(),
                        probe.seq_no,
                        probe.target_id,
                        target.member.address,
                        self._piggyback(None),
                    )
                    self._send(relay.address, relay.id, request)
        if now >= probe.end_tick:
            self._probe = None
            # Relays that did not even nack suggest that our own messages are not getting through.
            missing = probe.expected_nacks - probe.nacks
            self._awareness.apply_delta(max(0, missing) if probe.expected_nacks else 1)
            self._state.suspect_after_failed_probe(probe.target_id, now)

    def _on_ack(self, ack: Ack, now: int) -> None:
        probe = self._probe
        if probe is not None and probe.seq_no == ack.seq_no:
            self._probe = None
            self._awareness.apply_delta(-1)
            return
        relay = self._relays.pop(ack.seq_no, None)
        if relay is not None:
            self._reply(relay.requester_id, relay.requester_address, Ack, relay.requester_seq_no)

    def _on_ping_req(self, request: PingReq, now: int) -> None:
        target_state = self.member_state(request.target_id)
        if target_state is MemberState.DEAD or target_state is MemberState.LEFT:
            # The requester missed a verdict we hold: tell it now (we still ping, in case).
            rumour = self._state.rumour_about(request.target_id)
            if rumour is not None:
                self._state.direct.append((request.sender_address, request.sender_id, rumour))
        self._seq_no += 1
        self._relays[self._seq_no] = _Relay(
            requester_id=request.sender_id,
            requester_address=request.sender_address,
            requester_seq_no=request.seq_no,
            nack_tick=now + self._config.nack_timeout_ticks,
            expire_tick=now + self._config.probe_timeout_ticks,
        )
        ping = Ping(*self._sender(), self._seq_no, request.target_id, self._piggyback(None))
        self._send(request.target_address, request.target_id, ping)

    def _advance_relays(self, now: int) -> None:
        if not self._relays:
            return
        for seq_no, relay in list(self._relays.items()):
            if not relay.nacked and now >= relay.nack_tick:
                relay.nacked = True
                self._reply(
                    relay.requester_id, relay.requester_address, Nack, relay.requester_seq_no
                )
            if now >= relay.expire_tick:
                del self._relays[seq_no]

    # -- anti-entropy -----------------------------------------------------------------------

    def _periodic_exchanges(self, now: int) -> None:
        config = self._config
        if not self._joined and self._join_seeds and now >= self._next_join_tick:
            self._send_join(now)
        if now >= self._next_push_pull_tick:
            self._next_push_pull_tick = now + config.push_pull_interval_for(self.live_count())
            for member in self._state.random_members(1, (MemberState.ALIVE,)):
                self._push_pull(member.address, member.id, join=False)
        if now >= self._next_reconnect_tick:
            self._next_reconnect_tick = now + config.reconnect_interval_ticks
            for member in self._state.random_members(1, (MemberState.DEAD,)):
                self._push_pull(member.address, member.id, join=False)

    def _sync_with_stranger(self, member_id: str, address: str, now: int) -> None:
        """A member we have never heard of talks to us: our views differ (a join whose gossip
        missed us), so exchange tables with it, at most once per probe interval per member."""
        if self._stranger_syncs.get(member_id, -1) > now:
            return
        if len(self._stranger_syncs) > 64:
            self._stranger_syncs = {m: t for m, t in self._stranger_syncs.items() if t > now}
        self._stranger_syncs[member_id] = now + self._config.probe_interval_ticks
        self._push_pull(address, member_id, join=False)

    def _send_join(self, now: int) -> None:
        self._next_join_tick = now + self._config.join_retry_interval_ticks
        for address in self._join_seeds:
            self._push_pull(address, None, join=True)

    def _push_pull(self, address: str, member_id: str | None, *, join: bool) -> None:
        request = PushPullRequest(self.self_member, self._state.records(), join)
        self._send(address, member_id, request)

    # -- sending ----------------------------------------------------------------------------

    def _sender(self) -> tuple[str, str]:
        member = self.self_member
        return member.id, member.address

    def _piggyback(self, first: Update | None) -> tuple[Update, ...]:
        budget = self._config.max_packet_bytes - _MESSAGE_OVERHEAD_BYTES
        if first is not None:
            budget -= encoded_update_size(first)
        taken = self._state.broadcasts.take(budget, self._state.live_count)
        if first is None:
            return taken
        return (first, *(u for u in taken if u != first))

    def _reply(
        self, to_id: str, to_address: str, kind: type[Ack] | type[Nack], seq_no: int
    ) -> None:
        """An Ack or Nack; a rumour about its receiver rides first so that it can refute it."""
        rumour = self._state.rumour_about(to_id)
        self._send(to_address, to_id, kind(*self._sender(), seq_no, self._piggyback(rumour)))

    def _send(self, address: str, member_id: str | None, message: Message) -> None:
        self._outbox.append(Outgoing(address, member_id, message))

    def _flush_direct(self) -> None:
        if not self._state.direct:
            return
        grouped: dict[tuple[str, str], list[Update]] = {}
        for address, member_id, update in self._state.direct:
            updates = grouped.setdefault((address, member_id), [])
            if update not in updates:
                updates.append(update)
        self._state.direct = []
        for (address, member_id), updates in grouped.items():
            self._send(address, member_id, Gossip(*self._sender(), tuple(updates)))
