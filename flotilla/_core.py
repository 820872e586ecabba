"""The client core: every call of the SDK as a plan with no I/O, which a driver runs.

A plan is a generator. It yields the steps it needs done — `Rpc` (one unary call to one
address) or `Sleep` — and is sent back each step's outcome: the response, or `Failed` (the
error mapped to the SDK's, and whether the call reached a server at all); its return value is
the call's. The sync client (`flotilla.client`) runs plans on the calling thread, the asyncio
client (`flotilla.aio`) on the event loop: routing, retries, backoff, metadata, read-your-writes
and request building are written once, here, and both clients behave alike by construction.

Subscriptions stream, so a driver runs their I/O itself; `Subscription` keeps their state and
decisions (where to connect, from which offset, when to move on or stop:
`flotilla._plans.Subscription`).

Why one module of ~490 lines: `ClientCore` is the one object both drivers hold, and its methods
are the SDK's calls, one short plan each over the shared routing steps (`any_node`, metadata,
reads); the long plans (produce, read, subscription) are in `_plans.py`, the group, queue and
security calls in their own plan modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from google.protobuf.message import Message

from flotilla._checks import (
    alter_request,
    check_acks,
    check_idle_timeout,
    check_poll_timeout,
    check_read,
    check_record,
    check_stop_after_idle,
    check_value,
    create_request,
)
from flotilla._credentials import Credentials
from flotilla._delays import deliver_at_header, due_ms, written_at_once
from flotilla._plans import (
    METADATA_GRACE_S,
    POLL_STEP_S,
    RYW_WAIT_S,
    NoNodeAnswers,
    Once,
    ProducerGap,
    ProduceRoute,
    ReadYourWrites,
    Subscription,
    now_ms,
    worth_retrying,
)
from flotilla._router import Router, decode_fetch, member, topic_info
from flotilla._sequences import written_nowhere
from flotilla.errors import FlotillaError, Timeout, TopicNotFound, Unavailable
from flotilla.types import Headers, Member, Record, RecordMetadata, TopicInfo
from proto import flotilla_pb2 as pb
from proto.records import peek_producer, peek_record_count, with_producer

__all__ = ["CHANNEL_OPTIONS", "ClientCore", "Failed", "Plan", "Rpc", "Sleep"]

T = TypeVar("T")
# gRPC channel settings both drivers use.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.http2.lookahead_bytes", 16 * 1024 * 1024),  # large fetches arrive without stalls
]
# A batch refused for good waits in steps of this for every batch taken before it to settle
# before the batches behind it move on without it (`Sequences.skip`).
SKIP_POLL_S = 0.005


@dataclass(frozen=True, slots=True)
class Rpc:
    """A step: call `method` (a Flotilla service method, e.g. "Produce") at `address` with
    `request` and a deadline of `timeout_s`. `on_issued`, if given and not yet done, is called
    once the call is on its way (before its answer)."""

    address: str
    method: str
    request: Message
    timeout_s: float
    on_issued: Once | None = None


@dataclass(frozen=True, slots=True)
class Sleep:
    """A step: wait `seconds` before the plan goes on."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Failed:
    """An `Rpc`'s outcome when it failed: the SDK's `error`, and `unreachable`, why the call
    reached no server at all ("" when one may have seen it: see `unreachable_reason`)."""

    error: FlotillaError
    unreachable: str


Step = Rpc | Sleep
# What a plan is sent back for a step: an Rpc's response or `Failed`; None for a Sleep.
Plan = Generator[Step, Any, T]


