"""The client gRPC servicer (`Flotilla`); the node-to-node one (`Peer`) is `cluster.peer_service`.

Every request is validated here, at the edge (DESIGN §9), before anything changes: a bad request
gets a precise status and changes nothing. Leadership errors carry the leader in trailing
metadata `flotilla-leader: <id>=<host:port>` so a client can go straight there.

One module of about 620 lines: the calls of one servicer, which share its request checks
(`_topic`, `_partition`, `_local_replica`); what is not a call lives in `cluster.statuses`, the
consumer-group and queue calls, which share none of them, in `cluster.groups_service` and
`cluster.queues_service` (mixins), and a delayed batch's checks and routing in
`cluster.delayed`. (Produce, with its ordinary, delayed and forwarded branches, is the next
thing to move out if it grows further.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import NoReturn

import grpc

from cluster.acl_service import ADMIN, CONSUME, PRODUCE
from cluster.controller import TopicSpec
from cluster.delayed import (
    TIMER_FORWARD_KEY,
    DelayRefused,
    check_not_past,
    is_timer_topic,
    refusal_code,
)
from cluster.errors import (
    ClusterError,
    Invalid,
)
from cluster.idempotence import Duplicate
from cluster.logs import event
from cluster.metadata_view import LEGACY_LOCAL_ONLY_KEY, LEGACY_TOPICS_ONLY_KEY
from cluster.multiraft import Proposal
from cluster.node_api import NodeApi
from cluster.queues_service import QueueCalls
from cluster.reads import (
    KEEPALIVE_MS,
    READ_YOUR_WRITES_WAIT_S,
    catch_up,
    offset_out_of_range,
    other_incarnation,
    past_high_watermark,
    replica_closed,
)
from cluster.replica import (
    NotCommitted,
    OutOfOrderSequence,
    ProduceResult,
    Replica,
    UnknownProducer,
    Waiter,
)
from cluster.statuses import (
    abort,
    client_of,
    refuse,
    refuse_if_leaderless,
    sequence_reason,
    status_name,
    topic_change,
)
from cluster.topics import INTERNAL_TOPIC_KEY
from cluster.validation import check_topic_name
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.groups import INTERNAL_PREFIX, is_internal
from proto.reasons import UNKNOWN_PRODUCER_ID
from proto.records import (
    CHECK_CHUNK_RECORDS,
    BatchHeader,
    InvalidBatch,
    check_body,
    read_header,
)
from raft.errors import NotLeader, ProposalDropped
from raft.types import Role
from storage import IndexOutOfRange, LogClosed, OffsetOutOfRange

__all__ = ["ClientService"]

DEFAULT_MAX_RECORDS = 10_000
DEFAULT_MAX_FETCH_BYTES = 4 * 1024 * 1024
MAX_WAIT_MS = 60_000

log = logging.getLogger("flotilla.service")


class ClientService(QueueCalls, flotilla_pb2_grpc.FlotillaServicer):
    """`flotilla.v1.Flotilla`, over the narrow `NodeApi` (not the whole node); the consumer-group
    calls are the `GroupCalls` mixin's (`cluster.groups_service`), the queue calls its
    subclass `QueueCalls`'s (`cluster.queues_service`)."""

    def __init__(self, node: NodeApi) -> None:
        self.node = node

    # -- topics ---------------------------------------------------------------------------------
    async def CreateTopic(
        self, request: pb.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicInfo:
        await self._allow(context, ADMIN, request.name)
        who = client_of(context)
        # a node creating one of the cluster's own topics says so (`cluster.topics`)
        internal = any(key == INTERNAL_TOPIC_KEY for key, _ in context.invocation_metadata() or ())
        info = await topic_change(context, self.node.create_topic(request, internal=internal))
        event(
            log, "topic_created", topic=request.name, partitions=len(info.partitions),
            replication_factor=info.replication_factor, retention_bytes=info.retention_bytes,
            retention_ms=info.retention_ms, **who,
        )  # fmt: skip
        return info

    async def DeleteTopic(
        self, request: pb.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicResponse:
        await self._allow(context, ADMIN, request.name)
        who = client_of(context)
        await topic_change(context, self.node.delete_topic(request.name))
        event(log, "topic_deleted", topic=request.name, **who)
        return pb.DeleteTopicResponse()

    async def AlterTopic(
        self, request: pb.AlterTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicInfo:
        await self._allow(context, ADMIN, request.name)
        who = client_of(context)
        # a node growing one of the cluster's own timer log topics says so (`cluster.topics`)
        internal = any(key == INTERNAL_TOPIC_KEY for key, _ in context.invocation_metadata() or ())
        info = await topic_change(context, self.node.alter_topic(request, internal=internal))
        changed = {
            field.name: value for field, value in request.ListFields() if field.name != "name"
        }
        event(log, "topic_altered", topic=request.name, **changed, **who)
        return info

    async def ListTopics(
        self, request: pb.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTopicsResponse:
        await self._allow(context)
        # the cluster's own topics (`__groups`) are not the user's: Metadata still serves them
        names = sorted(name for name in self.node.topics if not is_internal(name))
        return pb.ListTopicsResponse(names=names)

    async def DescribeTopic(
        self, request: pb.DescribeTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicInfo:
        await self._allow(context)
        await self._topic(request.name, context)
        response = await self.node.metadata([request.name])
        topic: pb.TopicInfo = response.topics[0]
        return topic

    async def Metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.MetadataResponse:
        await self._allow(context)
        # the gRPC metadata keys asked for the same before the request's fields did: still
        # honoured for one release, so that a node or SDK of the last one gets what it asks for
        keys = {key for key, _ in context.invocation_metadata() or ()}
        topics_only = request.topics_only or LEGACY_TOPICS_ONLY_KEY in keys
        for name in request.topics:
            if topics_only:  # another node asks a controller: a missing topic is left out
                try:
                    check_topic_name(name)
                except Invalid as error:
                    await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
            else:
                await self._topic(name, context)
        if topics_only and request.topics:
            await self.node.refresh_topics()  # a controller: its table as its control plane has it
        if topics_only and not self.node.topics_loaded:
            # another node polls this controller for the topic table: an empty one it has not
            # loaded yet would read as "no topics" there (`cluster.topics`)
            await abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"node {self.node.config.node_id} has not loaded the topic table yet",
            )
        return await self.node.metadata(
            list(request.topics),
            local_only=request.local_only or LEGACY_LOCAL_ONLY_KEY in keys,
            topics_only=topics_only,
            known_topics_version=request.topics_version,
        )

    async def Health(
        self, request: pb.HealthRequest, context: grpc.aio.ServicerContext
    ) -> pb.HealthResponse:
        # open to every caller, authenticated or not: liveness for probes and load balancers
        # (members alive, serving), which hold no credentials; it names no topic
        return self.node.health()

    # -- data -------------------------------------------------------------------------------------
    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        started = time.perf_counter()
        code = "UNKNOWN"
        try:
            await self._allow(context, PRODUCE, request.topic)
            response = await self._produce(request, context)
            code = "OK"
            return response
        except BaseException as error:
            code = status_name(context, error)
            raise
        finally:
            self.node.metrics.observe_produce(code, time.perf_counter() - started)

    async def _produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        node = self.node
        if request.timeout_ms > node.config.max_produce_timeout_ms:
            # a waiter and its batch live until the deadline: a client may not pin them for long
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"timeout_ms={request.timeout_ms} exceeds max_produce_timeout_ms="
                f"{node.config.max_produce_timeout_ms}: use 1..{node.config.max_produce_timeout_ms}"
                " (0: the node's default)",
            )
        # a delayed batch a node forwarded to the leader of its timer partition (`cluster.delayed`)
        forwarded = (
            bool(request.deliver_at_ms)
            and is_timer_topic(request.topic)
            and any(key == TIMER_FORWARD_KEY for key, _ in context.invocation_metadata() or ())
        )
        if is_internal(request.topic) and not forwarded:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"topic {request.topic!r} is the cluster's own (names starting with "
                f"{INTERNAL_PREFIX!r} are reserved): clients may read it, not produce to it",
            )
        delayed = bool(request.deliver_at_ms) and not forwarded
        # the incarnation the client named (a forward names its source topic's: checked there)
        uid = "" if forwarded else request.topic_uid
        replica: Replica | None = None
        if delayed:
            await self._partition(request.topic, request.partition, context, uid)
        else:
            replica = await self._leader_replica(request.topic, request.partition, context, uid)
        batch = request.batch  # each access to a bytes field copies it: read it once
        size = len(batch)
        if size > node.config.max_batch_bytes:
            await abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"batch of {size} bytes exceeds max_batch_bytes={node.config.max_batch_bytes}",
            )
        try:
            header = read_header(batch)
            # a malformed body, once committed, would fail every consumer at its offset. The
            # check's cost grows with the record count (~0.1 us a record in its one pass, more
            # for batches of more than WHOLE_CHECK_RECORDS): a batch of many records is checked
            # in a thread, so the loop keeps its turns meanwhile
            if header.record_count <= CHECK_CHUNK_RECORDS:
                check_body(batch)
            else:
                await asyncio.to_thread(check_body, batch)
        except InvalidBatch as error:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"invalid batch: {error}")
        if delayed:
            timers, route = await self._timer_route(request, batch, context)
            if isinstance(route, str):  # forwarded to the timer partition's leader: its answer
                try:
                    return await node.delayed.forward(request, timers, route)
                except DelayRefused as error:
                    await abort(context, grpc.StatusCode.UNAVAILABLE, str(error))
                except grpc.aio.AioRpcError as error:
                    await abort(context, refusal_code(error), error.details() or "")
            replica = route
        assert replica is not None
        if request.deliver_at_ms and header.producer_id:
            # an idempotent delayed batch: a retry of one accepted in time is a duplicate
            # however late it comes; a new one is held to the past bound here
            verdict = replica.idempotence.admit(
                header.producer_id, header.base_sequence, header.record_count, replica.node.term
            )
            if not isinstance(verdict, Duplicate):
                try:
                    check_not_past(request.deliver_at_ms, int(time.time() * 1000))
                except Invalid as error:
                    await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
        response = await self._append(replica, request, batch, header, context)
        response.deliver_at_ms = request.deliver_at_ms
        return response

    async def _timer_route(
        self, request: pb.ProduceRequest, batch: bytes, context: grpc.aio.ServicerContext
    ) -> tuple[TopicSpec, Replica | str]:
        """A client's delayed batch, checked: its timer topic, and this node's replica of its
        timer partition if it leads it (the batch goes there), else that leader's id."""
        delayed = self.node.delayed
        spec = self.node.topics[request.topic]
        try:
            delayed.check(request, spec, batch)
            timers = await delayed.timer_spec(spec)
            return timers, await delayed.route(timers, request.partition)
        except Invalid as error:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except (DelayRefused, ClusterError) as error:
            await abort(context, grpc.StatusCode.UNAVAILABLE, str(error))

    async def _append(
        self,
        replica: Replica,
        request: pb.ProduceRequest,
        batch: bytes,
        header: BatchHeader,
        context: grpc.aio.ServicerContext,
    ) -> pb.ProduceResponse:
        node = self.node
        size = len(batch)
        timeout_s = (request.timeout_ms or node.config.produce_timeout_ms) / 1000
        # only a Duplicate is final on receipt; the driver settles the rest when it proposes
        verdict = replica.idempotence.admit(
            header.producer_id, header.base_sequence, header.record_count, replica.node.term
        )
        loop = asyncio.get_running_loop()
        if isinstance(verdict, Duplicate):
            earlier = verdict.ref
            waiter = Waiter(loop.create_future(), earlier.index, earlier.term, duplicate=True)
            result = await self._await_duplicate(replica, waiter, timeout_s, context)
            return pb.ProduceResponse(
                base_offset=result.base_offset, record_count=result.record_count, duplicate=True
            )
        waiter = Waiter(
            loop.create_future(),
            on_append=request.acks == pb.ACKS_LEADER or node.unsafe_ack_before_commit,
        )
        waiter.future.add_done_callback(_retrieve)  # a waiter whose request gave up is no error
        node.propose(
            Proposal(
                replica,
                batch,
                header.record_count,
                int(time.time() * 1000),
                waiter,
                header.producer_id,
                header.base_sequence,
            )
        )
        # await the waiter itself (one hop when it settles); a timer fails it on the deadline
        expiry = loop.call_later(timeout_s, _expire, waiter.future)
        try:
            result = await waiter.future
        except NotLeader as error:
            await abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                str(error),
                node.leader_hint(error.leader_hint),
            )
        except ProposalDropped as error:
            await abort(context, grpc.StatusCode.UNAVAILABLE, str(error))
        except UnknownProducer as error:
            # ABORTED as an out-of-order batch (an older SDK retries it until its deadline), with
            # a reason a current SDK recognises: it moves to a new producer id at once
            await abort(context, grpc.StatusCode.ABORTED, str(error), reason=UNKNOWN_PRODUCER_ID)
        except OutOfOrderSequence as error:
            # behind / in flight: a node's copier must never rebase it (`sequence_reason`)
            await abort(context, grpc.StatusCode.ABORTED, str(error), reason=sequence_reason(error))
        except NotCommitted as error:
            code = (
                grpc.StatusCode.UNAVAILABLE
                if error.definitely_not_written
                else grpc.StatusCode.DEADLINE_EXCEEDED
            )
            await abort(context, code, str(error))
        except TimeoutError:
            await abort(
                context,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"not committed within {timeout_s:.1f} s; the outcome is unknown (an idempotent retry is safe)",
            )
        finally:
            expiry.cancel()
        node.metrics.produced_bytes(size)
        return pb.ProduceResponse(base_offset=result.base_offset, record_count=result.record_count)

    async def _await_duplicate(
        self, replica: Replica, waiter: Waiter, timeout_s: float, context: grpc.aio.ServicerContext
    ) -> ProduceResult:
        deadline = time.monotonic() + timeout_s
        while replica.node.applied_index < waiter.index:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                await abort(
                    context,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    "the earlier copy of this batch has not committed yet; the outcome is unknown",
                )
            try:
                await asyncio.wait_for(replica.hw_changed.wait(), remaining)
            except TimeoutError:
                continue
        replica.settle(waiter)
        try:
            return waiter.future.result()
        except NotCommitted as error:
            await abort(context, grpc.StatusCode.UNAVAILABLE, str(error))

    async def Fetch(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchResponse:
        started = time.perf_counter()
        code = "UNKNOWN"
        try:
            await self._allow(context, CONSUME, request.topic)
            await self._refuse_timer_log(request.topic, context)
            replica = await self._local_replica(
                request.topic, request.partition, context, request.topic_uid
            )
            response = await self._fetch(replica, request, context)
            code = "OK"
            return response
        except BaseException as error:
            code = status_name(context, error)
            raise
        finally:
            self.node.metrics.observe_fetch("fetch", code, time.perf_counter() - started)

    async def Subscribe(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.FetchResponse]:
        code = "OK"
        try:
            await self._allow(context, CONSUME, request.topic)
            async for response in self._subscribe(request, context):
                yield response
        except BaseException as error:
            code = status_name(context, error)
            raise
        finally:
            self.node.metrics.observe_fetch("subscribe", code, None)

    async def _subscribe(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.FetchResponse]:
        await self._refuse_timer_log(request.topic, context)
        replica = await self._local_replica(
            request.topic, request.partition, context, request.topic_uid
        )
        poll = pb.FetchRequest()
        poll.CopyFrom(request)
        poll.max_wait_ms = request.max_wait_ms or KEEPALIVE_MS
        while not context.cancelled():
            spec = self.node.topics.get(replica.topic)  # deleted, moved away, reopened
            if (
                self.node.replica(replica.group) is not replica
                or spec is None
                or (spec.uid and replica.topic_uid and spec.uid != replica.topic_uid)
            ):
                await self._refuse_closed(replica, context)
            response = await self._fetch(replica, poll, context)
            if response.batches:
                last = response.batches[-1]
                poll.offset = last.base_offset + last.record_count
            # one with no batches is the keepalive: nothing new within max_wait_ms
            yield response

    async def _fetch(
        self, replica: Replica, request: pb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchResponse:
        """One read, by the rule stated at `FetchRequest` in proto/flotilla.proto."""
        node = self.node
        if request.max_wait_ms > MAX_WAIT_MS:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"max_wait_ms={request.max_wait_ms} exceeds {MAX_WAIT_MS}",
            )
        offset = request.offset
        wait_s = request.max_wait_ms / 1000
        try:
            if request.min_high_watermark > replica.high_watermark:
                await catch_up(replica, request.min_high_watermark, READ_YOUR_WRITES_WAIT_S)
            if offset < replica.segmented.first_offset:
                await refuse(context, offset_out_of_range(replica, offset))
            node_id = node.config.node_id
            in_doubt = node.member_in_doubt
            # test-only (--unsafe-read-uncommitted): no upper bound, reads may pass the commit index
            if offset > replica.high_watermark and not node.unsafe_read_uncommitted:
                await refuse_if_leaderless(context, replica, offset, node_id, in_doubt)
                await catch_up(replica, offset, wait_s)
                if offset > replica.high_watermark:
                    tick_s = node.config.tick_ms / 1000
                    refusal = await past_high_watermark(
                        replica, offset, node_id, node.wake, tick_s, node.leases_stalled
                    )
                    await refuse(context, refusal)
            if offset == replica.high_watermark and wait_s:
                # a long poll (a subscription's) at the tail of a replica out of touch with any
                # leader would wait for nothing: its keepalives would keep a subscription on it
                # while the others write on. (Without a wait, the empty answer stands: the SDK
                # checks an empty follower answer with the leader.)
                # (not for --unsafe-read-uncommitted: the tail it serves past the high watermark
                # is what the chaos checker must see, also after a cut-off leader steps down)
                unsafe = node.unsafe_read_uncommitted
                if not unsafe:
                    await refuse_if_leaderless(context, replica, offset, node_id, in_doubt)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(replica.hw_changed.wait(), wait_s)
                if offset == replica.high_watermark and not unsafe:  # fell out of touch?
                    await refuse_if_leaderless(context, replica, offset, node_id, in_doubt)
            max_records = request.max_records or DEFAULT_MAX_RECORDS
            max_bytes = min(
                request.max_bytes or DEFAULT_MAX_FETCH_BYTES, node.config.max_message_bytes - 65536
            )
            # the high watermark as of the read (it only grows): an empty answer reports one at
            # most `offset`, so a client can tell it from the end of the log (`leader`)
            high_watermark = replica.high_watermark
            try:
                batches = await node.read(replica, offset, max_records, max_bytes)
            except (OffsetOutOfRange, IndexOutOfRange):  # retention removed them meanwhile
                await refuse(context, offset_out_of_range(replica, offset))
            return pb.FetchResponse(
                batches=batches,
                high_watermark=replica.high_watermark if batches else high_watermark,
                log_start=replica.segmented.first_offset,
                replica=node.config.node_id,
                leader=replica.node.role is Role.LEADER,
            )
        except LogClosed:
            await self._refuse_closed(replica, context)

    async def _refuse_closed(self, replica: Replica, context: grpc.aio.ServicerContext) -> NoReturn:
        spec = self.node.topics.get(replica.topic)
        uid = None if spec is None else spec.uid
        await refuse(context, replica_closed(replica, uid, self.node.config.node_id))

    # -- lookups ----------------------------------------------------------------------------------
    async def _refuse_timer_log(self, topic: str, context: grpc.aio.ServicerContext) -> None:
        """A timer log holds records not due yet: no client reads one (`cluster.delayed`)."""
        if is_timer_topic(topic):
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"topic {topic!r} is internal: it holds delayed records not due yet, which "
                "become readable in their own topic when due; clients may not read it",
            )

    async def _topic(self, name: str, context: grpc.aio.ServicerContext) -> None:
        try:
            check_topic_name(name)
        except Invalid as error:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
        if name not in self.node.topics:
            if not self.node.topics_loaded:
                await abort(
                    context,
                    grpc.StatusCode.UNAVAILABLE,
                    f"node {self.node.config.node_id} is starting: topic metadata is not loaded yet",
                )
            await abort(context, grpc.StatusCode.NOT_FOUND, f"topic {name!r} does not exist")

    async def _partition(
        self, topic: str, partition: int, context: grpc.aio.ServicerContext, uid: str = ""
    ) -> None:
        """The partition exists, of incarnation `uid` ("": any) as this node knows the topic."""
        await self._topic(topic, context)
        spec = self.node.topics[topic]
        count = spec.partitions
        if partition >= count:
            await abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"partition {partition} of topic {topic!r} does not exist: valid partitions are 0..{count - 1}",
            )
        group, node_id = f"{topic}/{partition}", self.node.config.node_id
        refusal = other_incarnation(group, uid, spec.uid, "", node_id)
        if refusal is not None:
            await refuse(context, refusal)

    async def _local_replica(
        self, topic: str, partition: int, context: grpc.aio.ServicerContext, uid: str = ""
    ) -> Replica:
        """This node's replica of the partition, of incarnation `uid` ("": any) and of the
        incarnation this node knows: a replica of a topic deleted since is never served."""
        await self._partition(topic, partition, context, uid)
        replica = self.node.replica(f"{topic}/{partition}")
        if replica is None:
            await abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"this node ({self.node.config.node_id}) holds no replica of {topic}/{partition}",
                self.node.preferred_hint(topic, partition),
            )
        known = self.node.topics[topic].uid
        refusal = other_incarnation(
            replica.group, "", known, replica.topic_uid, self.node.config.node_id
        )
        if refusal is not None:
            await refuse(context, refusal)
        return replica

    async def _leader_replica(
        self, topic: str, partition: int, context: grpc.aio.ServicerContext, uid: str = ""
    ) -> Replica:
        replica = await self._local_replica(topic, partition, context, uid)
        raft = replica.node
        if raft.role is not Role.LEADER:
            leader = raft.leader_id
            where = f"the leader is {leader}" if leader else "no leader is known yet; retry shortly"
            code = grpc.StatusCode.FAILED_PRECONDITION if leader else grpc.StatusCode.UNAVAILABLE
            await abort(
                context,
                code,
                f"this node ({self.node.config.node_id}) is not the leader of {replica.group}: {where}",
                self.node.leader_hint(leader),
            )
        return replica


def _expire(future: asyncio.Future[ProduceResult]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


def _retrieve(future: asyncio.Future[ProduceResult]) -> None:
    if not future.cancelled():
        future.exception()
