"""The transmit-limited queue of gossip updates waiting to be piggybacked.

Contracts:

- At most one queued update per member: a newer update about a member replaces the older one (it
  supersedes it by the ordering rules in `membership.types`).
- `take(budget_bytes, live_members)` returns the updates to piggyback on one message: fewest
  transmissions first, newest first among equals, as many as fit in `budget_bytes`. Each returned
  update counts one transmission; an update is dropped once it has been sent
  `retransmit_limit(n) = retransmit_mult · ceil(log10(n + 1))` times (SWIM's λ·log n), with n the
  live member count at the time of sending.
"""

from __future__ import annotations

from dataclasses import dataclass

from membership.codec import encoded_update_size
from membership.config import SwimConfig
from membership.types import Update

__all__ = ["BroadcastQueue"]


@dataclass(slots=True)
class _Queued:
    update: Update
    size_bytes: int
    order: int
    transmits: int = 0


class BroadcastQueue:
    def __init__(self, config: SwimConfig) -> None:
        self._config = config
        self._by_member: dict[str, _Queued] = {}
        self._next_order = 0

    def __len__(self) -> int:
        return len(self._by_member)

    def enqueue(self, update: Update) -> None:
        """Queue `update`, replacing any queued update about the same member."""
        self._next_order += 1
        self._by_member[update.member_id] = _Queued(
            update, encoded_update_size(update), self._next_order
        )

    def queued(self, member_id: str) -> Update | None:
        entry = self._by_member.get(member_id)
        return entry.update if entry is not None else None

    def take(self, budget_bytes: int, live_members: int) -> tuple[Update, ...]:
        if not self._by_member or budget_bytes <= 0:
            return ()
        limit = self._config.retransmit_limit(live_members)
        candidates = sorted(self._by_member.values(), key=lambda q: (q.transmits, -q.order))
        chosen: list[Update] = []
        for entry in candidates:
            if entry.size_bytes > budget_bytes:
                continue
            budget_bytes -= entry.size_bytes
            chosen.append(entry.update)
            entry.transmits += 1
            if entry.transmits >= limit:
                del self._by_member[entry.update.member_id]
        return tuple(chosen)
