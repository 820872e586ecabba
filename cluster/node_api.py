"""What the client service (`cluster.service`) needs of a node, and no more: the seam between
the gRPC edge and the node's parts (`cluster.node` wires them; a test may stand in its own).

The service validates a request and turns outcomes into gRPC statuses; everything else it asks
of the node through this protocol. Topic changes report `cluster.errors` types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from cluster.acl_state import Authorizer
from cluster.config import NodeConfig
from cluster.controller import TopicSpec
from cluster.delayed import DelayedProduce
from cluster.groups import GroupHost
from cluster.metrics import Metrics
from cluster.multiraft import Proposal
from cluster.replica import Replica
from proto import flotilla_pb2 as pb

__all__ = ["NodeApi"]


class NodeApi(Protocol):
    @property
    def config(self) -> NodeConfig: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def authorizer(self) -> Authorizer:
        """Who may do what (`cluster.acl_state`): every client call asks it first."""
        ...

    # test-only switches (chaos mutation tests, `flotilla node --unsafe-...`)
    @property
    def unsafe_ack_before_commit(self) -> bool: ...

    @property
    def unsafe_read_uncommitted(self) -> bool: ...

    # -- topics: the node's view of the topic table, and changes to it ---------------------------
    @property
    def topics(self) -> Mapping[str, TopicSpec]: ...

    @property
    def topics_loaded(self) -> bool:
        """False until the node first loaded the topic table: until then an unknown topic
        means "not loaded yet", not "does not exist"."""
        ...

    async def create_topic(
        self, request: pb.CreateTopicRequest, *, internal: bool = False
    ) -> pb.TopicInfo:
        """`internal`: a node creating one of the cluster's own topics (`proto.groups`), which
        clients may not create."""
        ...

    async def refresh_topics(self) -> None:
        """Brings the topic table up to date now (a request named a topic it lacks)."""
        ...

    async def delete_topic(self, name: str) -> None: ...

    async def alter_topic(
        self, request: pb.AlterTopicRequest, *, internal: bool = False
    ) -> pb.TopicInfo:
        """`internal`: a node growing a timer log topic with its source (`cluster.delayed`)."""
        ...

    # -- views ---------------------------------------------------------------------------------
    async def metadata(
        self,
        topics: Iterable[str],
        *,
        local_only: bool = False,
        topics_only: bool = False,
        known_topics_version: int = 0,
    ) -> pb.MetadataResponse: ...

    def health(self) -> pb.HealthResponse: ...

    def leader_hint(self, leader_id: str | None) -> str:
        """`id=host:port` of a member, for the `flotilla-leader` trailer ("" if unknown)."""
        ...

    def preferred_hint(self, topic: str, partition: int) -> str:
        """The hint of the first reachable member a partition is assigned to ("" if none)."""
        ...

    # -- delayed delivery ------------------------------------------------------------------------
    @property
    def delayed(self) -> DelayedProduce:
        """Where a delayed batch goes (`cluster.delayed`)."""
        ...

    # -- consumer groups -------------------------------------------------------------------------
    @property
    def groups(self) -> GroupHost:
        """The coordinators of the `__groups` partitions this node leads."""
        ...

    # -- replicas ------------------------------------------------------------------------------
    def replica(self, group: str) -> Replica | None:
        """This node's replica of `group` ("topic/partition"), if it hosts one now."""
        ...

    def propose(self, proposal: Proposal) -> None: ...

    def wake(self, group: str) -> None:
        """Un-quiesces a group, so that its replica hears from a leader again."""
        ...

    def member_in_doubt(self, member_id: str) -> bool:
        """Does this node's membership doubt `member_id` (suspected, dead, left, or unknown)?
        A quiesced follower's reads go by it (`cluster.reads.leaderless`)."""
        ...

    def leases_stalled(self) -> bool:
        """Are this node's ticks overdue (it was just paused)? Its leaders' leases are not to be
        trusted until the next tick voids them and a quorum answers anew."""
        ...

    async def read(
        self, replica: Replica, offset: int, max_records: int, max_bytes: int
    ) -> list[pb.StoredBatch]:
        """Committed batches from `offset` on (off the event loop)."""
        ...
