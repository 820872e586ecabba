"""What `flotilla status` gathers and how it reads it: members, the control plane, every
partition's replicas with their lag, quarantined replicas, and the ACLs.

Every live member is asked once (its `Health`, then its local view of the partitions, each with
a short deadline); a member that does not answer is shown as not reachable, never as a number.
Lag is `leader's high watermark - replica's high watermark`, both from the members' own views;
those views are taken one after another, so a follower asked after its leader can be ahead of
it: that reads as caught up (0), never as a negative lag.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import grpc

from flotilla._credentials import Credentials
from flotilla.errors import InvalidArgument
from flotilla.types import AclBinding
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

__all__ = [
    "AclView",
    "ClusterStatus",
    "ControlPlaneSummary",
    "ControllerStatus",
    "MemberStatus",
    "PartitionStatus",
    "QuarantinedStatus",
    "gather",
    "replica_lags",
    "summarize_control_plane",
]

ASK_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class MemberStatus:
    id: str
    address: str
    state: str  # ALIVE, SUSPECT, DEAD, LEFT
    weight: float
    rack: str
    reachable: bool  # it answered `Health` just now


@dataclass(frozen=True, slots=True)
class ControllerStatus:
    id: str
    address: str  # control-plane HOST:PORT
    reachable: bool  # its node answered `Health` and runs the control plane
    leader: str  # the leader it sees; "": none (or not reachable)
    connected: tuple[str, ...]  # controllers it has a live link to, itself included


@dataclass(frozen=True, slots=True)
class ControlPlaneSummary:
    controllers: tuple[ControllerStatus, ...]
    leader: str  # the leader the reachable controllers see; "": none, or they disagree
    summary: str  # one line for people


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    topic: str
    partition: int
    leader: str
    replicas: tuple[str, ...]
    high_watermark: int
    lag: dict[str, int]  # replica -> records behind the leader's high watermark (>= 0)
    lag_unknown: dict[str, str] = field(default_factory=dict)  # replica -> why it has no lag


@dataclass(frozen=True, slots=True)
class QuarantinedStatus:
    node: str
    group: str  # "topic/partition"
    reason: str


@dataclass(frozen=True, slots=True)
class AclView:
    bindings: tuple[AclBinding, ...]  # every ACL, as the caller could list them
    note: str = ""  # why none are shown ("": listed; e.g. the caller may not list them)


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    members: tuple[MemberStatus, ...]
    control_plane: ControlPlaneSummary
    partitions: tuple[PartitionStatus, ...]
    quarantined: tuple[QuarantinedStatus, ...]
    acls: AclView = AclView(())


def replica_lags(
    leader: str,
    replicas: Iterable[str],
    leader_high_watermark: int,
    local_high_watermarks: Mapping[str, int],
    reachable: Iterable[str],
) -> tuple[dict[str, int], dict[str, str]]:
    """(lag per replica, reason per replica without one). The reference is the leader's own
    view when it answered, else `leader_high_watermark` (what the cluster-wide metadata said)."""
    replicas = list(replicas)
    if not leader:
        return {}, {replica: "no leader" for replica in replicas}
    reference = local_high_watermarks.get(leader, leader_high_watermark)
    answered = set(reachable)
    lags: dict[str, int] = {}
    unknown: dict[str, str] = {}
    for replica in replicas:
        if replica in local_high_watermarks:
            lags[replica] = max(0, reference - local_high_watermarks[replica])
        else:
            unknown[replica] = "no answer" if replica in answered else "not reachable"
    return lags, unknown


def summarize_control_plane(
    controllers: Mapping[str, str], health: Mapping[str, pb.HealthResponse]
) -> ControlPlaneSummary:
    """`controllers`: id -> control-plane address; `health`: what each reachable member said."""
    rows = []
    for node_id, address in sorted(controllers.items()):
        answer = health.get(node_id)
        plane = answer.control_plane if answer is not None else None
        up = plane is not None and plane.controller
        rows.append(
            ControllerStatus(
                node_id,
                address,
                up,
                plane.leader if up and plane is not None else "",
                tuple(plane.connected) if up and plane is not None else (),
            )
        )
    if not rows:
        return ControlPlaneSummary((), "", "no control plane configured (--controllers)")
    reachable = sum(1 for row in rows if row.reachable)
    seen = Counter(row.leader for row in rows if row.reachable and row.leader)
    count = f"{reachable} of {len(rows)} controllers reachable"
    if len(seen) == 1:
        leader = next(iter(seen))
        return ControlPlaneSummary(tuple(rows), leader, f"leader {leader}, {count}")
    if not seen:
        majority = len(rows) // 2 + 1
        return ControlPlaneSummary(
            tuple(rows), "", f"no leader, {count} (a majority, {majority}, elects one)"
        )
    views = ", ".join(f"{leader} by {n}" for leader, n in sorted(seen.items()))
    return ControlPlaneSummary(tuple(rows), "", f"leaders disagree ({views}), {count}")


def _ask(
    address: str, credentials: Credentials
) -> tuple[pb.HealthResponse, pb.MetadataResponse | None] | None:
    """A member's health and its local view of the partitions; None if it does not answer.
    The client's TLS settings and token go with both calls."""
    try:
        with credentials.channel(address, ()) as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)
            health = stub.Health(
                pb.HealthRequest(), timeout=ASK_TIMEOUT_S, metadata=credentials.metadata
            )
            try:
                view = stub.Metadata(
                    pb.MetadataRequest(local_only=True),
                    timeout=ASK_TIMEOUT_S,
                    # what a node of the last release reads instead of the field (drop after)
                    metadata=credentials.with_metadata((("flotilla-local-only", "1"),)),
                )
            except grpc.RpcError:
                view = None
            return health, view
    except grpc.RpcError:
        return None


