"""Carrying out a fire plan (`cluster.timers`): each planned batch appended to the source
partition, never before its due time, in order, as the fire producer at the plan's sequences.

Pipelined when it can be: to this node's leading replica of the source partition (proposals in
order, one wait for all), or to the leader elsewhere (one Produce per batch sent at its due
time without waiting for the one before). When a pipeline fails in any way, the plan's batches
are sent again one by one through the produce path (`cluster.copy_produce`): those that landed
are answered as duplicates, a refused sequence is rebased, and a failed append is retried every
0.1-1 s while the slot leads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

import xxhash

from cluster.controller import TopicSpec
from cluster.copy_produce import CopyProducer
from cluster.errors import ClusterError
from cluster.failstop import NodeFailStopped
from cluster.idempotence import Fresh
from cluster.multiraft import Proposal
from cluster.replica import Replica, Waiter
from cluster.timer_log import fired_bytes
from proto.records import with_producer
from raft.types import Role
from timers.types import Plan, TimerBatch

__all__ = ["Deposed", "Firing", "FiringHost", "fire_producer_id", "read_timer_batch"]

log = logging.getLogger("flotilla.timers")

READ_BYTES = 4 * 1024 * 1024
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 1.0  # a failover of the source partition costs at most ~1 s more


def fire_producer_id(uid: str, partition: int, epoch: int = 0) -> int:
    """The idempotent producer that fires the timers of source partition `partition` of topic
    incarnation `uid` in fire-producer `epoch` (`timers.types`; epoch 0: the id from before
    epochs): the same on every node, so a repeat after a failover is a duplicate."""
    name = f"{uid}\0{partition}\0timers" + (f"\0{epoch}" if epoch else "")
    digest = xxhash.xxh64_intdigest(name.encode())
    return (digest & ((1 << 63) - 1)) or 1


class Deposed(ClusterError):
    """The slot's leadership ended: its successor fires what is left."""


class FiringHost(Protocol):
    """What firing uses of the node (`cluster.timers.TimerHost`)."""

    copies: CopyProducer
    write_timeout_s: float

    def replica(self, group: str) -> Replica | None: ...

    def propose(self, proposal: Proposal) -> None: ...