class ClientCore:
    """The state both clients share (the router: metadata, leaders, producer sequences) and
    every call as a plan. `timeout_s`: how long a call retries before it raises; `acks`: "all"
    or "leader"; `credentials`: TLS and token (none: plaintext, anonymous)."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        timeout_s: float,
        acks: str,
        credentials: Credentials | None = None,
    ) -> None:
        self.acks = check_acks(acks)
        self.router = Router([bootstrap] if isinstance(bootstrap, str) else list(bootstrap))
        self.timeout_s = timeout_s
        # TLS files and token (`flotilla._credentials`): every driver over this core uses them
        self.credentials = credentials or Credentials()
        for address in self.router.bootstrap:  # a token never goes out in clear: refuse now
            self.credentials.check_address(address)

    # -- plumbing --------------------------------------------------------------------------------
    def any_node(self, method: str, request: Message, timeout_s: float) -> Plan[Any]:
        """Runs the call on the first node that answers; errors other than unavailability raise,
        and so does a round in which no candidate could be reached for long (`NoNodeAnswers`)."""
        deadline = time.monotonic() + self.timeout_s
        last: FlotillaError | None = None
        nobody = NoNodeAnswers()  # gives up when no candidate can be reached
        while time.monotonic() < deadline:
            addresses = self.router.candidates()
            for address in addresses:
                outcome = yield Rpc(address, method, request, timeout_s)
                if not isinstance(outcome, Failed):
                    return outcome
                last = outcome.error
                if not isinstance(last, Unavailable | Timeout):
                    raise last from None
                nobody.failed(address, outcome.unreachable)
            given_up = nobody.round_done(addresses, time.monotonic())
            if given_up is not None:
                raise given_up
            yield Sleep(0.1)
        raise last or Unavailable("no node answered")

    def refresh(self, topics: Sequence[str] = ()) -> Plan[None]:
        """Reloads cluster metadata (members, topics, leaders)."""
        response = yield from self.any_node("Metadata", pb.MetadataRequest(topics=topics), 5)
        self.router.absorb(response)

    def not_found_grace(self, make: Callable[[], Plan[T]]) -> Plan[T]:
        """Retries the plan `make` gives on TopicNotFound for `METADATA_GRACE_S`: a topic just
        created may not have reached every node's metadata yet (as with Kafka's
        UNKNOWN_TOPIC_OR_PARTITION)."""
        deadline = time.monotonic() + METADATA_GRACE_S
        while True:
            try:
                return (yield from make())
            except TopicNotFound:
                if time.monotonic() > deadline:
                    raise
                yield Sleep(0.1)

    def topic(self, name: str) -> Plan[TopicInfo]:
        """The topic as this client knows it, asking the cluster only when it knows none."""
        info = self.router.topic(name)
        if info is None:
            yield from self.not_found_grace(lambda: self._learn(name))
            info = self.router.topic(name)
        if info is None:
            raise TopicNotFound(f"topic {name!r} does not exist")
        return info

    def _learn(self, name: str) -> Plan[None]:
        """Asks for the topic's metadata: TopicNotFound while the answer names none but an
        incarnation this client deleted (a node that has not caught up yet)."""
        yield from self.refresh([name])
        if self.router.topic(name) is None:
            raise TopicNotFound(f"topic {name!r} does not exist")

    def refresh_quietly(self, topic: str) -> Plan[None]:
        """Refreshes the topic's metadata if a node answers; the cached routes stand if not."""
        try:
            yield from self.refresh([topic])
        except (Unavailable, Timeout, TopicNotFound):
            pass  # a node whose metadata lags; the cached routes still stand

    # -- topics ----------------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        retention_bytes: int,
        retention_ms: int,
        max_delay_ms: int | None = None,
    ) -> Plan[TopicInfo]:
        request = create_request(
            name, partitions, replication_factor, retention_bytes, retention_ms, max_delay_ms
        )
        info = topic_info((yield from self.any_node("CreateTopic", request, 20)))
        yield from self.not_found_grace(lambda: self.refresh([name]))
        return info

    def alter_topic(
        self,
        name: str,
        partitions: int | None,
        retention_bytes: int | None,
        retention_ms: int | None,
        max_delay_ms: int | None = None,
    ) -> Plan[TopicInfo]:
        request = alter_request(name, partitions, retention_bytes, retention_ms, max_delay_ms)
        response = yield from self.any_node("AlterTopic", request, 20)
        self.router.absorb(pb.MetadataResponse(topics=[response]))  # its partitions from now
        return topic_info(response)

    def delete_topic(self, name: str) -> Plan[None]:
        if self.router.topic(name) is None:
            # learn the incarnation being deleted: a node that has not caught up with the
            # deletion may report it later, and this client must not take it for the topic
            try:
                yield from self.refresh([name])
            except (TopicNotFound, Unavailable, Timeout):
                pass  # the deletion itself says what is wrong, if anything
        yield from self.any_node("DeleteTopic", pb.DeleteTopicRequest(name=name), 20)
        self.router.forget_topic(name)

    def list_topics(self) -> Plan[list[str]]:
        response = yield from self.any_node("ListTopics", pb.ListTopicsRequest(), 5)
        return list(response.names)

    def describe_topic(self, name: str) -> Plan[TopicInfo]:
        return (yield from self.not_found_grace(lambda: self._describe(name)))

    def _describe(self, name: str) -> Plan[TopicInfo]:
        """The topic as a node reports it; TopicNotFound while that is an incarnation this
        client deleted (the node has not caught up yet)."""
        response = yield from self.any_node("Metadata", pb.MetadataRequest(topics=[name]), 5)
        self.router.absorb(response)
        info = topic_info(response.topics[0])
        if self.router.deleted(name, info.uid):
            raise TopicNotFound(f"topic {name!r} does not exist (a node reported the deleted one)")
        return info

    def members(self) -> Plan[list[Member]]:
        response = yield from self.metadata()
        return [member(m) for m in response.members]

    def metadata(self) -> Plan[pb.MetadataResponse]:
        response = yield from self.any_node("Metadata", pb.MetadataRequest(), 5)
        self.router.absorb(response)
        return response

    # -- produce ---------------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        partition: int | None,
        headers: Headers | None,
        delay_ms: int | None = None,
        deliver_at_ms: int | None = None,
    ) -> Plan[RecordMetadata[Any]]:
        value, key, headers = check_record(value, key, headers)
        timestamp = now_ms()
        due = due_ms(delay_ms, deliver_at_ms, timestamp)
        if due is not None:
            headers = deliver_at_header(due, headers)
        yield from self.topic(topic)
        chosen = self.router.partition_for(topic, key, partition)
        batch = self.router.encode(
            topic, chosen, [(key, value, headers, timestamp)], delayed=due is not None
        )
        if due is not None:
            yield from self.send_batch(topic, chosen, batch, deliver_at_ms=due)
            return RecordMetadata(topic, chosen, None, due)  # an offset only once it is due
        base = yield from self.send_batch(topic, chosen, batch)
        return RecordMetadata(topic, chosen, base)

    def produce_batch(
        self, topic: str, values: Sequence[bytes], partition: int | None
    ) -> Plan[list[RecordMetadata[int]]]:
        if not values:
            return []
        yield from self.topic(topic)
        chosen = self.router.partition_for(topic, None, partition)
        timestamp = now_ms()
        batch = self.router.encode(
            topic, chosen, [(None, check_value(v), None, timestamp) for v in values]
        )
        base = yield from self.send_batch(topic, chosen, batch)
        return [RecordMetadata(topic, chosen, base + n) for n in range(len(values))]

    def send_batch(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        on_issued: Callable[[], None] | None = None,
        abandoned: Callable[[], bool] | None = None,
        on_moved: Callable[[int, int], None] | None = None,
        deliver_at_ms: int = 0,
    ) -> Plan[int]:
        """See `flotilla.client.Client.send_batch`."""
        issued = Once(on_issued)
        sequences = self.router.sequences
        delayed = deliver_at_ms != 0
        route = ProduceRoute(
            self.router, topic, partition, self.timeout_s, abandoned, delayed=delayed
        )
        route.batch = peek_producer(batch)
        try:
            while True:
                try:
                    base = yield from self._send_batch(route, batch, issued, deliver_at_ms)
                    break
                except ProducerGap as gap:  # resend under a new id (see `Sequences.move`)
                    moved = sequences.move(topic, partition, *route.batch, delayed=delayed)
                    if moved is None:
                        raise Unavailable(
                            f"{gap.cause} (an earlier batch of this producer failed for good; "
                            "this one was not written: send it again)"
                        ) from None
                    batch, route.batch = with_producer(batch, *moved), moved
                    if on_moved is not None:
                        on_moved(*moved)
            if not delayed:  # a delayed batch's base is its place in the timer log
                self.router.note_written(topic, partition, base, batch)
            else:  # where its timer log is led: the next delayed batches go straight there
                log = self.router.timer_log_to_learn(topic)
                if log is not None:
                    yield from self.refresh_quietly(log)
            return base
        except FlotillaError as error:
            skipped = False
            if written_nowhere(error):  # the batches behind it go on without it
                while sequences.behind(topic, partition, *route.batch, delayed=delayed):
                    if time.monotonic() > route.deadline:
                        break  # an earlier batch still on its way: fail the later ones instead
                    yield Sleep(SKIP_POLL_S)  # `skip` takes the earliest batch only
                else:
                    count = peek_record_count(batch)
                    skipped = sequences.skip(topic, partition, *route.batch, count, delayed=delayed)
            if not skipped:
                sequences.reset(topic, partition, route.batch[0], delayed=delayed)
            raise
        finally:
            sequences.settled(topic, partition, *route.batch, delayed=delayed)
            issued()  # a batch that never went out releases the next one too

    def _send_batch(
        self, route: ProduceRoute, batch: bytes, issued: Once, deliver_at_ms: int
    ) -> Plan[int]:
        topic, partition = route.topic, route.partition
        while True:
            attempt_s = route.attempt_s()
            if route.stale:  # a node named another incarnation: learn the current one first
                route.stale = False
                yield from self.refresh_quietly(topic)
            address = route.next_address()
            if address is None:
                yield from self.refresh_quietly(topic)
                address = route.next_address()
            if address is not None:
                request = pb.ProduceRequest(
                    topic=topic, partition=partition, batch=batch, acks=self.acks,
                    timeout_ms=max(1, int(attempt_s * 1000)), deliver_at_ms=deliver_at_ms,
                    topic_uid=self.router.topic_uid(topic),
                )  # fmt: skip
                outcome = yield Rpc(address, "Produce", request, attempt_s, issued)
                if not isinstance(outcome, Failed):
                    if deliver_at_ms and not outcome.deliver_at_ms:
                        raise written_at_once(topic, partition, int(outcome.base_offset))
                    return int(outcome.base_offset)
                if route.failed(address, outcome.error):
                    continue
            yield Sleep(route.pause_s())
            if route.refresh_due():  # the cached routes failed twice: ask the cluster afresh
                yield from self.refresh_quietly(topic)

    # -- read ------------------------------------------------------------------------------------
    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int,
        replica: str | None,
        max_wait_ms: int = 0,
        *,
        min_high_watermark: int = 0,
        followers_first: bool = False,
    ) -> Plan[pb.FetchResponse]:
        """One Fetch from a replica (see `flotilla.client.Client.fetch`). `min_high_watermark`:
        a replica answers only once it committed that far, else the next is asked (a queue's
        leased offsets); `followers_first`: the leader is asked last."""
        check_read(offset, max_records)
        yield from self.topic(topic)
        self.router.partition_for(topic, None, partition)
        request = pb.FetchRequest(
            topic=topic,
            partition=partition,
            offset=offset,
            max_records=max_records,
            max_wait_ms=max_wait_ms,
            min_high_watermark=max(min_high_watermark, self.router.written_to(topic, partition)),
        )
        last: FlotillaError | None = None
        deadline = time.monotonic() + self.timeout_s
        grace_until = time.monotonic() + METADATA_GRACE_S
        while time.monotonic() < deadline:
            # the incarnation as last learned: a replica of another one answers nothing
            request.topic_uid = self.router.topic_uid(topic)
            behind = ReadYourWrites(
                request.min_high_watermark, pinned=replica is not None, offset=offset
            )
            for address in self.router.read_addresses(topic, partition, replica, followers_first):
                outcome = yield Rpc(address, "Fetch", request, 5 + max_wait_ms / 1000 + RYW_WAIT_S)
                if isinstance(outcome, Failed):
                    # OffsetNotAvailable (a replica that lags) is worth retrying elsewhere
                    last = outcome.error
                    if not worth_retrying(last, grace_until):
                        raise last from None
                    continue
                if behind.accept(outcome):
                    return outcome
            if behind.best is not None:
                return behind.best
            yield Sleep(0.05)
            yield from self.refresh_quietly(topic)
        raise last or Unavailable(f"no replica of {topic}/{partition} answered")

    def read(
        self, topic: str, partition: int, offset: int, max_records: int, replica: str | None
    ) -> Plan[list[Record]]:
        response = yield from self.fetch(topic, partition, offset, max_records, replica)
        return decode_fetch(response, offset, max_records, topic, partition)

    def poll(
        self,
        topic: str,
        partition: int,
        offset: int,
        timeout_s: float,
        max_records: int,
        replica: str | None,
    ) -> Plan[list[Record]]:
        wait_s = check_poll_timeout(timeout_s)
        deadline = time.monotonic() + wait_s
        while True:
            step_s = min(POLL_STEP_S, max(0.0, deadline - time.monotonic()))
            response = yield from self.fetch(
                topic, partition, offset, max_records, replica, max_wait_ms=int(step_s * 1000)
            )
            records = decode_fetch(response, offset, max_records, topic, partition)
            if records or time.monotonic() >= deadline:
                return records

    def subscription(
        self,
        topic: str,
        partition: int,
        offset: int,
        replica: str | None,
        idle_timeout_s: float,
        stop_after_idle_s: float | None,
    ) -> Subscription:
        """A subscription's state, its arguments checked (InvalidArgument names a bad one)."""
        check_read(offset)
        return Subscription(
            self.router,
            topic,
            partition,
            offset,
            replica,
            check_idle_timeout(idle_timeout_s),
            check_stop_after_idle(stop_after_idle_s),
        )
