"""A seeded, lossy, delaying, partitionable network for the membership simulator.

Contracts: time is the simulator's tick count; a message sent during tick t is delivered during
tick t + delay. The default delay is 0 (delivered later in the same tick: a LAN round trip is far
shorter than a 100 ms tick), so only jittered messages arrive late. Each message is dropped
independently with probability `loss`; a message crossing a partition is dropped both when sent
and, if a partition appeared meanwhile, when due. Delay is `base_delay_ticks`, plus, for a
`jitter_fraction` of messages, an extra 1..`jitter_max_ticks` ticks (so messages can reorder).
With `encode=True` every message goes through the msgpack codec on the way (slower; proves the
wire format in the loop). Every random choice uses the one `random.Random` given.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass

from membership.codec import decode, encode
from membership.messages import Message, Outgoing

__all__ = ["NetworkConfig", "SimNetwork"]


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    loss: float = 0.0
    base_delay_ticks: int = 0
    jitter_fraction: float = 0.05
    jitter_max_ticks: int = 4
    encode: bool = False


class SimNetwork:
    def __init__(self, config: NetworkConfig, rng: random.Random) -> None:
        self.config = config
        self._rng = rng
        self._queue: list[tuple[int, int, str, Message]] = []
        self._counter = 0
        self._group: dict[str, int] = {}
        self.sent_by: Counter[str] = Counter()
        self.bytes_sent = 0
        self.dropped = 0

    # -- partitions -------------------------------------------------------------------------

    def partition(self, groups: list[set[str]]) -> None:
        """Cut the network into `groups` of addresses; unlisted addresses form group 0."""
        self._group = {
            address: index + 1 for index, group in enumerate(groups) for address in group
        }

    def heal(self) -> None:
        self._group = {}

    def connected(self, address_a: str, address_b: str) -> bool:
        return self._group.get(address_a, 0) == self._group.get(address_b, 0)

    # -- traffic ----------------------------------------------------------------------------

    def send(self, now_tick: int, from_address: str, outgoing: Outgoing) -> None:
        self.sent_by[from_address] += 1
        message = outgoing.message
        if self.config.encode:
            data = encode(message)
            self.bytes_sent += len(data)
            message = decode(data)
        rng = self._rng
        config = self.config
        if (config.loss > 0 and rng.random() < config.loss) or not self.connected(
            from_address, outgoing.to_address
        ):
            self.dropped += 1
            return
        delay = config.base_delay_ticks
        if config.jitter_fraction > 0 and rng.random() < config.jitter_fraction:
            delay += rng.randint(1, config.jitter_max_ticks)
        self._counter += 1
        heapq.heappush(
            self._queue,
            (now_tick + max(0, delay), self._counter, outgoing.to_address, message),
        )
        # The sender address travels inside the message; the queue keeps only the destination.

    def due(self, now_tick: int) -> list[tuple[str, Message]]:
        """Messages whose delivery tick has come, in send order per tick."""
        delivered: list[tuple[str, Message]] = []
        queue = self._queue
        while queue and queue[0][0] <= now_tick:
            _, _, to_address, message = heapq.heappop(queue)
            sender = message.sender_address
            if self._group and not self.connected(sender, to_address):
                self.dropped += 1
                continue
            delivered.append((to_address, message))
        return delivered
