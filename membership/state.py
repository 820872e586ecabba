"""The member table of one node and the rules that change it (memberlist's `state` concern).

`ClusterState` applies gossip updates and push-pull rows by the incarnation ordering written in
`membership.types`, runs the suspicion timers, refutes rumours about this node, and records what
the owner (`Swim`) must act on: `events` (for placement), updates to re-gossip (the broadcast
queue: every accepted change is re-broadcast, which is what makes dissemination epidemic), and
`direct` sends, each one message to one member:

    buddy       a new suspicion from our own probe goes to the suspect first (Lifeguard)
    refute      our refutation goes to the accuser and to `refute_fanout` random live members
    remind      a rumour about us that we already refuted: our current Alive to its sender
    correct     a rumour about X older than the Alive(X) we hold: that Alive to its sender
    verify      a push-pull row says a member we hold alive is dead at the same incarnation:
                we tell the member (it refutes) instead of suspecting it ourselves

Invariants:

    entries[self_id] exists; its incarnation == self_incarnation; only this node raises it
    suspicions.keys() == {id : entries[id].state is SUSPECT}
    live_count == |{id : entries[id].state in (ALIVE, SUSPECT)}|       (self included)

It reads no clock: every method that needs time takes `now_tick`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from membership.awareness import Awareness
from membership.broadcast import BroadcastQueue
from membership.config import SwimConfig
from membership.probe_ring import ProbeRing
from membership.suspicion import Suspicion
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

__all__ = ["ClusterState", "MemberEntry"]

_LIVE = (MemberState.ALIVE, MemberState.SUSPECT)


@dataclass(slots=True)
class MemberEntry:
    member: Member
    state: MemberState
    incarnation: int
    state_change_tick: int


class ClusterState:
    def __init__(
        self,
        self_member: Member,
        config: SwimConfig,
        rng: random.Random,
        awareness: Awareness,
        *,
        incarnation: int = 1,
    ) -> None:
        self.self_id = self_member.id
        self.config = config
        self.rng = rng
        self.awareness = awareness
        self.entries: dict[str, MemberEntry] = {
            self_member.id: MemberEntry(self_member, MemberState.ALIVE, incarnation, 0)
        }
        self.live_count = 1
        self.suspicions: dict[str, Suspicion] = {}
        self.broadcasts = BroadcastQueue(config)
        self.events: list[MembershipEvent] = [
            MembershipEvent(EventKind.JOIN, self_member, incarnation)
        ]
        self.direct: list[tuple[str, str, Update]] = []
        self.leaving = False
        self.ring = ProbeRing(self.is_probe_target)

    # -- reading ----------------------------------------------------------------------------

    @property
    def self_entry(self) -> MemberEntry:
        return self.entries[self.self_id]

    @property
    def self_incarnation(self) -> int:
        return self.self_entry.incarnation

    def is_probe_target(self, member_id: str) -> bool:
        entry = self.entries.get(member_id)
        return entry is not None and member_id != self.self_id and entry.state in _LIVE

    def records(self) -> tuple[MemberRecord, ...]:
        return tuple(MemberRecord(e.member, e.state, e.incarnation) for e in self.entries.values())

    def random_members(
        self, count: int, states: tuple[MemberState, ...], *exclude: str
    ) -> list[Member]:
        pool = [
            e.member
            for member_id, e in self.entries.items()
            if e.state in states and member_id != self.self_id and member_id not in exclude
        ]
        return self.rng.sample(pool, min(count, len(pool)))

    def rumour_about(self, member_id: str) -> Update | None:
        """What this node holds against `member_id` (to tell it, so it can refute), if anything."""
        entry = self.entries.get(member_id)
        if entry is None or member_id == self.self_id:
            return None
        if entry.state is MemberState.SUSPECT:
            return Suspect(member_id, entry.incarnation, self.self_id)
        if entry.state is MemberState.DEAD:
            return Dead(member_id, entry.incarnation, self.self_id)
        if entry.state is MemberState.LEFT:
            return Leave(member_id, entry.incarnation)
        return None

    # -- writing ----------------------------------------------------------------------------

    def _set_state(self, entry: MemberEntry, state: MemberState, now_tick: int) -> None:
        was_live = entry.state in _LIVE
        is_live = state in _LIVE
        self.live_count += int(is_live) - int(was_live)
        entry.state = state
        entry.state_change_tick = now_tick

    def _event(self, kind: EventKind, entry: MemberEntry, declared_by: str | None = None) -> None:
        self.events.append(MembershipEvent(kind, entry.member, entry.incarnation, declared_by))

    def apply(self, update: Update, now_tick: int, sender_id: str | None = None) -> None:
        """Apply one gossiped update (from a message's piggyback or a direct `Gossip`)."""
        if isinstance(update, Alive):
            self.on_alive(update, now_tick)
            return
        if (
            update.member_id == self.self_id
            and update.incarnation < self.self_incarnation
            and not self.leaving
        ):
            # A rumour we already refuted: its sender (and accuser) missed our refutation.
            accuser = update.accuser_id if isinstance(update, Suspect) else None
            self.remind(sender_id, accuser)
            return
        entry = self.entries.get(update.member_id)
        if (
            entry is not None
            and entry.state is MemberState.ALIVE
            and update.incarnation < entry.incarnation
            and sender_id is not None
        ):
            # The sender spreads a rumour its subject already refuted: correct the sender.
            self.correct(sender_id, entry)
        elif isinstance(update, Suspect):
            self.on_suspect(update, now_tick)
        else:
            self.on_dead(update, now_tick)

    def correct(self, member_id: str, entry: MemberEntry) -> None:
        """Send `member_id` the newer `Alive` we hold about `entry`."""
        target = self.entries.get(member_id)
        if target is not None and member_id != self.self_id:
            alive = Alive(entry.member, entry.incarnation)
            self.direct.append((target.member.address, member_id, alive))

    def remind(self, *member_ids: str | None) -> None:
        """Send our current `Alive` straight to `member_ids` (those holding a stale rumour)."""
        me = self.self_entry
        alive = Alive(me.member, me.incarnation)
        for member_id in dict.fromkeys(member_ids):  # ordered: replays must not depend on hashing
            entry = self.entries.get(member_id) if member_id is not None else None
            if entry is not None and member_id != self.self_id:
                self.direct.append((entry.member.address, entry.member.id, alive))

    def on_alive(self, alive: Alive, now_tick: int) -> None:
        member = alive.member
        if member.id == self.self_id:
            me = self.self_entry
            stale = alive.incarnation < me.incarnation
            if (
                self.leaving
                or stale
                or (alive.incarnation == me.incarnation and member == me.member)
            ):
                return
            self.refute(alive.incarnation, accuser_id=None)  # someone holds a wrong view of us
            return
        entry = self.entries.get(member.id)
        if entry is None:
            entry = MemberEntry(member, MemberState.ALIVE, alive.incarnation, now_tick)
            self.entries[member.id] = entry
            self.live_count += 1
            self.ring.add(member.id, self.rng)
            self._event(EventKind.JOIN, entry)
            self.broadcasts.enqueue(alive)
            return
        if alive.incarnation <= entry.incarnation:
            return
        was_live = entry.state in _LIVE
        old_member = entry.member
        entry.member = member
        entry.incarnation = alive.incarnation
        self.suspicions.pop(member.id, None)
        self._set_state(entry, MemberState.ALIVE, now_tick)
        if not was_live:
            self.ring.add(member.id, self.rng)
            self._event(EventKind.JOIN, entry)
        elif old_member != member:
            self._event(EventKind.UPDATE, entry)
        self.broadcasts.enqueue(alive)

    def on_suspect(self, suspect: Suspect, now_tick: int) -> None:
        entry = self.entries.get(suspect.member_id)
        if entry is None or suspect.incarnation < entry.incarnation:
            return
        if suspect.member_id == self.self_id:
            if not self.leaving:
                self.refute(suspect.incarnation, accuser_id=suspect.accuser_id)
            return
        if entry.state is MemberState.SUSPECT and suspect.incarnation == entry.incarnation:
            if self.suspicions[suspect.member_id].confirm(suspect.accuser_id):
                self.broadcasts.enqueue(suspect)  # spread the confirmation (Lifeguard)
            return
        if entry.state not in _LIVE:
            return
        # Alive(j) -> Suspect(i >= j), or Suspect(j) -> Suspect(i > j): the member refuted the
        # older suspicion (we missed that), so a new one starts now.
        entry.incarnation = suspect.incarnation
        self._set_state(entry, MemberState.SUSPECT, now_tick)
        k, min_ticks, max_ticks = self.suspicion_window(self.live_count)
        self.suspicions[suspect.member_id] = Suspicion(
            incarnation=suspect.incarnation,
            first_accuser=suspect.accuser_id,
            start_tick=now_tick,
            expected_confirmations=k,
            min_ticks=min_ticks,
            max_ticks=max_ticks,
        )
        self.broadcasts.enqueue(suspect)

    def on_dead(self, dead: Dead | Leave, now_tick: int) -> None:
        entry = self.entries.get(dead.member_id)
        if entry is None or dead.incarnation < entry.incarnation:
            return
        left = isinstance(dead, Leave)
        if dead.member_id == self.self_id:
            if not self.leaving:
                accuser = dead.declared_by if isinstance(dead, Dead) else None
                self.refute(dead.incarnation, accuser_id=accuser)
            return
        if entry.state is MemberState.LEFT or (entry.state is MemberState.DEAD and not left):
            return
        was_dead = entry.state is MemberState.DEAD
        entry.incarnation = dead.incarnation
        self.suspicions.pop(dead.member_id, None)
        self._set_state(entry, MemberState.LEFT if left else MemberState.DEAD, now_tick)
        if not was_dead:  # dead -> left is bookkeeping only: placement already dropped it
            if isinstance(dead, Dead):
                self._event(EventKind.DEAD, entry, declared_by=dead.declared_by)
            else:
                self._event(EventKind.LEAVE, entry)
        self.broadcasts.enqueue(dead)

    def suspect_after_failed_probe(self, member_id: str, now_tick: int) -> None:
        entry = self.entries.get(member_id)
        if entry is None or entry.state not in _LIVE:
            return
        suspect = Suspect(member_id, entry.incarnation, self.self_id)
        first = entry.state is MemberState.ALIVE
        self.on_suspect(suspect, now_tick)
        if first:  # buddy system: the suspect hears it first, so it can refute at once
            self.direct.append((entry.member.address, member_id, suspect))

    def expire_suspicions(self, now_tick: int) -> None:
        expired = [m for m, s in self.suspicions.items() if s.expired(now_tick)]
        for member_id in expired:
            entry = self.entries[member_id]
            self.on_dead(Dead(member_id, entry.incarnation, self.self_id), now_tick)

    def merge_remote(self, records: tuple[MemberRecord, ...], sender_id: str, now: int) -> None:
        """Merge a push-pull table.

        A remote verdict of dead or suspect about a member we hold alive at the same incarnation
        is not evidence we can check (after a partition it is usually just the other side's view
        of ours): we start no suspicion, but tell the member, so that it refutes to the sender.
        Were the member really gone, our own probes would find out. At a higher incarnation the
        remote knows more than we do, and we suspect (memberlist's rule: never straight to dead).
        """
        for record in records:
            member_id = record.member.id
            if record.state is MemberState.ALIVE:
                self.on_alive(Alive(record.member, record.incarnation), now)
            elif record.state is MemberState.LEFT:
                self.on_dead(Leave(member_id, record.incarnation), now)
            elif member_id == self.self_id:
                if not self.leaving and record.incarnation >= self.self_incarnation:
                    self.refute(record.incarnation, accuser_id=sender_id)
            else:
                self._merge_rumour(record, sender_id, now)

    def _merge_rumour(self, record: MemberRecord, sender_id: str, now: int) -> None:
        member_id = record.member.id
        entry = self.entries.get(member_id)
        if entry is None:
            if record.state is MemberState.SUSPECT:
                self.on_alive(Alive(record.member, record.incarnation), now)
                self.on_suspect(Suspect(member_id, record.incarnation, sender_id), now)
            return
        if record.incarnation > entry.incarnation:
            self.on_suspect(Suspect(member_id, record.incarnation, sender_id), now)
        elif record.incarnation == entry.incarnation and entry.state in _LIVE:
            rumour = Suspect(member_id, record.incarnation, sender_id)
            self.direct.append((entry.member.address, member_id, rumour))

    def refute(self, incarnation: int, accuser_id: str | None) -> None:
        """Answer a rumour about this node with a higher incarnation (and lose some trust in
        our own judgement: being suspected hints that our messages are not getting through)."""
        me = self.self_entry
        me.incarnation = max(me.incarnation, incarnation) + 1
        alive = Alive(me.member, me.incarnation)
        self.broadcasts.enqueue(alive)
        self.awareness.apply_delta(1)
        accuser = self.entries.get(accuser_id) if accuser_id is not None else None
        if accuser is not None and accuser_id != self.self_id:
            self.direct.append((accuser.member.address, accuser.member.id, alive))
        # Eager push: our own probe rate may be stretched by awareness, the suspicion is not.
        others = self.random_members(self.config.refute_fanout, _LIVE, accuser_id or self.self_id)
        for member in others:
            self.direct.append((member.address, member.id, alive))

    def update_self(self, member: Member) -> Alive:
        me = self.self_entry
        me.member = member
        me.incarnation += 1
        alive = Alive(member, me.incarnation)
        self.broadcasts.enqueue(alive)
        self._event(EventKind.UPDATE, me)
        return alive

    def leave(self, now_tick: int) -> Leave:
        me = self.self_entry
        me.incarnation += 1
        self.leaving = True
        self._set_state(me, MemberState.LEFT, now_tick)
        leave = Leave(self.self_id, me.incarnation)
        self.broadcasts.enqueue(leave)
        self._event(EventKind.LEAVE, me)
        return leave

    def reap(self, now_tick: int) -> None:
        """Forget dead and left members after `dead_member_retention_ticks`."""
        horizon = now_tick - self.config.dead_member_retention_ticks
        for member_id, entry in list(self.entries.items()):
            stale = entry.state not in _LIVE and entry.state_change_tick <= horizon
            if stale and member_id != self.self_id:
                del self.entries[member_id]

    # -- seams (the simulator's fault injection overrides these; production code does not) ----

    def suspicion_window(self, live_members: int) -> tuple[int, int, int]:
        """(expected confirmations k, min ticks, max ticks) of a new suspicion."""
        config = self.config
        return (
            config.expected_confirmations(live_members),
            config.suspicion_min_timeout_ticks(live_members),
            config.suspicion_max_timeout_ticks(live_members),
        )
