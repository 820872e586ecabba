"""The idempotent producer's identity and sequence numbers, per partition, and how a partition's
batches move to a new producer id when the leader will never write them under theirs (no I/O)."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field

from flotilla.errors import FlotillaError, InvalidArgument

__all__ = ["ProducerGap", "Sequences", "Space", "written_nowhere"]

Space = tuple[str, int, bool]
"""A sequence space: (topic, partition, delayed) — a partition's ordinary batches, or its
delayed ones (see `Sequences`)."""

_MOVES_KEPT = 64  # producer ids moved away from whose batches may still be in flight


class ProducerGap(FlotillaError):
    """Internal to the SDK: the leader will never write this batch under its producer id (it
    does not know the id, or an earlier batch the leader acknowledged with acks=leader was lost
    with it), and no earlier batch of the id is still on its way: the batch is to be resent
    under a new id (`Sequences.move`). `cause` is the leader's answer."""

    def __init__(self, cause: FlotillaError) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(slots=True)
class Sequences:
    """The idempotent producer's identity and sequence numbers, per partition: every batch
    carries (producer id, sequence of its first record), and the leader writes a producer's
    batches of a partition only in sequence order, each once.

    `outstanding` holds, per partition, the batches taken and not yet settled, as
    (producer id, first sequence) -> their place in the order they were taken (kept when a
    batch moves to a new id): a batch is the partition's earliest outstanding one when every
    batch taken before it, under whichever id, has settled (acknowledged, or failed).

    A partition has two sequence spaces, told apart by `delayed`: its ordinary batches and its
    delayed ones (issue 26), which the node accepts into the partition's timer log, whose
    idempotence table is its own. Each space has its own producer id and sequences, so a
    delayed batch never leaves a gap among the ordinary ones, nor the other way round. Every
    key below is a `Space`: (topic, partition, delayed)."""

    next: dict[Space, tuple[int, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    outstanding: dict[Space, dict[tuple[int, int], int]] = field(default_factory=dict)
    taken: int = 0  # batches taken so far: the order of `outstanding`
    # (topic, partition, delayed, old id) -> (new id, the old sequence the new id's 0 stands for)
    moved: dict[tuple[str, int, bool, int], tuple[int, int]] = field(default_factory=dict)

    def take(
        self, topic: str, partition: int, count: int, *, delayed: bool = False
    ) -> tuple[int, int]:
        """(producer id, first sequence) for a batch of `count` records."""
        with self.lock:
            key = (topic, partition, delayed)
            producer_id, first = self.next.get(key) or (secrets.randbits(63) or 1, 0)
            self.next[key] = (producer_id, first + count)
            self.taken += 1
            self.outstanding.setdefault(key, {})[(producer_id, first)] = self.taken
            return producer_id, first

    def settled(
        self, topic: str, partition: int, producer_id: int, sequence: int, *, delayed: bool = False
    ) -> None:
        """The batch (producer_id, sequence) is no longer on its way (idempotent)."""
        with self.lock:
            key = (topic, partition, delayed)
            pending = self.outstanding.get(key)
            if pending is not None:
                pending.pop((producer_id, sequence), None)
                if not pending:
                    del self.outstanding[key]

    def earliest(
        self, topic: str, partition: int, producer_id: int, sequence: int, *, delayed: bool = False
    ) -> bool:
        """Is (producer_id, sequence) a batch taken here whose every earlier batch settled? (A
        batch encoded elsewhere is never: nothing is known of its predecessors.)"""
        with self.lock:
            pending = self.outstanding.get((topic, partition, delayed))
            if not pending:
                return False
            place = pending.get((producer_id, sequence))
            return place is not None and place == min(pending.values())

    def behind(
        self, topic: str, partition: int, producer_id: int, sequence: int, *, delayed: bool = False
    ) -> bool:
        """Is (producer_id, sequence) a batch taken here that an earlier batch, still
        outstanding, was taken before?"""
        with self.lock:
            pending = self.outstanding.get((topic, partition, delayed))
            if not pending:
                return False
            place = pending.get((producer_id, sequence))
            return place is not None and place != min(pending.values())

    def move(
        self, topic: str, partition: int, producer_id: int, sequence: int, *, delayed: bool = False
    ) -> tuple[int, int] | None:
        """Where the batch (producer_id, sequence) goes now that the leader will never write it
        under `producer_id`: (new id, new sequence), or None when `producer_id` is no longer the
        partition's (a batch of it failed for good: its later batches fail too, as ever).

        Order and duplicates: a batch is moved only when it is the partition's earliest
        outstanding batch (`earliest`), so every batch taken before it has settled: those
        acknowledged are written (or were lost with a leader under acks=leader), and none can be
        written after it. The leader's refusal wrote nothing, and it refuses only when it holds
        no batch of the id at or after this one's sequence, so no earlier attempt of this batch
        is in its log either (an unknown id: a partition keeps a producer's state a day after
        its latest batch). The move keeps the order of the id's later batches, whichever of
        them moves first: sequence s of the old id becomes s - base under the new one, base
        being the first moved sequence, and batches taken afterwards follow them under the new
        id; the leader writes the new id's batches in that order, from 0, each once."""
        with self.lock:
            key = (topic, partition, delayed)
            target = self.moved.get((topic, partition, delayed, producer_id))
            if target is None:
                current = self.next.get(key)
                if current is None or current[0] != producer_id or current[1] < sequence:
                    return None
                target = self._move_from(key, producer_id, sequence, current[1])
            new_id, base = target
            if sequence < base:
                return None
            moved = (new_id, sequence - base)
            pending = self.outstanding.setdefault(key, {})
            place = pending.pop((producer_id, sequence), None)
            pending[moved] = place if place is not None else self.taken + 1
            return moved

    def skip(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        sequence: int,
        count: int,
        *,
        delayed: bool = False,
    ) -> bool:
        """The batch (producer_id, sequence) of `count` records was refused and written
        nowhere (`written_nowhere`), and it is the partition's earliest outstanding batch
        (`earliest`: the caller waits for that): the batches taken after it move to a new id,
        the first of them at sequence 0, so the refusal leaves no gap for the leader to wait
        on (as Kafka's idempotent producer renumbers the batches behind one that failed other
        than by sequence). They keep their order: each moves only once it is the earliest
        outstanding batch (`move`). A fresh id rather than the same one renumbered: an attempt
        of a later batch still on its way under its old sequence can then never be taken for
        another batch. False (nothing changed) when the id is no longer the partition's (a
        batch of it failed with its outcome unknown: `reset`)."""
        with self.lock:
            key = (topic, partition, delayed)
            # refused before it moved to the id that follows: skip it among that id's sequences
            target = self.moved.get((topic, partition, delayed, producer_id))
            while target is not None and sequence >= target[1]:
                producer_id, sequence = target[0], sequence - target[1]
                target = self.moved.get((topic, partition, delayed, producer_id))
            current = self.next.get(key)
            if current is None or current[0] != producer_id or current[1] < sequence + count:
                return False
            self._move_from(key, producer_id, sequence + count, current[1])
            return True

    def _move_from(
        self, key: Space, producer_id: int, base: int, next_sequence: int
    ) -> tuple[int, int]:
        """Moves the sequences of `producer_id` from `base` on to a new id (under the lock):
        the target (new id, the old sequence its 0 stands for)."""
        target = (secrets.randbits(63) or 1, base)
        if len(self.moved) >= _MOVES_KEPT:  # bounded: ids moved long ago have nothing in flight
            del self.moved[next(iter(self.moved))]
        self.moved[(*key, producer_id)] = target
        self.next[key] = (target[0], next_sequence - base)
        return target

    def reset(self, topic: str, partition: int, producer_id: int, *, delayed: bool = False) -> None:
        """A batch of `producer_id` failed for good with its outcome unknown: its sequences
        may have left a gap the leader would wait for forever, so the partition's later
        batches go out under a new producer id, from sequence 0 (a batch whose outcome was
        unknown keeps whatever outcome it had)."""
        with self.lock:
            key = (topic, partition, delayed)
            current = self.next.get(key)
            if current is not None and current[0] == producer_id:
                del self.next[key]


def written_nowhere(error: FlotillaError) -> bool:
    """Does a produce's final error say its batch was written nowhere, so the batches behind it
    may go on without it (`Sequences.skip`)? A refusal as invalid: the node checks a batch's
    size, body, headers and bounds before it writes anything, the same bytes are refused again,
    and a retry of an attempt that was written is answered as a duplicate before the one check
    that depends on the time (the past bound of a delayed batch). Every other failure (a
    timeout, no leader, a lost connection) may have been written: its outcome is unknown."""
    return isinstance(error, InvalidArgument)
