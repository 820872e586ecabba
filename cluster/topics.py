"""Topic administration on a node: create, alter and delete topics, and the node's view of the
topic table.

On a controller node a change goes to the control plane (`cluster.controller`) here; any other
node forwards it to a controller, then refreshes its own view before it answers, so the client's
next call to it sees the change (other nodes see it within a poll, `TOPICS_POLL_S`). Topic
changes are placed here too: new partitions' initial voters come from rendezvous placement over
the live members, with preferred leaders balanced across nodes (`cluster.placement`).

Names starting with `__` (`proto.groups.INTERNAL_PREFIX`) are the cluster's own topics: a client
may read them, but not create, alter or delete them (`Invalid`, naming the prefix). A node
creates `__groups` itself (`internal=True`); forwarded, that creation carries `INTERNAL_TOPIC_KEY`.

`TopicAdmin` owns the node's topic table (`topics`, `loaded`, `version`); it is built with only
what it uses: the node's config, its peer transport (to forward and poll), the live members (for
placement), the control plane once it started (`controller`, None on other nodes) and the
metadata view (to answer a change with the topic's info). Its outcomes are `cluster.errors`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import grpc
import xxhash

from cluster.config import NodeConfig
from cluster.controller import (
    ControlPlaneError,
    CreateOutcome,
    MetadataStore,
    TopicSpec,
    UpdateOutcome,
)
from cluster.errors import ControlPlaneUnavailable, Invalid, TopicExists, TopicNotFound
from cluster.metadata_view import LEGACY_TOPICS_ONLY_KEY
from cluster.placement import Candidate, balance_leaders, partition_id, place
from cluster.topic_spec import placement_key, timer_source
from cluster.transport import PeerTransport
from cluster.validation import (
    check_partition_count,
    check_replication_factor,
    check_topic_name,
)
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.groups import GROUPS_TOPIC, INTERNAL_PREFIX, is_internal
from timers.types import (
    DEFAULT_MAX_DELAY_MS,
    MAX_MAX_DELAY_MS,
    MIN_MAX_DELAY_MS,
    TIMER_TOPIC_PREFIX,
    timer_topic,
)

__all__ = [
    "FORWARDED_FOR_KEY",
    "INTERNAL_TOPIC_KEY",
    "TOPICS_POLL_S",
    "TopicAdmin",
    "check_max_delay_ms",
    "default_replication_factor",
    "requested_by",
]

# The client a topic change came from (its gRPC peer), set by the service for the change's
# task; a change forwarded to a controller carries it in this metadata key.
requested_by: contextvars.ContextVar[str] = contextvars.ContextVar("requested_by", default="")
FORWARDED_FOR_KEY = "flotilla-forwarded-for"
# A CreateTopic a node forwards for one of the cluster's own topics carries this metadata key.
# (Not a credential: the client API has none; it keeps a client from creating one by accident.)
INTERNAL_TOPIC_KEY = "flotilla-internal-topic"
# The internal topics a node may create (and those starting with TIMER_TOPIC_PREFIX: the timer
# logs of delayed delivery, `cluster.delayed`).
INTERNAL_TOPICS = frozenset({GROUPS_TOPIC})


def may_create_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS or name.startswith(TIMER_TOPIC_PREFIX)


def check_max_delay_ms(max_delay_ms: int) -> int:
    """The topic setting as asked (0: the default) -> the value kept, or `Invalid`."""
    if max_delay_ms == 0:
        return DEFAULT_MAX_DELAY_MS
    if not MIN_MAX_DELAY_MS <= max_delay_ms <= MAX_MAX_DELAY_MS:
        raise Invalid(
            f"max_delay_ms={max_delay_ms} is invalid: use {MIN_MAX_DELAY_MS}.."
            f"{MAX_MAX_DELAY_MS} (1 s to 365 days), or 0 for the default "
            f"{DEFAULT_MAX_DELAY_MS} (40 days)"
        )
    return max_delay_ms


T = TypeVar("T")

# A controller's refusal of a forwarded change, as the error this node reports in turn.
_ANSWERS: dict[grpc.StatusCode, type[Exception]] = {
    grpc.StatusCode.INVALID_ARGUMENT: Invalid,
    grpc.StatusCode.ALREADY_EXISTS: TopicExists,
    grpc.StatusCode.NOT_FOUND: TopicNotFound,
}

# How often a node that is not a controller asks a controller for the topic table. It names
# the control-plane version of the table it holds, and an unchanged table is answered with that
# alone (`MetadataResponse.topics_unchanged`); every TOPICS_FULL_POLL_S it takes the whole table
# anyway, a safety net (a control plane rebuilt from nothing counts its versions from 0 again).
TOPICS_POLL_S = 1.0
TOPICS_FULL_POLL_S = 30.0
# One poll asks a controller for at most TOPICS_POLL_TIMEOUT_S; one that has not answered
# within TOPICS_HEDGE_S is not waited for alone: the next controller is asked too.
TOPICS_POLL_TIMEOUT_S = 2.0
TOPICS_HEDGE_S = 0.25


def default_replication_factor(
    requested: int, configured: int, live_members: int, existing: TopicSpec | None
) -> tuple[int, str]:
    """(the replication factor to create with, a note for the caller). 0 asks for the default:
    the node's `default_replication_factor`, lowered to the live members when fewer are up (a
    one-node dev cluster), with a note saying so; for a topic that exists, its own factor, so
    that create stays idempotent."""
    if requested:
        return requested, ""
    if existing is not None:
        return existing.replication_factor, ""
    if live_members >= configured:
        return configured, ""
    factor = max(1, live_members)
    return factor, (
        f"replication factor {factor}: the default, {configured}, lowered to the "
        f"{live_members} live member(s); a topic keeps the factor it was created with"
    )


class TopicAdmin:
    def __init__(
        self,
        config: NodeConfig,
        transport: PeerTransport,
        live_candidates: Callable[[], list[Candidate]],
        controller: Callable[[], MetadataStore | None],
        describe: Callable[[Iterable[str]], Awaitable[pb.MetadataResponse]],
    ) -> None:
        self.config = config
        self.transport = transport
        self.live_candidates = live_candidates
        self._controller = controller
        self.describe = describe
        self.topics: dict[str, TopicSpec] = {}
        # each topic of the last table polled: the hash of its answer, and its spec (`_specs`)
        self._built: dict[str, tuple[int, TopicSpec]] = {}
        self.loaded = False  # until then, "unknown topic" means "not loaded yet"
        # what the topic table was built from (the control plane's version, or a signature of
        # a controller's answer): a change of it is a change of the topics
        self.version: object = None
        # the control plane's version of `topics` (0: unknown): a poll names it, and a
        # controller answers it for its own table
        self.control_version = 0
        self._polled_at = self._fully_polled_at = 0.0
        self._answered_by = ""  # the controller whose answer came last: asked first next time
        self._lock = asyncio.Lock()

    @property
    def controller(self) -> MetadataStore | None:
        """This node's control plane, once started; None on a node that is not a controller."""
        return self._controller()

    async def create_topic(
        self, request: pb.CreateTopicRequest, *, internal: bool = False
    ) -> pb.TopicInfo:
        """`internal`: this node creates one of the cluster's own topics (`INTERNAL_TOPICS`)."""
        check_topic_name(request.name)
        if not (internal and may_create_internal(request.name)):
            check_not_internal(request.name, "create")
        check_partition_count(request.partitions)
        max_delay_ms = check_max_delay_ms(request.max_delay_ms)
        live = self.live_candidates()
        factor, note = default_replication_factor(
            request.replication_factor,
            self.config.default_replication_factor,
            len(live),
            self.topics.get(request.name),
        )
        check_replication_factor(factor, len(live))
        if self.controller is None:
            return await self._forward(
                lambda stub, metadata: stub.CreateTopic(
                    request,
                    timeout=15,
                    metadata=(*metadata, (INTERNAL_TOPIC_KEY, "1")) if internal else metadata,
                )
            )
        assignment = self._assign(request.name, range(request.partitions), factor)
        spec = TopicSpec(
            request.name, request.partitions, factor, request.retention_bytes, request.retention_ms,
            assignment, uuid.uuid4().hex, max_delay_ms,
        )  # fmt: skip
        outcome = await _decided("create", request.name, self.controller.create_topic(spec))
        if outcome is CreateOutcome.CONFLICT:
            existing = self.controller.topics().get(request.name)
            shape = (
                f"partitions={existing.partitions}, replication_factor={existing.replication_factor}"
                if existing
                else "another spec"
            )
            raise TopicExists(f"topic {request.name!r} already exists with {shape}")
        deadline = time.monotonic() + 10
        while request.name not in self.topics and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        info = (await self.describe([request.name])).topics[0]
        info.note = note
        return info

    def _assign(self, topic: str, partitions: range, factor: int) -> tuple[tuple[str, ...], ...]:
        """The initial voters of new partitions: placed over the live members, and their
        preferred leaders spread so that each node leads about as many partitions as the next,
        counting the existing topics'."""
        live = self.live_candidates()
        source = timer_source(topic, self.topics)
        if source is not None:  # a timer log: placed as its source, preferred leader too
            rows = source.assignment
            return tuple(
                rows[p] if p < len(rows) and len(rows[p]) == factor
                else tuple(place(placement_key(topic, p, self.topics), live, factor))
                for p in partitions
            )  # fmt: skip
        preferred: dict[str, int] = {}  # preferred leaderships of the existing topics
        for known in self.topics.values():
            for replicas in known.assignment:
                if replicas:
                    preferred[replicas[0]] = preferred.get(replicas[0], 0) + 1
        placed = [place(partition_id(topic, p), live, factor) for p in partitions]
        return tuple(tuple(voters) for voters in balance_leaders(placed, preferred))

    async def delete_topic(self, name: str) -> None:
        check_topic_name(name)
        check_not_internal(name, "delete")
        if self.controller is None:
            await self._forward(
                lambda stub, metadata: stub.DeleteTopic(
                    pb.DeleteTopicRequest(name=name), timeout=15, metadata=metadata
                )
            )
            return
        source = self.controller.topics().get(name)
        deleted = await _decided("delete", name, self.controller.delete_topic(name))
        if not deleted:
            raise TopicNotFound(f"topic {name!r} does not exist")
        # its pending timers go with it: the timer log of that incarnation (if it has one)
        timers = timer_topic(source.uid) if source is not None and source.uid else ""
        if timers and timers in self.controller.topics():
            await _decided("delete", timers, self.controller.delete_topic(timers))

    async def alter_topic(
        self, request: pb.AlterTopicRequest, *, internal: bool = False
    ) -> pb.TopicInfo:
        """Changes a topic's retention (every node applies it at its next retention check) or
        adds partitions (placed as a new topic's are; each node opens its new replicas).
        `internal`: this node grows a timer log topic with its source topic."""
        check_topic_name(request.name)
        if not (internal and request.name.startswith(TIMER_TOPIC_PREFIX)):
            check_not_internal(request.name, "alter")
        partitions = request.partitions if request.HasField("partitions") else None
        if partitions is not None:
            check_partition_count(partitions)
        max_delay_ms = (
            check_max_delay_ms(request.max_delay_ms) if request.HasField("max_delay_ms") else None
        )
        if self.controller is None:
            return await self._forward(
                lambda stub, metadata: stub.AlterTopic(
                    request,
                    timeout=15,
                    metadata=(*metadata, (INTERNAL_TOPIC_KEY, "1")) if internal else metadata,
                )
            )
        change: dict[str, Any] = {
            "retention_bytes": (
                request.retention_bytes if request.HasField("retention_bytes") else None
            ),
            "retention_ms": request.retention_ms if request.HasField("retention_ms") else None,
            "max_delay_ms": max_delay_ms,
            "partitions": partitions,
        }
        spec = self.controller.topics().get(request.name)
        if spec is None:
            raise TopicNotFound(f"topic {request.name!r} does not exist")
        assignment: tuple[tuple[str, ...], ...] = ()
        if partitions is not None and partitions > spec.partitions:
            check_replication_factor(spec.replication_factor, len(self.live_candidates()))
            assignment = spec.assignment + self._assign(
                request.name, range(spec.partitions, partitions), spec.replication_factor
            )
        change_made = self.controller.update_topic(request.name, assignment=assignment, **change)
        outcome = await _decided("alter", request.name, change_made)
        if outcome is UpdateOutcome.MISSING:
            raise TopicNotFound(f"topic {request.name!r} does not exist")
        if outcome is UpdateOutcome.FEWER:
            now = self.controller.topics().get(request.name)
            raise Invalid(
                f"partitions={partitions} is invalid: topic {request.name!r} has "
                f"{now.partitions if now else spec.partitions}; partitions can only be added "
                "(records keep their partition, so a key's partition never changes back)"
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _has_change(self.topics, request.name, change):
            await asyncio.sleep(0.02)
        return (await self.describe([request.name])).topics[0]

    async def _forward(self, call: Callable[[Any, Any], Awaitable[Any]]) -> Any:
        """Makes the change on a controller; the client's address goes along (`requested_by`)
        so the controller's log names who asked, not this node."""
        errors = []
        client = requested_by.get()
        metadata = ((FORWARDED_FOR_KEY, client),) if client else ()
        for controller_id in self._controllers_in_order():
            address = self.transport.address_of(controller_id) or ""
            stub = flotilla_pb2_grpc.FlotillaStub(self.transport.channel(address))
            try:
                answer = await call(stub, metadata)
            except grpc.aio.AioRpcError as error:
                answered = _ANSWERS.get(error.code())
                if answered is not None:  # the controller's own answer: pass it on
                    raise answered(error.details()) from None
                errors.append(f"{controller_id}: {error.details()}")
                continue
            # the change is made: this node's view of the topics takes it in before it answers,
            # so the client's next call here sees what it just did (other nodes within a poll)
            self._answered_by = controller_id
            self._polled_at = 0.0
            await self.refresh()
            return answer
        raise ControlPlaneUnavailable(
            f"no controller reachable ({'; '.join(errors) or 'none known yet'})"
        )

    async def refresh(self, *, now: bool = False) -> None:
        """Brings the topic table up to date: from the control plane on a controller, else
        from a controller, at most every `TOPICS_POLL_S` (`now`: at once, for a request that
        names a topic this node does not know yet)."""
        # one poll at a time: a poll sent before a change must not land after one sent since
        async with self._lock:
            if now:
                self._polled_at = 0.0
            await self._refresh_now()

    async def _refresh_now(self) -> None:
        if self.controller is not None and self.controller.ready:
            if self.controller.version != self.version:
                self.version = self.control_version = self.controller.version
                self.topics = self.controller.topics()
                self.loaded = True
            return
        # not a controller, or a controller whose control plane has not caught up yet: ask
        # the other controllers over gRPC, at most every TOPICS_POLL_S once loaded
        now = time.monotonic()
        if self.loaded and now - self._polled_at < TOPICS_POLL_S:
            return
        self._polled_at = now
        known = self.control_version if now - self._fully_polled_at < TOPICS_FULL_POLL_S else 0
        response = await self._ask_controllers(known)
        if response is None:
            return  # no controller answered: keep the table held, ask again next poll
        if known and response.topics_unchanged and response.topics_version == known:
            return  # the table held is the controller's own: nothing to rebuild
        if not known:
            self._fully_polled_at = now
        self.control_version = response.topics_version
        signature = tuple((t.name, len(t.partitions), t.uid) for t in response.topics)
        if signature != self.version:
            self.version = signature
        self.topics = self._specs(response.topics)
        self.loaded = True

    def _specs(self, topics: Iterable[pb.TopicInfo]) -> dict[str, TopicSpec]:
        """The table as specs, each topic's built again only when its answer changed (a hash
        of its bytes): the whole table comes every TOPICS_FULL_POLL_S, and building 100,000
        partitions' specs held the event loop ~0.4 s each time, ~1% of a core at rest."""
        built: dict[str, tuple[int, TopicSpec]] = {}
        for topic in topics:
            digest = xxhash.xxh3_64_intdigest(topic.SerializeToString(deterministic=True))
            known = self._built.get(topic.name)
            spec = known[1] if known is not None and known[0] == digest else spec_of(topic)
            built[topic.name] = (digest, spec)
        self._built = built
        return {name: spec for name, (_, spec) in built.items()}

    async def _ask_controllers(self, known: int) -> pb.MetadataResponse | None:
        """The topic table from another controller, or None when none answered. The one that
        answered last is asked first; when it has not answered within `TOPICS_HEDGE_S` the next
        is asked as well, and the first answer wins. A paused controller (its connections stay
        open, its answers never come) so costs a request for a topic created a moment ago a
        fraction of a second, not the whole poll timeout."""
        others = [c for c in self._controllers_in_order() if c != self.config.node_id]
        asking: dict[asyncio.Future[pb.MetadataResponse], tuple[str, Any]] = {}
        try:
            while others or asking:
                if others:
                    controller_id = others.pop(0)
                    address = self.transport.address_of(controller_id) or ""
                    stub = flotilla_pb2_grpc.FlotillaStub(self.transport.channel(address))
                    call = stub.Metadata(
                        pb.MetadataRequest(topics_only=True, topics_version=known),
                        timeout=TOPICS_POLL_TIMEOUT_S,
                        # for a controller of the last release (`cluster.service`): drop after
                        metadata=((LEGACY_TOPICS_ONLY_KEY, "1"),),
                    )
                    asking[asyncio.ensure_future(call)] = (controller_id, call)
                done, _ = await asyncio.wait(
                    asking,
                    timeout=TOPICS_HEDGE_S if others else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                for task in done:
                    controller_id, _ = asking.pop(task)
                    error = task.exception()
                    if error is None:
                        self._answered_by = controller_id
                        return task.result()
                    if not isinstance(error, grpc.aio.AioRpcError):
                        raise error
            return None
        finally:
            for task, (_, call) in asking.items():
                call.cancel()
                task.cancel()

    def _controllers_in_order(self) -> list[str]:
        """The controllers with a known address, the one that answered last first."""
        ids = [c for c in sorted(self.config.controllers) if self.transport.address_of(c)]
        if self._answered_by in ids:
            ids.remove(self._answered_by)
            ids.insert(0, self._answered_by)
        return ids


def spec_of(topic: pb.TopicInfo) -> TopicSpec:
    """A topic as a controller's `topics_only` answer gives it (each partition's assigned
    replicas)."""
    return TopicSpec(
        topic.name,
        len(topic.partitions),
        topic.replication_factor,
        topic.retention_bytes,
        topic.retention_ms,
        tuple(tuple(p.replicas) for p in topic.partitions),
        topic.uid,
        topic.max_delay_ms or DEFAULT_MAX_DELAY_MS,
    )


def check_not_internal(name: str, verb: str) -> None:
    if is_internal(name):
        raise Invalid(
            f"topic {name!r} is the cluster's own (names starting with {INTERNAL_PREFIX!r} are "
            f"reserved): clients may read it, not {verb} it"
        )


async def _decided(verb: str, name: str, change: concurrent.futures.Future[T]) -> T:
    """The control plane's answer to a change, or `ControlPlaneUnavailable` saying why there is
    none."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(change), 15)
    except (ControlPlaneError, TimeoutError) as error:
        raise ControlPlaneUnavailable(
            f"the control plane could not {verb} {name!r}: {error or 'timed out'}"
        ) from None


def _has_change(topics: dict[str, TopicSpec], name: str, change: dict[str, int | None]) -> bool:
    """Has this node's topic table caught up with a change of the topic (or lost the topic)?"""
    spec = topics.get(name)
    return spec is None or all(
        value is None
        or getattr(spec, field) == value
        or (field == "partitions" and spec.partitions > value)
        for field, value in change.items()
    )
