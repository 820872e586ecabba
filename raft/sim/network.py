"""A simulated network: per-message delay, drop, duplication and reordering, plus partitions.

Time is the simulator's tick. A message sent at tick t with delay d is delivered at tick t + d
(d == 0: later in the same tick). Messages due at the same tick are delivered in a shuffled order
when reordering is on. Partitions block directed links and are checked at delivery, so a message
already in flight when a partition starts is lost, as on a real network. All randomness comes from
the simulation's `random.Random`.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from raft.types import AppendRequest, LogReset, Message, NodeId

__all__ = ["Network", "NetworkFaults"]


@dataclass(frozen=True, slots=True)
class NetworkFaults:
    """drop_rate, duplicate_rate: probabilities per message. max_delay_ticks: a delay is drawn
    uniformly from 0..max_delay_ticks. reorder: shuffle messages due at the same tick."""

    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    max_delay_ticks: int = 0
    reorder: bool = True


class Network:
    def __init__(self, rng: random.Random, faults: NetworkFaults) -> None:
        self.rng = rng
        self.faults = faults
        self.calm = False  # calm: no drops (liveness phases); delays and reordering remain
        self._queue: list[tuple[int, int, Message]] = []
        self._seq = 0
        self.blocked: set[tuple[NodeId, NodeId]] = set()
        # A slow link: the node receives the log only up to this index (appends carrying later
        # entries and resets past it are lost), so it stops part-way through a catch-up.
        self.log_limit: dict[NodeId, int] = {}
        self.sent = 0
        self.dropped = 0

    def send(self, message: Message, now: int) -> None:
        faults = self.faults
        rng = self.rng
        self.sent += 1
        if not self.calm and faults.drop_rate and rng.random() < faults.drop_rate:
            self.dropped += 1
            return
        copies = 2 if faults.duplicate_rate and rng.random() < faults.duplicate_rate else 1
        for _ in range(copies):
            delay = rng.randint(0, faults.max_delay_ticks) if faults.max_delay_ticks else 0
            self._seq += 1
            heapq.heappush(self._queue, (now + delay, self._seq, message))

    def due(self, now: int) -> list[Message]:
        """Removes and returns the messages due by `now`, in delivery order."""
        queue = self._queue
        batch: list[Message] = []
        while queue and queue[0][0] <= now:
            message = heapq.heappop(queue)[2]
            if (message.sender, message.recipient) in self.blocked or (
                self.log_limit and self._past_limit(message)
            ):
                self.dropped += 1
                continue
            batch.append(message)
        if self.faults.reorder and len(batch) > 1:
            self.rng.shuffle(batch)
        return batch

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def _past_limit(self, message: Message) -> bool:
        limit = self.log_limit.get(message.recipient)
        if limit is None:
            return False
        if isinstance(message, AppendRequest):
            return bool(message.entries) and message.entries[-1].index > limit
        return isinstance(message, LogReset) and message.boundary.index > limit

    # -- partitions -------------------------------------------------------------------------------
    def heal(self) -> None:
        self.blocked.clear()
        self.log_limit.clear()

    def split(self, side_a: list[NodeId], side_b: list[NodeId]) -> None:
        """Blocks every link between the two sides, both ways."""
        for a in side_a:
            for b in side_b:
                self.blocked.add((a, b))
                self.blocked.add((b, a))

    def block_one_way(self, source: NodeId, target: NodeId) -> None:
        self.blocked.add((source, target))
