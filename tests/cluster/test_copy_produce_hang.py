"""A copy (a due timer fired, a dead letter) sent to a partition leader that hangs — paused by
SIGSTOP, so its connections stay open and no answer comes — must be sent on to the leader that
replaces it within about an election timeout, not after the produce timeout: `make chaos`'s
pause line found delayed records up to 5 s late (issue 26). One attempt now lasts
`CopyProducer.attempt_s` (the node gives twice its election timeout), DEADLINE_EXCEEDED is
retried, and the retry asks where the leader is now.

Real gRPC servers on loopback stand in for the leaders: the old one takes the call and never
answers; the new one answers."""

from __future__ import annotations

import asyncio
import time

import grpc

from cluster.copy_produce import CopyFailed, CopyProducer
from cluster.local import free_port
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc


class _Leader(flotilla_pb2_grpc.FlotillaServicer):
    def __init__(self, hangs: bool) -> None:
        self.hangs = hangs
        self.produced: list[bytes] = []

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        if self.hangs:
            await asyncio.Event().wait()  # paused: never answers
        self.produced.append(request.batch)
        return pb.ProduceResponse(base_offset=len(self.produced) - 1)


async def _copy_with_old_leader_hanging(
    attempt_s: float,
    elected: bool = True,
    learned_after_s: float | None = None,
    fresh_look_s: float = 0.0,
) -> tuple[float, dict[str, int], str]:
    """`learned_after_s`: this node's own view names the new leader that long after the copy
    starts (its replica of the partition heard from it); None: only a fresh look finds it, which
    takes `fresh_look_s` (a metadata view waits on a paused member)."""
    servers, leaders, stubs, channels = [], {}, {}, []
    for node_id, hangs in (("old", True), ("new", False)):
        server = grpc.aio.server()
        leaders[node_id] = _Leader(hangs)
        flotilla_pb2_grpc.add_FlotillaServicer_to_server(leaders[node_id], server)
        address = f"127.0.0.1:{free_port('127.0.0.1')}"
        server.add_insecure_port(address)
        await server.start()
        servers.append(server)
        channel = grpc.aio.insecure_channel(address)
        channels.append(channel)
        stubs[node_id] = flotilla_pb2_grpc.FlotillaStub(channel)
    asked: list[bool] = []

    def known_leader(topic: str, partition: int) -> str:
        learned = learned_after_s is not None and time.monotonic() - started >= learned_after_s
        return "new" if learned and elected else "old"

    async def leader(topic: str, partition: int, fresh: bool) -> str:
        asked.append(fresh)  # the others learn of the new leader by the time the first fails
        if fresh:
            await asyncio.sleep(fresh_look_s)
        return "new" if fresh and elected else known_leader(topic, partition)

    started = time.monotonic()
    copies = CopyProducer(leader, stubs.get, attempt_s=attempt_s, known_leader=known_leader)
    outcome = "copied"
    try:
        await copies.copy("t", 0, b"batch")
    except CopyFailed as error:
        outcome = f"failed: {error}"
    finally:
        took = time.monotonic() - started
        for channel in channels:
            await channel.close(None)
        for server in servers:
            await server.stop(None)
    return took, {n: len(s.produced) for n, s in leaders.items()}, outcome


def test_a_copy_leaves_a_hanging_leader_after_one_attempt() -> None:
    took, produced, outcome = asyncio.run(_copy_with_old_leader_hanging(attempt_s=0.5))
    assert outcome == "copied" and produced == {"old": 0, "new": 1}, (outcome, produced)
    assert took < 1.5, took  # one attempt of 0.5 s at the hanging leader, then the new one


def test_a_copy_with_no_leader_elected_yet_fails_for_the_caller_to_retry() -> None:
    """The hanging leader is all there is (no successor yet): every attempt ends at its
    deadline and the copy fails, retriable, within ATTEMPTS × attempt_s."""
    took, produced, outcome = asyncio.run(
        _copy_with_old_leader_hanging(attempt_s=0.3, elected=False)
    )
    assert outcome.startswith("failed: ") and "DEADLINE_EXCEEDED" in outcome, outcome
    assert produced == {"old": 0, "new": 0} and took < 1.5, (produced, took)


def test_a_copy_moves_to_a_new_leader_as_soon_as_this_node_learns_of_it() -> None:
    """This node's replica of the partition hears from the new leader 0.3 s into the attempt:
    the copy goes there then, not when the attempt's deadline (5 s here) ends."""
    took, produced, outcome = asyncio.run(
        _copy_with_old_leader_hanging(attempt_s=5.0, learned_after_s=0.3)
    )
    assert outcome == "copied" and produced == {"old": 0, "new": 1}, (outcome, produced)
    assert took < 1.0, took


def test_a_retry_takes_the_leader_this_node_learns_before_a_slow_fresh_look() -> None:
    """The first attempt ends (0.3 s) before any successor is known; the fresh look at the
    metadata would take 3 s (it waits on the paused member), but this node's replica hears from
    the new leader at 0.6 s: the copy goes there then."""
    took, produced, outcome = asyncio.run(
        _copy_with_old_leader_hanging(attempt_s=0.3, learned_after_s=0.6, fresh_look_s=3.0)
    )
    assert outcome == "copied" and produced == {"old": 0, "new": 1}, (outcome, produced)
    assert took < 1.5, took
