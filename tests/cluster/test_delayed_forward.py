"""A node forwards a client's delayed batches to the leader of their timer partition
(`cluster.delayed.DelayedProduce.forward`): a producer's pipelined batches must reach that leader
in the order they came, or the leader refuses the later ones as out of order (seen: a batching
producer with 16 batches in flight fell from ~800 to 76 far timers a second, its batches retried
after backoffs)."""

from __future__ import annotations

import asyncio
from typing import Any

from cluster.controller import TopicSpec
from cluster.delayed import DelayedProduce
from proto import flotilla_pb2 as pb


class Leader:
    """The timer partition's leader at the other end of the forward: answers a call only when
    the test lets it, and records the order the calls reached it."""

    def __init__(self) -> None:
        self.reached: list[int] = []
        self.release: dict[int, asyncio.Event] = {}

    async def Produce(self, request: pb.ProduceRequest, **_: Any) -> pb.ProduceResponse:
        sequence = request.timeout_ms  # the test numbers its requests so
        self.reached.append(sequence)
        await self.release.setdefault(sequence, asyncio.Event()).wait()
        return pb.ProduceResponse(base_offset=sequence, record_count=1)


def _delayed(leader: Leader) -> DelayedProduce:
    async def nothing(*_: Any) -> None:
        return None

    return DelayedProduce(
        node_id="n1",
        topics=dict,
        create_topic=nothing,
        grow_topic=nothing,
        refresh_topics=nothing,
        replica=lambda group: None,
        member_version=lambda member: None,
        stub=lambda address: leader,  # type: ignore[arg-type,return-value]
        leader_of=nothing,
    )


def test_forwards_to_one_timer_partition_reach_its_leader_in_the_order_they_came() -> None:
    async def scenario() -> list[int]:
        leader = Leader()
        delayed = _delayed(leader)
        timers = TopicSpec("__timers.u", 1, 3, uid="t")
        requests = [
            pb.ProduceRequest(topic="t", partition=0, deliver_at_ms=1, timeout_ms=n)
            for n in (1, 2, 3)
        ]
        calls = [asyncio.ensure_future(delayed.forward(r, timers, "n2")) for r in requests]
        await asyncio.sleep(0)  # each call runs up to its first wait
        for _ in range(20):
            await asyncio.sleep(0)
        assert leader.reached == [1], leader.reached  # the others wait for the first's answer
        for n in (1, 2, 3):
            leader.release.setdefault(n, asyncio.Event()).set()
            for _ in range(20):
                await asyncio.sleep(0)
        answers = await asyncio.gather(*calls)
        assert [a.base_offset for a in answers] == [1, 2, 3]
        return leader.reached

    assert asyncio.run(scenario()) == [1, 2, 3]
