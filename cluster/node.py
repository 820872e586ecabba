"""The node daemon: one process, one gRPC port, asyncio throughout.

It wires the pieces together: the gRPC server (client + peer services), the SWIM host, the
MultiRaft host, the control plane (on controller nodes), the partition manager, and metrics.
Topic administration (create, alter, delete, and the node's view of the topic table) is in
`cluster.topics`; retention in `cluster.retention`; opening and retiring replicas in
`cluster.opener`.

Partition manager: every `manage_interval_s` the node compares the topics it knows with its
local replicas. It opens a replica for every partition whose initial assignment names it (with
that assignment as the bootstrap configuration), re-opens replicas found on disk, and deletes the
replicas of deleted topics. A Raft message for a partition this node does not host yet (a leader
adding it as a learner) opens the replica on the spot. A replica its group removed retires once a
member says so (replica GC: its log is deleted, see `cluster.opener`).

Graceful stop (SIGTERM): local leaders hand leadership to the most caught-up voter, the node
leaves the membership, then everything stops. Blocking work (opening logs, reads, fsync) never
runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import time
from collections.abc import Iterable
from functools import partial

import grpc

from cluster.config import NodeConfig, parse_address
from cluster.controller import (
    MetadataStore,
    TopicSpec,
)
from cluster.dialmap import DialMap
from cluster.failstop import FailStop, NodeFailStopped
from cluster.gossip import GossipHost
from cluster.ingress import ProduceGate, ProduceLimits, max_request_bytes
from cluster.logs import EventBudget, event
from cluster.metrics import Metrics
from cluster.multiraft import MultiRaft, Proposal
from cluster.opener import ReplicaOpener, delete_replica, forget_states_of_deleted_topics
from cluster.ownership import AddressInUse, DataDirLock
from cluster.placement import Candidate, partition_id, place
from cluster.replica import Replica
from cluster.retention import apply_retention
from cluster.service import LEGACY_LOCAL_ONLY_KEY, ClientService, PeerService
from cluster.startup import check_addresses
from cluster.steward import GroupSteward
from cluster.topics import TopicAdmin
from cluster.transport import PeerTransport, TransportLimits, peer_handler, server_options
from membership import EventKind, Member, MembershipEvent, MemberState, SwimConfig
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from raft.config import RaftConfig
from raft.types import Configuration, Role
from storage import FileHandles, FsyncPolicy, LogConfig, StateJournal, StorageError

__all__ = ["Node"]

log = logging.getLogger("flotilla.node")

_STATE = {
    MemberState.ALIVE: pb.ALIVE,
    MemberState.SUSPECT: pb.SUSPECT,
    MemberState.DEAD: pb.DEAD,
    MemberState.LEFT: pb.LEFT,
}
VERSION = "0.1.0"


# Replicas `Node._probe_unplaced` looks at between two yields to the event loop.
PROBE_CHUNK = 500


class Node(TopicAdmin):
    manage_interval_s = 0.2
    # how often quiesced followers that placement no longer names ask their group whether they
    # were removed (`_probe_unplaced`)
    removal_probe_s = 60.0

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.unsafe_ack_before_commit = False  # test-only (chaos mutation tests); see cli
        self.unsafe_read_uncommitted = False  # test-only (chaos mutation tests); see cli
        self.topics: dict[str, TopicSpec] = {}
        self.topics_loaded = False  # until then, "unknown topic" means "not loaded yet"
        self.handles = FileHandles(config.max_open_files)
        self.dial_map = DialMap(config.dial_map)
        self.transport = PeerTransport(
            config.node_id,
            self.dial_map,
            self._advertised_address,
            TransportLimits(max_message_bytes=config.max_message_bytes),
        )
        os.makedirs(config.data_dir, exist_ok=True)
        # before anything under data_dir is opened: one data directory, one process
        self.data_dir_lock = DataDirLock(config.data_dir)
        # a failed storage write or fsync ends the process (exit code 75, `cluster.failstop`)
        self.fail_stop = FailStop()
        journal_path = os.path.join(config.data_dir, "raft-state.journal")
        try:
            self.journal = StateJournal(journal_path)
        except (OSError, StorageError) as error:  # reading, repairing or damaged
            raise self.fail_stop(f"opening the state journal {journal_path}", error) from error
        self.multiraft = MultiRaft(
            config.node_id,
            self.transport.send_raft,
            config.tick_ms / 1000,
            self.journal,
            quiesce_after_ticks=2 * config.election_ticks,
            fail_stop=self.fail_stop,
        )
        self.multiraft.on_inputs_taken = self.transport.inbox.taken
        self.raft_config = RaftConfig(
            election_ticks=config.election_ticks, heartbeat_ticks=config.heartbeat_ticks
        )
        self.log_config = LogConfig(
            segment_bytes=config.segment_bytes,
            max_batch_bytes=config.max_batch_bytes,
            fsync=FsyncPolicy.parse(config.fsync),
        )
        member = Member(config.node_id, config.advertised, config.weight, config.rack, VERSION)
        self.gossip = GossipHost(
            member, SwimConfig.lan(tick_ms=config.swim_tick_ms), self.transport, self._on_members
        )
        self.metrics = Metrics(
            config.node_id,
            lambda: list(self.multiraft.replicas.values()),
            quarantined=lambda: len(self.multiraft.quarantine),
            replication_factor=self._replication_factor,
            controller_leader=self._controller_leader,
            is_live=self._is_live,
        )
        # leadership won and lost, one line each up to a budget a second, then a summary
        self.elections = EventBudget(log, "elections_summary")
        self.controller: MetadataStore | None = None
        self.server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reader = None
        self.opener = ReplicaOpener(
            node_id=config.node_id,
            partitions_dir=self.partitions_dir,
            journal=self.journal,
            raft_config=self.raft_config,
            log_config=self.log_config,
            handles=self.handles,
            multiraft=self.multiraft,
            topics=lambda: self.topics,
            producer_expiration_ms=config.producer_expiration_ms,
        )
        self.multiraft.unknown_group = self.opener.open_on_message
        self.opener.on_rebuilt = lambda group: self.metrics.replica_rebuilt()
        self._gone_since: dict[str, float] = {}  # member id -> when SWIM said dead or left
        self._alive_since: dict[str, float] = {}  # member id -> when it was last seen come alive
        self.steward = GroupSteward(
            self.multiraft,
            balance_after_s=config.leader_balance_after_s,
            election_timeout_s=config.election_timeout_ms / 1000,
            is_live=self._is_live,
            alive_since=self._alive_since.get,
            on_leader_changed=self._leader_changed,
        )
        self.multiraft.on_quarantine = lambda replica: self.steward.forget(replica.group)
        self._topics_version: object = None  # what the topic table was built from
        self._local_checked_at = 0.0  # when local replicas were last compared with the topics
        self._topics_polled_at = 0.0
        self._retiring: set[str] = set()  # groups whose replica is being retired (`_retire`)
        self._retention_checked_at = time.monotonic()  # when retention was last applied
        self._topics_lock = asyncio.Lock()
        self._probed_at = time.monotonic()  # when unplaced quiesced followers were last probed
        self._retire_tasks: set[asyncio.Task[None]] = set()
        self.started = asyncio.Event()

    @property
    def partitions_dir(self) -> str:
        return os.path.join(self.config.data_dir, "partitions")

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Raises `StartRefused` (an address in use) or `ConfigError` (an address that does not
        resolve, clashes with another or is not this machine's: `cluster.startup`) after
        stopping what had started."""
        try:
            await self._start()
        except BaseException:
            await self.stop(graceful=False)
            raise

    async def _start(self) -> None:
        config = self.config
        # before anything binds: gRPC's and pysyncobj's own bind failures say less
        await asyncio.to_thread(check_addresses, config)
        os.makedirs(self.partitions_dir, exist_ok=True)
        if config.is_controller:
            self.controller = await asyncio.to_thread(
                MetadataStore,
                config.node_id,
                config.controllers,
                config.cluster_secret,
                os.path.join(config.data_dir, "controller"),
                election_timeout_s=max(0.2, config.election_timeout_ms / 1000),
            )
        request_limit = max_request_bytes(
            config.max_batch_bytes,
            self.transport.limits.max_batch_bytes,
            self.raft_config.max_msg_bytes,
            config.max_message_bytes,
        )
        self.produce_gate = ProduceGate(
            config.node_id,
            ProduceLimits(
                config.max_inflight_produce, config.max_inflight_request_bytes, request_limit
            ),
        )
        self.server = grpc.aio.server(
            options=server_options(
                config.max_message_bytes, request_limit, config.max_streams_per_connection
            ),
            interceptors=(self.produce_gate,),
        )
        flotilla_pb2_grpc.add_FlotillaServicer_to_server(ClientService(self), self.server)
        peer = PeerService(config.node_id, self.multiraft.deliver, self.transport, self.gossip)
        self.server.add_generic_rpc_handlers((peer_handler(peer.Raft, peer.Swim),))
        host, port = parse_address(config.listen, "listen")
        try:
            self.server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as error:  # grpc's only word for "bind failed"
            raise AddressInUse("gRPC", config.listen, str(error).split(";")[0]) from None
        await self.server.start()
        self.multiraft.on_round = self._after_round
        self.multiraft.on_disk = self.metrics.observe_round
        self.multiraft.on_fsync = self.metrics.observe_fsync
        self.multiraft.start()
        self.gossip.start([seed for seed in config.join if seed != config.advertised])
        if config.metrics:
            metrics_host, metrics_port = parse_address(config.metrics, "metrics")
            try:
                self.metrics.serve(metrics_host, metrics_port)
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                raise AddressInUse("metrics", config.metrics) from None
        self._tasks.append(asyncio.get_running_loop().create_task(self._manage_loop()))
        self.started.set()
        event(
            log, "node_started", listen=config.listen, advertise=config.advertised,
            data_dir=config.data_dir, controller=config.is_controller,
            controllers=",".join(f"{k}={v}" for k, v in sorted(config.controllers.items())),
            join=",".join(config.join), metrics=config.metrics or "off", rack=config.rack,
            weight=config.weight, fsync=config.fsync, segment_bytes=config.segment_bytes,
            replicas=len(self.multiraft.replicas), version=VERSION, pid=os.getpid(),
        )  # fmt: skip

    async def stop(self, graceful: bool = True) -> None:
        if self.started.is_set():
            event(
                log, "node_stopping", graceful=graceful,
                leaders=sum(1 for r in self.multiraft.replicas.values() if r.node.role is Role.LEADER),
            )  # fmt: skip
        if graceful:
            await self._hand_off_leadership()
            self.gossip.leave()
            await asyncio.sleep(
                self.gossip.swim.config.tick_ms
                * self.gossip.swim.config.probe_interval_ticks
                / 1000
            )
        tasks = [*self._tasks, *self._retire_tasks]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.server is not None:
            await self.server.stop(grace=0.5 if graceful else 0)
        await self.gossip.stop()
        await self.multiraft.stop()
        await self.transport.close()
        if self.controller is not None:
            self.controller.close()
        self.metrics.close()
        self.data_dir_lock.release()  # last: nothing of this node touches data_dir any more
        if self.started.is_set():
            event(log, "node_stopped", graceful=graceful)

    async def _hand_off_leadership(self) -> None:
        deadline = time.monotonic() + 4 * self.config.election_timeout_ms / 1000
        while time.monotonic() < deadline:
            leading = [r for r in self.multiraft.replicas.values() if r.node.role is Role.LEADER]
            if not leading:
                return
            for replica in leading:
                target = self._transfer_target(replica)
                if target is not None and replica.node.transferee is None:
                    self.multiraft.call(partial(replica.node.transfer_leader, target), replica)
            await asyncio.sleep(self.config.tick_ms / 1000)

    def _transfer_target(self, replica: Replica) -> str | None:
        node = replica.node
        live = {m.id for m in self.gossip.swim.live_members()}
        candidates = [v for v in node.configuration.voters if v != node.id and v in live]
        if not candidates:
            return None
        return max(candidates, key=lambda v: node.match_index(v) or 0)

    # -- membership ------------------------------------------------------------------------------
    def _advertised_address(self, member_id: str) -> str | None:
        return self.gossip.address_of(member_id)

    def _on_members(self, events: list[MembershipEvent]) -> None:
        now = time.monotonic()
        for change in events:
            if change.kind in (EventKind.DEAD, EventKind.LEAVE):
                self._gone_since.setdefault(change.member.id, now)
                self._alive_since.pop(change.member.id, None)
            else:
                self._gone_since.pop(change.member.id, None)
                self._alive_since.setdefault(change.member.id, now)
        gone = {e.member.id for e in events if e.kind in (EventKind.DEAD, EventKind.LEAVE)}
        if not gone:
            return
        for replica in self.multiraft.replicas.values():
            if replica.node.leader_id in gone:
                self.multiraft.wake(replica.group)

    def _leader_changed(self, replica: Replica, leads: bool) -> None:
        self.metrics.leader_changed()
        node = replica.node
        if leads:
            self.elections(
                "election_won", topic=replica.topic, partition=replica.partition, term=node.term,
                voters=sorted(node.configuration.voters),
            )  # fmt: skip
        else:
            self.elections(
                "election_lost", topic=replica.topic, partition=replica.partition, term=node.term,
                leader=node.leader_id or "none",
            )  # fmt: skip

    def _replication_factor(self, topic: str) -> int | None:
        spec = self.topics.get(topic)
        return spec.replication_factor if spec is not None else None

    def _controller_leader(self) -> bool | None:
        controller = self.controller
        return None if controller is None else controller.is_leader

    def _is_live(self, member_id: str) -> bool:
        state = self.gossip.swim.member_state(member_id)
        return state is not None and state.is_live

    def live_candidates(self) -> list[Candidate]:
        return [Candidate(m.id, m.weight, m.rack) for m in self.gossip.swim.live_members()]

    def placement_candidates(self) -> list[Candidate]:
        """Live members, plus members dead or gone for less than `replace_after` (so that a
        restart or a rolling upgrade moves no data)."""
        now = time.monotonic()
        candidates = self.live_candidates()
        live = {c.node_id for c in candidates}
        for record in self.gossip.swim.records():
            member = record.member
            since = self._gone_since.get(member.id, now)
            if member.id not in live and now - since < self.config.replace_after_s:
                candidates.append(Candidate(member.id, member.weight, member.rack))
        return candidates

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
        if replica is None:
            return None
        node = replica.node
        voters = sorted(node.configuration.voters, key=lambda v: (v != node.leader_id, v))
        return pb.PartitionInfo(
            index=index,
            leader=node.leader_id or "",
            replicas=voters,
            learners=sorted(node.configuration.learners),
            high_watermark=replica.high_watermark,
            log_start=replica.segmented.first_offset,
        )

    async def metadata(
        self, topics: Iterable[str], *, local_only: bool = False, topics_only: bool = False
    ) -> pb.MetadataResponse:
        """Members and topics. Each partition's live view (leader, voters, high watermark) comes
        from this node's replica, and unless `local_only` from the other members' too;
        `topics_only` skips all that and gives each partition its assigned replicas (what a
        node that is not a controller needs to build its topic table: cheap to poll)."""
        names = list(topics) or sorted(self.topics)
        infos: dict[tuple[str, int], pb.PartitionInfo] = {}
        if not topics_only:
            for name in names:
                for index in range(self.topics[name].partitions):
                    info = self._local_partition(name, index)
                    if info is not None:
                        infos[(name, index)] = info
            if not local_only:
                await self._gather_remote(names, infos)
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
        for name in names:
            spec = self.topics[name]
            topic = pb.TopicInfo(
                name=name, replication_factor=spec.replication_factor,
                retention_bytes=spec.retention_bytes, retention_ms=spec.retention_ms, uid=spec.uid,
            )  # fmt: skip
            for index in range(spec.partitions):
                info = infos.get((name, index))
                if info is None:
                    assigned = spec.assignment[index] if index < len(spec.assignment) else ()
                    info = pb.PartitionInfo(index=index, replicas=list(assigned))
                topic.partitions.append(info)
            response.topics.append(topic)
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

    def health(self) -> pb.HealthResponse:
        replicas = self.multiraft.replicas.values()
        return pb.HealthResponse(
            node_id=self.config.node_id,
            serving=self.started.is_set(),
            partitions=len(self.multiraft.replicas),
            leaders=sum(1 for r in replicas if r.node.role is Role.LEADER),
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
            controller=self.controller is not None,
        )
        if self.controller is not None:
            view = self.controller.view()
            status.leader = view.leader
            status.connected.extend(view.connected)
        return status

    # -- replicas (for `NodeApi`) -------------------------------------------------------------
    def replica(self, group: str) -> Replica | None:
        return self.multiraft.replicas.get(group)

    def propose(self, proposal: Proposal) -> None:
        self.multiraft.propose(proposal)

    def wake(self, group: str) -> None:
        self.multiraft.wake(group)

    # -- reads -------------------------------------------------------------------------------------
    async def read(
        self, replica: Replica, offset: int, max_records: int, max_bytes: int
    ) -> list[pb.StoredBatch]:
        return await asyncio.to_thread(
            replica.read_committed,
            offset,
            max_records,
            max_bytes,
            self.unsafe_read_uncommitted,
            self.metrics.fetched_bytes,
        )

    # -- partition manager ---------------------------------------------------------------------
    async def _manage_loop(self) -> None:
        while True:
            try:
                await self._refresh_topics()
                if time.monotonic() - self._local_checked_at > 5.0:
                    self._local_checked_at = time.monotonic()
                    await self._reconcile_local()
                    self.opener.probe_rebuilding()
                if time.monotonic() - self._retention_checked_at > self.config.retention_check_s:
                    self._retention_checked_at = time.monotonic()
                    await apply_retention(self.multiraft, self.topics)
                if time.monotonic() - self._probed_at > self.removal_probe_s:
                    self._probed_at = time.monotonic()
                    await self._probe_unplaced()
                await self.opener.open_pending()
                self.elections.tick()
                self.steward.change_log.tick()
                self.steward.reconcile(
                    self.placement_candidates(), self.topics, self._topics_version
                )
            except (asyncio.CancelledError, NodeFailStopped):
                raise  # fail-stop: the process is exiting (`cluster.failstop`)
            except Exception:
                log.exception("partition manager round failed")
            await asyncio.sleep(self.manage_interval_s)

    async def _reconcile_local(self) -> None:
        """Queues for opening every replica the topics assign here or that is on disk, and
        drops the replicas of deleted topics. O(partitions), so it runs every 5 s or when the
        topics change, not every pass."""
        # Replicas of deleted topics (or of an earlier incarnation of a topic deleted and
        # created again) stop first, before anything here awaits; their files go next. A
        # replica removed from its group is retired when a member tells it so (`_retire`):
        # only then, because Raft's safety assumes no voter forgets what it voted and stored,
        # and only a committed configuration that leaves it out, newer than its own, proves it
        # is no voter any more. Its term and vote outlive it in the journal, and it never
        # rejoins with the initial assignment.
        gone = [g for g, r in self.multiraft.replicas.items() if self._deleted(r)]
        stopped = [self.multiraft.remove(group) for group in gone]
        for group in gone:
            self.steward.forget(group)
        for replica in stopped:
            if replica is not None:
                await self.multiraft.run_storage(partial(delete_replica, replica, self.journal))
        opener, node_id = self.opener, self.config.node_id
        on_disk = await asyncio.to_thread(opener.dirs_on_disk, list(self.topics))
        opener.forget_deleted()
        for spec in self.topics.values():
            present = on_disk.get(spec.name, set())
            for index in range(spec.partitions):
                if opener.knows(f"{spec.name}/{index}"):
                    continue
                assigned = spec.assignment[index] if index < len(spec.assignment) else ()
                if node_id in assigned:
                    opener.queue(spec, index, Configuration(voters=frozenset(assigned)))
                elif str(index) in present:
                    opener.queue(spec, index, Configuration())
        if self.topics:
            for topic in os.listdir(self.partitions_dir):
                if topic not in self.topics:
                    path = os.path.join(self.partitions_dir, topic)
                    if not any(r.topic == topic for r in self.multiraft.replicas.values()):
                        await asyncio.to_thread(shutil.rmtree, path, True)
            # the hard states kept for retired replicas (and any other left behind) of topics
            # that no longer exist
            await self.multiraft.run_storage(
                partial(
                    forget_states_of_deleted_topics,
                    self.journal,
                    set(self.topics),
                    set(self.multiraft.replicas),
                )
            )

    def _deleted(self, replica: Replica) -> bool:
        """Is the replica's topic gone, or deleted and created again (another uid)?"""
        spec = self.topics.get(replica.topic)
        if spec is None:
            return True
        return bool(replica.topic_uid and spec.uid and replica.topic_uid != spec.uid)

    async def _probe_unplaced(self) -> int:
        """Replica GC's safety net: a quiesced follower never campaigns, so if the leader's word
        of its removal was lost (a partition when the removal committed) nothing else would
        tell it. Those that placement no longer names ask their group (`probe_membership`);
        members answer `Removed` if their committed configuration left them out. Returns how
        many were probed."""
        candidates = self.placement_candidates()
        probed = 0
        for n, replica in enumerate(list(self.multiraft.replicas.values())):
            if n % PROBE_CHUNK == PROBE_CHUNK - 1:
                await asyncio.sleep(0)  # ~10 µs of placement each: let the loop breathe
            node = replica.node
            spec = self.topics.get(replica.topic)
            if not node.quiesced or node.role is not Role.FOLLOWER or spec is None:
                continue
            key = partition_id(replica.topic, replica.partition)
            if self.config.node_id not in place(key, candidates, spec.replication_factor):
                self.multiraft.call(node.probe_membership, replica)
                probed += 1
        return probed

    def _after_round(self, touched: set[Replica]) -> None:
        """`touched`: the groups whose role may have changed since the last call."""
        self.steward.note_roles(touched)
        for replica in touched:
            if replica.node.removed_at and replica.group not in self._retiring:
                self._retiring.add(replica.group)
                task = asyncio.get_running_loop().create_task(self._retire(replica))
                self._retire_tasks.add(task)
                task.add_done_callback(self._retire_tasks.discard)

    async def _retire(self, replica: Replica) -> None:
        """Replica GC: a committed configuration of the group left this node out, and a member
        said so (`raft.types.Removed`). The replica stops and its log is deleted; its term and
        vote stay in the journal (see `cluster.opener`). Until then it only cost disk space
        (and, not hearing from a leader, a pre-vote every election timeout)."""
        group = replica.group
        try:
            if self.multiraft.replicas.get(group) is not replica:
                return
            if replica.node.removed_at <= replica.node.configuration_index:
                replica.node.removed_at = 0  # a leader added it back meanwhile: it stays
                return
            self.multiraft.remove(group)
            self.steward.forget(group)
            self.opener.retired[group] = replica.topic_uid
            await self.multiraft.run_storage(partial(self.opener.retire, replica))
            self.metrics.replica_retired()
            event(
                log, "replica_retired", topic=replica.topic, partition=replica.partition,
                configuration_index=replica.node.removed_at,
                reason="a committed configuration left this node out",
            )  # fmt: skip
        except NodeFailStopped:
            raise
        except Exception:
            log.exception("retiring replica %s failed", group)
        finally:
            self._retiring.discard(group)
