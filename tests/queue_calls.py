"""Group and queue calls over raw gRPC for the node tests (`tests/cluster/test_groups.py`,
`tests/cluster/test_queues.py`): a router that finds a group's coordinator as an SDK does, and a
queue member that joins, receives and settles."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from harness import wait_until

from cluster.local import LocalCluster
from consumers.types import LEAVE
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.reasons import NOT_COORDINATOR, REASON_KEY

__all__ = ["Member", "Router", "held", "into", "reason_of", "take"]


def reason_of(error: grpc.RpcError) -> str:
    return str(dict(error.trailing_metadata() or ()).get(REASON_KEY, ""))


@dataclass
class Router:
    """Calls a group's coordinator as an SDK does: follows NOT_COORDINATOR hints, tries another
    node on UNAVAILABLE, until a deadline."""

    local: LocalCluster
    channels: dict[str, grpc.Channel] = field(default_factory=dict)
    coordinators: dict[str, str] = field(default_factory=dict)  # routing key -> address
    attempt_s: float = 10.0  # one call's deadline

    def stub(self, address: str) -> flotilla_pb2_grpc.FlotillaStub:
        if address not in self.channels:
            self.channels[address] = grpc.insecure_channel(address)
        return flotilla_pb2_grpc.FlotillaStub(self.channels[address])

    def running(self) -> list[str]:
        return [s.address for n, s in self.local.nodes.items() if self.local.is_running(n)]

    def call(self, method: str, request: Any, key: str = "", timeout_s: float = 30.0) -> Any:
        """`key`: what routes the call (default: the request's group)."""
        key = key or getattr(request, "group", "")
        deadline = time.monotonic() + timeout_s
        address = self.coordinators.get(key) or self.running()[0]
        while True:
            try:
                response = getattr(self.stub(address), method)(request, timeout=self.attempt_s)
                self.coordinators[key] = address
                return response
            except grpc.RpcError as error:
                code = error.code()
                moved = code is grpc.StatusCode.FAILED_PRECONDITION and (
                    reason_of(error) == NOT_COORDINATOR
                )
                retry = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
                if not (moved or retry) or time.monotonic() > deadline:
                    raise
                hint = str(dict(error.trailing_metadata() or ()).get("flotilla-leader", ""))
                running = self.running()
                if hint.partition("=")[2] in running:
                    address = hint.partition("=")[2]
                else:
                    index = running.index(address) if address in running else -1
                    address = running[(index + 1) % len(running)]
                    time.sleep(0.05)  # nobody knows the coordinator yet: ask again shortly

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()


Lease = tuple[int, int, int]  # (partition, offset, delivery count)


@dataclass
class Member:
    router: Router
    group: str
    topic: str
    options: pb.QueueOptions = field(default_factory=pb.QueueOptions)
    member_id: str = ""
    epoch: int = 0

    def join(self) -> Member:
        reply = self.router.call(
            "GroupHeartbeat",
            pb.GroupHeartbeatRequest(
                group=self.group, topics=[self.topic], kind=pb.GROUP_KIND_QUEUE,
                queue=self.options, session_timeout_ms=30_000,
            ),
        )  # fmt: skip
        self.member_id, self.epoch = reply.member_id, reply.member_epoch
        assert not reply.assignment  # a queue member owns no partition
        return self

    def leave(self) -> None:
        self.router.call(
            "GroupHeartbeat",
            pb.GroupHeartbeatRequest(
                group=self.group, member_id=self.member_id, member_epoch=LEAVE,
                kind=pb.GROUP_KIND_QUEUE, topics_unchanged=True,
            ),
        )  # fmt: skip

    def receive(self, n: int = 100, invisible_ms: int = 30_000, wait_ms: int = 0) -> list[Any]:
        request = pb.QueueReceiveRequest(
            group=self.group, member_id=self.member_id, member_epoch=self.epoch,
            topic=self.topic, max_records=n, invisible_ms=invisible_ms, wait_ms=wait_ms,
        )  # fmt: skip
        return list(self.router.call("QueueReceive", request).leases)

    def settle(self, leases: list[Any], action: Any, **fields: int) -> Any:
        request = pb.QueueSettleRequest(
            group=self.group, member_id=self.member_id, member_epoch=self.epoch,
            settlements=settlements(leases, action, **fields),
        )  # fmt: skip
        return self.router.call("QueueSettle", request)

    def ack_and_receive(self, acked: list[Any], n: int = 100, wait_ms: int = 0) -> Any:
        """One QueueReceive carrying the acks of `acked`: the whole response."""
        request = pb.QueueReceiveRequest(
            group=self.group, member_id=self.member_id, member_epoch=self.epoch,
            topic=self.topic, max_records=n, invisible_ms=30_000, wait_ms=wait_ms,
            settlements=settlements(acked, pb.SETTLE_ACK),
        )  # fmt: skip
        return self.router.call("QueueReceive", request)


def settlements(leases: list[Any], action: Any, **fields: int) -> list[pb.QueueSettlement]:
    return [
        pb.QueueSettlement(
            topic=lease.topic, partition=lease.partition, offset=lease.offset,
            delivery_count=lease.delivery_count, action=action, **fields,
        )
        for lease in leases
    ]  # fmt: skip


def take(member: Member, count: int, invisible_ms: int = 30_000) -> list[Any]:
    """Receives until `count` leases came (a follower's high watermark may trail a moment)."""
    found: list[Any] = []
    wait_until(
        lambda: into(found, member.receive(count - len(found), invisible_ms, wait_ms=500))
        and len(found) >= count,
        15, f"{count} leases", detail=lambda: found,
    )  # fmt: skip
    return found


def into(found: list[Any], leases: list[Any]) -> bool:
    found.extend(leases)
    return bool(found)


def held(leases: list[Any]) -> set[tuple[int, int]]:
    return {(lease.partition, lease.offset) for lease in leases}