class Firing:
    """The firing half of a timer slot (`cluster.timers.Slot`)."""

    host: FiringHost
    source: TopicSpec
    replica: Replica

    def leads(self) -> bool:
        raise NotImplementedError

    def _producer(self, plan: Plan) -> int:
        """The fire producer of the plan's epoch (the same on every node)."""
        return fire_producer_id(self.source.uid, self.replica.partition, plan.epoch)

    def _read(self, plan: Plan) -> asyncio.Future[list[tuple[TimerBatch, bytes | None]]]:
        """The plan's batches with their stored bytes (None: gone from the log), read in one
        turn of a reader thread: started before the plan record commits, the read overlaps
        that wait instead of following it (one thread hop per batch cost a due batch several
        milliseconds each on a loaded machine)."""
        read = asyncio.ensure_future(asyncio.to_thread(_read_batches, self.replica, plan))
        read.add_done_callback(_retrieve)  # a read whose plan did not commit is no error
        return read

    async def _fire(
        self, plan: Plan, read: asyncio.Future[list[tuple[TimerBatch, bytes | None]]] | None = None
    ) -> None:
        """Appends the plan's batches, each at its due time, in order: pipelined when this node
        leads the source partition, else (or when that fails) one by one through the produce
        path, where a batch that landed already is answered as a duplicate. `read`: the
        batches' bytes being read already (`_read`)."""
        batches = await (read if read is not None else self._read(plan))
        for batch, data in batches:
            if data is None:
                log.error("timer batch %s@%d is gone from the log: not fired",
                          self.replica.group, batch.offset)  # fmt: skip
        if await self._fire_local(plan, batches) or await self._fire_remote(plan, batches):
            return
        sequence, producer = plan.sequence, self._producer(plan)
        for batch, data in batches:
            await _until(batch.due_ms)
            if data is not None:
                await self._append(with_producer(data, producer, sequence))
            sequence += batch.record_count

    async def _fire_remote(
        self, plan: Plan, batches: list[tuple[TimerBatch, bytes | None]]
    ) -> bool:
        """The pipelined path to another node: each batch's Produce sent at its due time, in
        order, without waiting for the one before. False when any failed (out of order
        included: never rebased here), once all are answered: the caller sends them all
        again one by one, and those that landed are answered as duplicates."""
        if any(data is None for _, data in batches) or len(batches) < 2:
            return False
        calls = []
        sequence, producer = plan.sequence, self._producer(plan)
        for batch, data in batches:
            await _until(batch.due_ms)
            assert data is not None
            call = self.host.copies.produce(
                self.source.name,
                self.replica.partition,
                with_producer(data, producer, sequence),
                self.source.uid,
            )
            calls.append(asyncio.get_running_loop().create_task(call))
            await asyncio.sleep(0)  # the call goes out before the next one
            sequence += batch.record_count
        answers = await asyncio.gather(*calls, return_exceptions=True)
        failed = [a for a in answers if isinstance(a, BaseException)]
        if failed:
            log.info("firing %s into %s/%d in a pipeline failed (%s): one by one instead",
                     self.replica.group, self.source.name, self.replica.partition,
                     failed[0])  # fmt: skip
        return not failed

    async def _fire_local(self, plan: Plan, batches: list[tuple[TimerBatch, bytes | None]]) -> bool:
        """The pipelined path: proposes each batch to this node's leading replica of the source
        partition at its due time, then waits for them all. False (nothing known about what
        landed: the caller sends them all again) when it does not lead it, the first batch is
        not the fire producer's next one (a repeat after a failover; a forgotten producer), or
        any proposal fails."""
        source = self.host.replica(f"{self.source.name}/{self.replica.partition}")
        if source is None or source.node.role is not Role.LEADER:
            return False
        if self.source.uid and source.topic_uid and source.topic_uid != self.source.uid:
            return False  # a replica of another incarnation of the topic: never written here
        if any(data is None for _, data in batches):
            return False
        producer = self._producer(plan)
        verdict = source.idempotence.admit(
            producer, plan.sequence, plan.batches[0].record_count, source.node.term
        )
        if not isinstance(verdict, Fresh):
            return False
        loop = asyncio.get_running_loop()
        futures = []
        sequence = plan.sequence
        for batch, data in batches:
            await _until(batch.due_ms)
            assert data is not None
            waiter = Waiter(loop.create_future())
            waiter.future.add_done_callback(_retrieve)
            self.host.propose(
                Proposal(
                    source, with_producer(data, producer, sequence), batch.record_count,
                    _now_ms(), waiter, producer, sequence,
                )
            )  # fmt: skip
            futures.append(waiter.future)
            sequence += batch.record_count
        try:
            await asyncio.wait_for(asyncio.gather(*futures), self.host.write_timeout_s)
            return True
        except (asyncio.CancelledError, NodeFailStopped):
            raise
        except Exception as error:  # NotLeader, OutOfOrderSequence, NotCommitted, TimeoutError
            log.info("firing %s into %s/%d in a pipeline failed (%s): one by one instead",
                     self.replica.group, self.source.name, self.replica.partition,
                     error or type(error).__name__)  # fmt: skip
            return False

    async def _append(self, batch: bytes) -> None:
        delay_s = RETRY_FIRST_S
        while True:
            try:
                await self.host.copies.copy(
                    self.source.name, self.replica.partition, batch, self.source.uid
                )
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if not self.leads():
                    raise Deposed(f"{self.replica.group}: leadership ended") from error
                log.warning("firing into %s/%d: %s; retrying in %.1f s", self.source.name,
                            self.replica.partition, error, delay_s)  # fmt: skip
                await asyncio.sleep(delay_s)
                delay_s = min(RETRY_MAX_S, delay_s * 2)


def _read_batches(replica: Replica, plan: Plan) -> list[tuple[TimerBatch, bytes | None]]:
    """Reader thread: each planned batch with the producer's batch it fires (None: gone)."""
    return [(batch, read_timer_batch(replica, batch.offset)) for batch in plan.batches]


def read_timer_batch(replica: Replica, offset: int) -> bytes | None:
    """Reader thread: the producer's batch the timer at `offset` fires (a copy rolled forward
    unwrapped: `fired_bytes`); None: gone."""
    for stored in replica.read_committed(offset, 1, READ_BYTES):
        if stored.base_offset == offset:
            return fired_bytes(bytes(stored.data))
    return None


async def _until(due_ms: int) -> None:
    """Never early: a plan is made PLAN_AHEAD_MS ahead of its batches' due times."""
    early_s = (due_ms - _now_ms()) / 1000
    if early_s > 0:
        await asyncio.sleep(early_s)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # a pipeline that gave up is no error


def _now_ms() -> int:
    return int(time.time() * 1000)
