"""The retry policies both clients share, as plans with no I/O: the driver (the sync or the
asyncio client) asks a plan where to send next and feeds it each outcome.

- `ProduceRoute`: where one batch goes across its retries (leader hints, the other replicas,
  backoff, when to refresh metadata, when to move the batch to a new producer id).
- `NoNodeAnswers`: when an admin call that reaches no server at all gives up.
- `ReadYourWrites`: which replica's answer a read takes.
- `Subscription`: where a subscription's stream goes, from which offset, when it moves on.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

import grpc

from flotilla._checks import SUBSCRIBE_KEEPALIVE_MS
from flotilla._router import Router, decode_fetch
from flotilla._sequences import ProducerGap
from flotilla.errors import (
    FlotillaError,
    NotLeader,
    OutOfOrder,
    Overloaded,
    SequenceInFlight,
    StaleMetadata,
    Timeout,
    TopicNotFound,
    Unavailable,
    UnknownProducer,
)
from flotilla.types import Record
from proto import flotilla_pb2 as pb

__all__ = [
    "NoNodeAnswers",
    "Once",
    "ProduceRoute",
    "ProducerGap",
    "ReadYourWrites",
    "Subscription",
    "keepalive_ms",
    "subscribe_address",
    "worth_retrying",
]

RETRIABLE = (NotLeader, Unavailable, Timeout)
METADATA_GRACE_S = 3.0  # how long a topic just created may be unknown to a node
MAX_BACKOFF_S = 0.05  # a failover ends within about an election timeout: poll soon after
# an overloaded node (its produce gate full) is left alone longer: retrying at the failover pace
# would add to its load, and the retries of many clients are spread by the jitter
MAX_OVERLOAD_BACKOFF_S = 1.0
MAX_HINT_HOPS = 3  # leader hints followed in a row before pausing (stale views can bounce)
ATTEMPT_S = 2.0  # one attempt's deadline: a leader that hangs (paused, overloaded) is left soon
# A poll's long wait is cut in steps of at most this: a follower at the tail that waited and still
# has nothing is asked no further (the leader is), so one step may cost a wait per replica.
POLL_STEP_S = 0.25


def keepalive_ms(stop_after_idle_s: float | None) -> int:
    """A subscription's keepalive interval: the default, or shorter when the subscription is to
    end after `stop_after_idle_s` without a record (a keepalive is when it notices)."""
    if stop_after_idle_s is None:
        return SUBSCRIBE_KEEPALIVE_MS
    return max(50, min(SUBSCRIBE_KEEPALIVE_MS, int(stop_after_idle_s * 500)))


def subscribe_address(addresses: Sequence[str], avoid: set[str]) -> str:
    """Where a subscription (re)connects: a replica at random, not one that just failed it
    (stalled, lagging or closed) while another is left."""
    fresh = [address for address in addresses if address not in avoid]
    return random.choice(fresh or list(addresses))


def now_ms() -> int:
    return int(time.time() * 1000)


def worth_retrying(error: FlotillaError, grace_until: float) -> bool:
    """A failure another attempt may cure: a retriable one, or a node answering that a topic this
    client knows does not exist, within `METADATA_GRACE_S` of the call (its metadata lags)."""
    if isinstance(error, RETRIABLE):
        return True
    return isinstance(error, TopicNotFound) and time.monotonic() < grace_until


# How long a replica behind a read's `min_high_watermark` may wait for its high watermark to get
# there (the node's READ_YOUR_WRITES_WAIT_S): the client's read deadline includes it.
RYW_WAIT_S = 0.5


class ReadYourWrites:
    """Which replica's answer a read takes: the first that has committed everything this client
    saw acknowledged (`wanted`) and, if it has nothing at `offset`, is the leader (a follower's
    high watermark may trail: another client's acknowledged record may be there already); a
    pinned read takes its replica's answer as it is. If no replica's answer qualifies, the most
    advanced one (`best`) is served: a read never fails for it."""

    __slots__ = ("best", "offset", "pinned", "wanted")

    def __init__(self, wanted: int, *, pinned: bool, offset: int = 0) -> None:
        self.wanted = wanted
        self.pinned = pinned
        self.offset = offset
        self.best: pb.FetchResponse | None = None

    def accept(self, response: pb.FetchResponse) -> bool:
        at_tail = response.high_watermark <= self.offset and not response.leader
        if self.pinned or (response.high_watermark >= self.wanted and not at_tail):
            return True
        if self.best is None or response.high_watermark > self.best.high_watermark:
            self.best = response
        return False


class Once:
    """Calls `callback` (if any) the first time it is called; `done` afterwards."""

    __slots__ = ("callback", "done")

    def __init__(self, callback: Callable[[], None] | None) -> None:
        self.callback = callback
        self.done = callback is None

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            assert self.callback is not None
            self.callback()


class ProduceRoute:
    """Where one batch goes next, across its retries (the policy both clients share).

    The known leader first. When a node fails to take the batch without naming the leader (it
    is down, or no leader is elected yet), the partition's other replicas are asked in turn at
    once — the survivors learn a new leader first and answer with its name; only when every
    replica has failed does the caller pause (jittered, doubling up to `MAX_BACKOFF_S`) and
    refresh metadata. Non-retriable errors raise; the deadline raises the last error seen."""

    def __init__(
        self,
        router: Router,
        topic: str,
        partition: int,
        timeout_s: float,
        abandoned: Callable[[], bool] | None = None,
        *,
        delayed: bool = False,
    ) -> None:
        self.router = router
        self.delayed = delayed  # a delayed batch: its sequences are the partition's delayed space
        self.batch = (0, 0)  # (producer id, first sequence) of the batch: `ProducerGap` needs it
        # says when an earlier batch of the same producer id failed for good: then a refusal as
        # out of order is final (the gap will never be filled), not a reason to wait
        self.abandoned = abandoned
        self.topic = topic
        self.partition = partition
        self.deadline = time.monotonic() + timeout_s
        self.grace_until = time.monotonic() + METADATA_GRACE_S
        self.backoff = 0.01
        self.last: FlotillaError | None = None
        self.pauses = 0
        # a node named another incarnation of the topic: metadata is refreshed before the next
        # attempt (the request then names the incarnation the cluster has now)
        self.stale = False
        self._failed: set[str] = set()
        self._hops = 0

    def remaining(self) -> float:
        """Seconds left before the deadline; raises the last error (or Timeout) once it passed."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise self.last or Timeout(f"produce to {self.topic}/{self.partition} timed out")
        return remaining

    def attempt_s(self) -> float:
        """The deadline of the next attempt: at most `ATTEMPT_S`, so a leader that stopped
        answering without closing its connections (a paused process) costs one attempt, not
        the whole timeout; the retry then goes to the other replicas. Raises like `remaining`."""
        return min(self.remaining(), ATTEMPT_S)

    def next_address(self) -> str | None:
        address = None
        if self.delayed:  # its timer log partition's leader, when known: no forward
            address = self.router.delayed_address(self.topic, self.partition)
        if address is None or address in self._failed:
            address = self.router.leader_address(self.topic, self.partition)
        if address is None or address in self._failed:
            address = self.router.other_replica(self.topic, self.partition, self._failed)
        return address

    def failed(self, address: str, error: FlotillaError) -> bool:
        """Notes a failed attempt; True when another address should be tried at once. Raises
        the error when it is final, or ProducerGap when the batch is to move to a new id."""
        if not worth_retrying(error, self.grace_until):
            raise error
        self.last = error
        if isinstance(error, SequenceInFlight):
            return False  # its own earlier attempt, still proposed: the same leader, after a pause
        if isinstance(error, UnknownProducer | OutOfOrder):
            producer_id, sequence = self.batch
            earliest = self.router.sequences.earliest(
                self.topic, self.partition, producer_id, sequence, delayed=self.delayed
            )
        if isinstance(error, UnknownProducer):
            # while an earlier batch of the id is on its way (it may be the one that makes the
            # id known, resent under it), wait; once none is, move to a new id at once
            if earliest:
                raise ProducerGap(error)
            return False
        if isinstance(error, OutOfOrder):
            if self.abandoned is not None and self.abandoned():
                raise Unavailable(
                    f"an earlier batch to {self.topic}/{self.partition} failed for good, so this "
                    "one cannot follow it under the same producer id; it was not written by this "
                    "attempt (send it again)"
                ) from None
            if earliest:  # every earlier batch settled, yet the leader lacks one: acknowledged
                raise ProducerGap(error)  # by a leader alone (acks=leader) and lost with it
            return False  # an earlier batch is still on its way: pause, then the same leader
        if isinstance(error, Overloaded):
            return False  # the leader is still the place: back off, then ask it again
        self.stale = self.stale or isinstance(error, StaleMetadata)
        if isinstance(error, NotLeader) and error.leader and self._hops < MAX_HINT_HOPS:
            self._hops += 1
            self.router.note_leader(self.topic, self.partition, error.leader)
            return True
        self.router.forget_leader(self.topic, self.partition)
        if self.delayed and address == self.router.delayed_address(self.topic, self.partition):
            log = self.router.timer_log(self.topic)
            if log is not None:
                self.router.forget_leader(log, self.partition)
        self._failed.add(address)
        return self.router.other_replica(self.topic, self.partition, self._failed) is not None

    def pause_s(self) -> float:
        """How long to wait before the next round of attempts."""
        self._failed.clear()
        self._hops = 0
        self.pauses += 1
        pause = min(self.backoff * random.uniform(0.5, 1.0), max(0.0, self.remaining()))
        overloaded = isinstance(self.last, Overloaded)
        self.backoff = min(
            self.backoff * 2, MAX_OVERLOAD_BACKOFF_S if overloaded else MAX_BACKOFF_S
        )
        return pause

    def refresh_due(self) -> bool:
        """Should the caller ask the cluster for fresh metadata before the next round? When
        the cached routes failed twice, unless the node refused for overload (it is the leader;
        more calls would only add to its load)."""
        return self.pauses > 1 and not isinstance(self.last, Overloaded)


# Every candidate refusing (or not resolving) for this long ends an admin call (`NoNodeAnswers`)
# instead of retrying for the client's whole timeout: a node restarting refuses for a moment,
# a cluster that is not there refuses for good.
UNREACHABLE_GIVE_UP_S = 2.0


def unreachable_reason(error: grpc.RpcError) -> str:
    """Why a call reached no server at all ("connection refused", "does not resolve"), or ""
    when a server may have seen it (it answered, or the call timed out on the way)."""
    code = error.code() if hasattr(error, "code") else None
    if code != grpc.StatusCode.UNAVAILABLE:
        return ""
    details = str((error.details() if hasattr(error, "details") else "") or "").lower()
    if "connection refused" in details:
        return "connection refused"
    if "errors resolving" in details or "dns resolution failed" in details:
        return "does not resolve"
    return _tls_reason(details)


# What grpc says when a TLS connection cannot be set up (its details, lower case), and what it
# means for the user. These reach no server's handler: the call never started.
TLS_FAILURES = (
    ("hostname verification", "TLS: the node's certificate does not name the host dialled "
     "(give tls_server_name, e.g. flotilla-node, or dial a name the certificate holds)"),
    ("certificate_verify_failed", "TLS: the node's certificate is not signed by tls_ca"),
    ("handshake failed", "TLS handshake failed"),
)  # fmt: skip
CLOSED_IN_SET_UP = (
    "closed while connecting: a TLS node closes a plaintext connection (give tls_ca), and "
    "a mutual-TLS node one without a client certificate its CA signed (give tls_cert, tls_key)"
)


def _tls_reason(details: str) -> str:
    for marker, reason in TLS_FAILURES:
        if marker in details:
            return reason
    if "failed to connect to all addresses" in details and "socket closed" in details:
        return CLOSED_IN_SET_UP
    return ""


class NoNodeAnswers:
    """Watches one call's rounds over the candidate addresses (`ClientCore.any_node`): once every
    address has failed without reaching a server in each round for `UNREACHABLE_GIVE_UP_S`,
    `round_done` returns the error to raise, naming every address and why."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}
        self._since: float | None = None
        self._tried: dict[str, str] = {}

    def failed(self, address: str, reason: str) -> None:
        """Notes a failed attempt; `reason`: `unreachable_reason` of its error."""
        self._reasons[address] = reason

    def round_done(self, addresses: Sequence[str], now: float) -> Unavailable | None:
        reasons, self._reasons = self._reasons, {}
        if not addresses or not all(reasons.get(a) for a in addresses):
            self._since = None
            return None
        self._tried.update(reasons)
        if self._since is None:
            self._since = now
        if now - self._since < UNREACHABLE_GIVE_UP_S:
            return None
        tried = ", ".join(f"{a} ({why})" for a, why in sorted(self._tried.items()))
        security = any(why.startswith("TLS") or why == CLOSED_IN_SET_UP for why in reasons.values())
        question = (
            "check the client's TLS settings (tls_ca, tls_cert, tls_key, tls_server_name)"
            if security
            else "is the cluster running, and are these its addresses?"
        )
        return Unavailable(
            f"no node answered; tried {tried} for {now - self._since:.1f} s: {question}"
        )


class Subscription:
    """A subscription's state and decisions; its driver runs the stream. Each (re)connection
    goes to a replica at random, not one that just failed it while another is left, from the
    offset after the last record delivered (nothing lost or repeated). A connection that ends
    (the node stops), stalls (nothing heard for `idle_s`) or fails retriably is left for another;
    once no record came for `stop_s` (None: never) the subscription ends."""

    def __init__(
        self,
        router: Router,
        topic: str,
        partition: int,
        offset: int,
        replica: str | None,
        idle_s: float,
        stop_s: float | None,
    ) -> None:
        self.router = router
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.replica = replica
        self.idle_s = idle_s
        self.stop_s = stop_s
        self.avoid: set[str] = set()
        self.quiet_since = time.monotonic()
        self.grace_until = time.monotonic() + METADATA_GRACE_S

    def connect(self) -> tuple[str, pb.FetchRequest]:
        """Where the next stream goes, and what it asks for."""
        address = subscribe_address(
            self.router.read_addresses(self.topic, self.partition, self.replica), self.avoid
        )
        request = pb.FetchRequest(
            topic=self.topic,
            partition=self.partition,
            offset=self.offset,
            max_wait_ms=keepalive_ms(self.stop_s),
            topic_uid=self.router.topic_uid(self.topic),
        )
        return address, request

    def records(self, response: pb.FetchResponse) -> list[Record]:
        """The records of one streamed answer, past those delivered; the position moves on."""
        records = decode_fetch(response, self.offset, 1 << 62, self.topic, self.partition)
        if records:
            self.offset = records[-1].offset + 1
        return records

    def delivered(self, response: pb.FetchResponse) -> bool:
        """Notes that the answer's records were delivered (the caller's time with them does not
        count as quiet); True when the subscription is to end."""
        if response.batches:
            self.avoid.clear()
            self.quiet_since = time.monotonic()
            return False
        return self.idle_for_good()

    def failed(self, error: FlotillaError) -> bool:
        """Raises a failure another replica cannot cure (a node answering that a topic does not
        exist is one only after `METADATA_GRACE_S`, as for reads: it may not have learned a topic
        just created); True when the driver is to refresh the topic's metadata before it
        connects again (a node named another incarnation)."""
        if not worth_retrying(error, self.grace_until):
            raise error from None
        return isinstance(error, StaleMetadata)

    def idle_for_good(self) -> bool:
        """Has no record come for `stop_s`?"""
        return self.stop_s is not None and time.monotonic() - self.quiet_since >= self.stop_s

    def left(self, address: str) -> bool:
        """The stream at `address` ended; True when the subscription ends too."""
        if self.idle_for_good():
            return True
        self.avoid.add(address)
        return False