def gather(
    metadata: pb.MetadataResponse,
    credentials: Credentials | None = None,
    acls: AclView | None = None,
) -> ClusterStatus:
    """Asks every live member (`metadata.members`), with the client's `credentials`, and puts
    the answers together, with the ACLs the caller could read (`acls`)."""
    credentials = credentials or Credentials()
    health: dict[str, pb.HealthResponse] = {}
    views: dict[str, pb.MetadataResponse] = {}
    for member in metadata.members:
        if member.state not in (pb.ALIVE, pb.SUSPECT):
            continue
        try:
            answer = _ask(member.address, credentials)
        except InvalidArgument:  # a token, no TLS, a member off loopback: not asked
            answer = None
        if answer is None:
            continue
        health[member.id] = answer[0]
        if answer[1] is not None:
            views[member.id] = answer[1]
    controllers: dict[str, str] = {}
    for answer in health.values():
        controllers.update((c.id, c.address) for c in answer.control_plane.controllers)
    local_hw = {
        (node_id, topic.name, p.index): p.high_watermark
        for node_id, view in views.items()
        for topic in view.topics
        for p in topic.partitions
    }
    partitions = []
    for topic in metadata.topics:
        for p in topic.partitions:
            mine = {
                r: local_hw[(r, topic.name, p.index)]
                for r in p.replicas
                if (r, topic.name, p.index) in local_hw
            }
            if p.leader and (p.leader, topic.name, p.index) in local_hw:
                mine[p.leader] = local_hw[(p.leader, topic.name, p.index)]
            lags, unknown = replica_lags(p.leader, p.replicas, p.high_watermark, mine, health)
            partitions.append(
                PartitionStatus(
                    topic.name,
                    p.index,
                    p.leader,
                    tuple(p.replicas),
                    p.high_watermark,
                    lags,
                    unknown,
                )
            )
    members = tuple(
        MemberStatus(
            m.id, m.address, pb.MemberState.Name(m.state), m.weight, m.rack, m.id in health
        )
        for m in metadata.members
    )
    quarantined = tuple(
        QuarantinedStatus(node_id, q.group, q.reason)
        for node_id, answer in health.items()
        for q in answer.quarantined
    )
    return ClusterStatus(
        members,
        summarize_control_plane(controllers, health),
        tuple(partitions),
        quarantined,
        acls or AclView((), "not asked"),
    )
