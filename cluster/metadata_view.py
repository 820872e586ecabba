"""The node's metadata view: what `Metadata`, `DescribeTopic` and `Health` answer, and the
leader hints a refusal carries.

Each partition's live view (leader, voters, high watermark) comes from this node's replica and,
unless the caller asks for the local view only, from every other live member's (the leader's
view wins). A topic's pending timers come likewise from its timer log partitions' views (asked
along with it), so any node answers them, whether it holds a replica of them or not. Built with only what it reads: the config, the topic table, the MultiRaft driver's
replicas, the SWIM host, the peer transport (to ask the other members) and the control plane.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

import grpc

from cluster.config import NodeConfig
from cluster.controller import MetadataStore, TopicSpec
from cluster.gossip import GossipHost
from cluster.multiraft import MultiRaft
from cluster.transport import PeerTransport
from membership import Member, MemberState
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from timers.types import TIMER_TOPIC_PREFIX, timer_topic

__all__ = ["LEGACY_LOCAL_ONLY_KEY", "LEGACY_TOPICS_ONLY_KEY", "MetadataView"]

# gRPC metadata keys that stood for `MetadataRequest.local_only` and `topics_only` before those
# fields; honoured (`cluster.service`), and sent along with the fields to other nodes, for one
# release so that a node of the last one gets what it asks for and is asked (drop after)
LEGACY_LOCAL_ONLY_KEY = "flotilla-local-only"
LEGACY_TOPICS_ONLY_KEY = "flotilla-topics-only"

_STATE = {
    MemberState.ALIVE: pb.ALIVE,
    MemberState.SUSPECT: pb.SUSPECT,
    MemberState.DEAD: pb.DEAD,
    MemberState.LEFT: pb.LEFT,
}


class MetadataView:
    def __init__(
        self,
        config: NodeConfig,
        topics: Callable[[], Mapping[str, TopicSpec]],
        multiraft: MultiRaft,
        gossip: GossipHost,
        transport: PeerTransport,
        controller: Callable[[], MetadataStore | None],
        serving: Callable[[], bool],
        topics_version: Callable[[], int] = lambda: 0,
    ) -> None:
        """`topics_version`: the control plane's version of the table `topics` gives (0:
        unknown); a topics-only answer carries it."""
        self.config = config
        self._topics = topics
        self._topics_version = topics_version
        self.multiraft = multiraft
        self.gossip = gossip
        self.transport = transport
        self._controller = controller
        self._serving = serving
        # pending delayed records in partition (topic, index) of a timer log topic, as this
        # node's replica of it indexes them (None: it holds none); the node's timer host
        # (`cluster.timers`)
        self.pending_timers: Callable[[str, int], int | None] = lambda topic, partition: None
        # the last topics-only answer, by (table version, topics named, members): every node
        # that is not a controller asks for the whole table every 30 s and at each change, and
        # building it takes about a second of the event loop at 100,000 partitions
        self._topics_only: tuple[tuple[int, tuple[str, ...], bytes], pb.MetadataResponse] | None
        self._topics_only = None

    @property
    def topics(self) -> Mapping[str, TopicSpec]:
        return self._topics()

    def leader_hint(self, leader_id: str | None) -> str:
        if not leader_id:
            return ""
        address = self.gossip.address_of(leader_id)
        return f"{leader_id}={address}" if address else ""

    def preferred_hint(self, topic: str, partition: int) -> str:
        spec = self.topics.get(topic)
        if spec is None or partition >= len(spec.assignment):
            return ""
        for member in spec.assignment[partition]:
            hint = self.leader_hint(member)
            if hint:
                return hint
        return ""

    # -- metadata ----------------------------------------------------------------------------------
    def _local_partition(self, topic: str, index: int) -> pb.PartitionInfo | None:
        replica = self.multiraft.replicas.get(f"{topic}/{index}")
        if replica is None or not self._same_incarnation(topic, replica.topic_uid):
            return None  # none, or one of a deleted incarnation not dropped yet
        node = replica.node
        voters = sorted(node.configuration.voters, key=lambda v: (v != node.leader_id, v))
        return pb.PartitionInfo(
            index=index,
            leader=node.leader_id or "",
            replicas=voters,
            learners=sorted(node.configuration.learners),
            high_watermark=replica.high_watermark,
            log_start=replica.segmented.first_offset,
            pending_timers=self._local_pending(topic, index) or 0,
        )

    def _local_pending(self, topic: str, index: int) -> int | None:
        """Pending timers as this node's replica of the timer log indexes them: of a timer log
        partition, or of a source partition (its timer log's partition of the same index)."""
        if topic.startswith(TIMER_TOPIC_PREFIX):
            return self.pending_timers(topic, index)
        spec = self.topics.get(topic)
        return None if spec is None else self.pending_timers(timer_topic(spec.uid), index)

    def _timer_logs(self, names: Iterable[str]) -> dict[str, str]:
        """Source topic -> its timer log topic, of the topics among `names` that have one."""
        logs = {}
        for name in names:
            spec = self.topics.get(name)
            if spec is not None and not name.startswith(TIMER_TOPIC_PREFIX):
                log = timer_topic(spec.uid)
                if log in self.topics:
                    logs[name] = log
        return logs

    def _pending_from_timer_log(
        self, info: pb.PartitionInfo, timers: str, infos: dict[tuple[str, int], pb.PartitionInfo]
    ) -> None:
        """A source partition's pending timers, as its timer log partition's view gives them
        (the leader's, else a replica's): whichever node answers, not only one that holds a
        replica of it. No replica answered: unknown, said so (`pending_timers_unknown`)."""
        if info.index >= self.topics[timers].partitions:
            info.pending_timers = 0  # the timer log grows before a delayed produce reaches it
            return
        view = infos.get((timers, info.index))
        # a member with no replica of it answers with the assignment alone (no leader, nothing
        # committed, no count): that is no view of the timer log
        if view is None or not (view.leader or view.high_watermark or view.pending_timers):
            info.pending_timers = 0
            info.pending_timers_unknown = True
        else:
            info.pending_timers = view.pending_timers

    async def metadata(
        self,
        topics: Iterable[str],
        *,
        local_only: bool = False,
        topics_only: bool = False,
        known_topics_version: int = 0,
    ) -> pb.MetadataResponse:
        """Members and topics. Each partition's live view (leader, voters, high watermark) comes
        from this node's replica, and unless `local_only` from the other members' too;
        `topics_only` skips all that and gives each partition its assigned replicas (what a
        node that is not a controller needs to build its topic table), with the table's
        control-plane version; no topics at all (`topics_unchanged`) when the asker holds that
        version already (`known_topics_version`, nonzero): a poll of an unchanged table costs
        nothing per partition. A topics-only answer is built once for the same table version,
        topics and members (the object is shared: never changed after it is returned)."""
        requested = list(topics)
        version = self._topics_version() if topics_only else 0
        if version and known_topics_version == version and not requested:
            response = self._members_response()
            response.topics_version, response.topics_unchanged = version, True
            return response
        # a controller asked for named topics' specs leaves out those it does not have (their
        # absence, with the version, is the answer: `cluster.topic_latest`)
        names = (
            [name for name in requested if name in self.topics] if topics_only and requested
            else requested or sorted(self.topics)
        )  # fmt: skip
        cache_key, response = None, self._members_response()
        if topics_only and version:
            members = response.SerializeToString(deterministic=True)
            cache_key = (version, tuple(names), members)
            cached = self._topics_only
            if cached is not None and cached[0] == cache_key:
                return cached[1]
        infos: dict[tuple[str, int], pb.PartitionInfo] = {}
        # each source topic's pending timers come from its timer log's replicas, asked with it
        timer_logs = {} if topics_only or local_only else self._timer_logs(names)
        if not topics_only:
            asked = names + sorted(set(timer_logs.values()) - set(names))
            for name in asked:
                for index in range(self.topics[name].partitions):
                    info = self._local_partition(name, index)
                    if info is not None:
                        infos[(name, index)] = info
            if not local_only:
                await self._gather_remote(asked, infos)
        response.topics_version = version
        for name in names:
            spec = self.topics[name]
            topic = pb.TopicInfo(
                name=name, replication_factor=spec.replication_factor,
                retention_bytes=spec.retention_bytes, retention_ms=spec.retention_ms, uid=spec.uid,
                max_delay_ms=spec.max_delay_ms,
            )  # fmt: skip
            for index in range(spec.partitions):
                info = infos.get((name, index))
                if info is None:
                    assigned = spec.assignment[index] if index < len(spec.assignment) else ()
                    info = pb.PartitionInfo(index=index, replicas=list(assigned))
                if name in timer_logs:
                    self._pending_from_timer_log(info, timer_logs[name], infos)
                topic.partitions.append(info)
            response.topics.append(topic)
        if cache_key is not None:
            self._topics_only = (cache_key, response)
        return response

    def _members_response(self) -> pb.MetadataResponse:
        """A response with this node's id, its batch limit and the members as it sees them."""
        response = pb.MetadataResponse(
            node_id=self.config.node_id, max_batch_bytes=self.config.max_batch_bytes
        )
        for record in self.gossip.swim.records():
            member = record.member
            response.members.append(
                pb.Member(
                    id=member.id,
                    address=member.address,
                    state=_STATE[record.state],
                    weight=member.weight,
                    rack=member.rack,
                )
            )
        return response

    async def _gather_remote(
        self, names: list[str], infos: dict[tuple[str, int], pb.PartitionInfo]
    ) -> None:
        """Asks the other live members for their replicas' view; the leader's view wins."""
        others = [m for m in self.gossip.swim.live_members() if m.id != self.config.node_id]

        async def ask(member: Member) -> pb.MetadataResponse | None:
            address = self.transport.address_of(member.id)
            if not address:
                return None
            stub = flotilla_pb2_grpc.FlotillaStub(self.transport.channel(address))
            try:
                return await stub.Metadata(
                    pb.MetadataRequest(topics=names, local_only=True),
                    timeout=1.0,
                    metadata=((LEGACY_LOCAL_ONLY_KEY, "1"),),  # for a node of the last release
                )
            except grpc.aio.AioRpcError:
                return None

        for response in await asyncio.gather(*(ask(m) for m in others)):
            if response is None:
                continue
            for topic in response.topics:
                if not self._same_incarnation(topic.name, topic.uid):
                    continue  # that member's view of the topic (and replica) is another one
                for info in topic.partitions:
                    key = (topic.name, info.index)
                    if (
                        not info.high_watermark
                        and not info.leader
                        and not info.learners
                        and key in infos
                    ):
                        continue
                    current = infos.get(key)
                    mine = current is not None and current.leader == self.config.node_id
                    theirs = info.leader == response.node_id
                    if (
                        current is None
                        or (theirs and not mine)
                        or (not current.leader and info.leader)
                    ):
                        infos[key] = info

    def _same_incarnation(self, topic: str, uid: str) -> bool:
        """Is `uid` ("" unknown) the incarnation of `topic` this node knows?"""
        spec = self.topics.get(topic)
        return not uid or spec is None or not spec.uid or spec.uid == uid

    # -- health ------------------------------------------------------------------------------------
    def health(self) -> pb.HealthResponse:
        return pb.HealthResponse(
            node_id=self.config.node_id,
            serving=self._serving(),
            partitions=len(self.multiraft.replicas),
            leaders=self.multiraft.leading,  # as of the last round (kept, not counted here)
            replicas_led=self.multiraft.led,
            members_alive=self.gossip.swim.live_count(),
            active_groups=self.multiraft.active_count,
            quarantined=[
                pb.QuarantinedReplica(group=entry.group, reason=entry.reason)
                for entry in self.multiraft.quarantine.entries()
            ],
            control_plane=self._control_plane_status(),
        )

    def _control_plane_status(self) -> pb.ControlPlaneStatus:
        status = pb.ControlPlaneStatus(
            controllers=[
                pb.ControllerAddress(id=node_id, address=address)
                for node_id, address in sorted(self.config.controllers.items())
            ],
            controller=self._controller() is not None,
        )
        controller = self._controller()
        if controller is not None:
            view = controller.view()
            status.leader = view.leader
            status.connected.extend(view.connected)
        return status
