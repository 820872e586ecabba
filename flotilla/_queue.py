"""A queue member's state, with no I/O and no clock of its own, and the checks of its arguments.

    identity, session:  a `MemberState` (flotilla._member) of one topic and no partitions: the
                        member id and epoch the coordinator gave, the heartbeat interval, and the
                        session as the member's own clock sees it (lost after `session_timeout_ms`
                        without an acknowledged heartbeat, or when fenced)
    held leases:        (topic, partition, offset) -> (delivery_count, deadline_ms) of every
                        record handed to this member and not settled yet (the `LeaseBook`)

Leases belong to a session: when it ends (FENCED_MEMBER, or the member's clock says so) the
coordinator releases them, so the member forgets them all at once (`QueueState.lose`); settling
one of them later is answered locally with LeaseLost (nothing is sent for it). The member then
rejoins with id "" and epoch 0.

What a queue member sends: GroupHeartbeat with kind QUEUE, `topics` = [the topic] and the
group's `QueueOptions` on every join; QueueReceive and QueueSettle under its id and epoch.

Thread-safe: the sync queue heartbeats from its own thread while the caller receives and
settles; each method holds a lock for its few steps (no I/O under it).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from flotilla._checks import MAX_SESSION_TIMEOUT_MS, MIN_SESSION_TIMEOUT_MS, check_group
from flotilla._member import MemberState
from flotilla.errors import InvalidArgument
from flotilla.types import Delivery
from proto import flotilla_pb2 as pb

__all__ = [
    "MAX_SETTLEMENTS",
    "LeaseBook",
    "LeaseKey",
    "QueueSettings",
    "QueueState",
    "check_delay_ms",
    "check_deliveries",
    "check_invisible_ms",
    "check_max_records",
    "check_queue",
]

LeaseKey = tuple[str, int, int]  # (topic, partition, offset)
ORDERINGS = ("none", "key")
MIN_INVISIBLE_MS, MAX_INVISIBLE_MS = 1_000, 43_200_000  # QueueReceiveRequest.invisible_ms
MAX_DELIVERIES = 1_000  # QueueOptions.max_deliveries
MAX_DELAY_MS = 86_400_000  # QueueSettlement.delay_ms
MAX_RECORDS = 10_000  # QueueReceiveRequest.max_records
MAX_SETTLEMENTS = 10_000  # QueueSettleRequest.settlements, per call
MAX_IN_FLIGHT = 100_000  # QueueOptions.max_in_flight
MAX_BACKOFF_STEPS = 16
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")


def _int_in(name: str, value: object, low: int, high: int, default: str) -> int:
    if type(value) is not int or not low <= value <= high:
        raise InvalidArgument(
            f"{name}={value!r} is invalid: use an integer from {low} to {high} ({default})"
        )
    return value


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's arguments, checked (`check_queue`)."""

    group: str
    topic: str
    invisible_ms: int
    max_deliveries: int
    session_timeout_ms: int
    dead_letter_topic: str | None
    ordering: str
    backoff_ms: tuple[int, ...]  # () : the coordinator's default (1 s, 5 s, 30 s, 2 min)
    max_in_flight: int  # 0: the coordinator's default (2000)

    def options(self) -> pb.QueueOptions:
        """The group's options as a join carries them."""
        return pb.QueueOptions(
            max_deliveries=self.max_deliveries,
            dead_letter_topic=self.dead_letter_topic or "",
            ordering=self.ordering,
            backoff_ms=list(self.backoff_ms),
            max_in_flight=self.max_in_flight,
        )


def check_topic_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidArgument(
            f"{what}={name!r} is invalid: use a topic name of 1 to 200 characters of A-Z, a-z, "
            "0-9, '.', '_', '-' (not '.' or '..')"
        )
    return name


def check_invisible_ms(invisible_ms: object) -> int:
    return _int_in(
        "invisible_ms",
        invisible_ms,
        MIN_INVISIBLE_MS,
        MAX_INVISIBLE_MS,
        "milliseconds, 12 h at most",
    )


def check_delay_ms(delay_ms: object) -> int:
    return _int_in("delay_ms", delay_ms, 0, MAX_DELAY_MS, "milliseconds, 24 h at most; default 0")


def check_max_records(max_records: object) -> int:
    return _int_in("max_records", max_records, 1, MAX_RECORDS, "default 100")


def check_queue(
    group: object,
    topic: object,
    invisible_ms: object,
    max_deliveries: object,
    session_timeout_ms: object,
    dead_letter_topic: object,
    ordering: object,
    backoff_ms: object,
    max_in_flight: object,
) -> QueueSettings:
    """`Client.queue`'s arguments, checked against the coordinator's ranges (the proto's
    comments): InvalidArgument names the first bad one; nothing is sent."""
    check_group(group)
    check_topic_name("topic", topic)
    check_invisible_ms(invisible_ms)
    _int_in("max_deliveries", max_deliveries, 1, MAX_DELIVERIES, "default 5")
    _int_in(
        "session_timeout_ms",
        session_timeout_ms,
        MIN_SESSION_TIMEOUT_MS,
        MAX_SESSION_TIMEOUT_MS,
        "milliseconds; default 10000",
    )
    if dead_letter_topic is not None:
        dead_letter_topic = check_topic_name("dead_letter_topic", dead_letter_topic)
        if dead_letter_topic == topic or dead_letter_topic.startswith("__"):
            raise InvalidArgument(
                f"dead_letter_topic={dead_letter_topic!r} is invalid: name a topic other than "
                f"the source {topic!r} and not one of the cluster's own ('__...')"
            )
    if ordering not in ORDERINGS:
        raise InvalidArgument(
            f"ordering={ordering!r} is invalid: use 'none' (any order) or 'key' (a record is not "
            "handed out while an earlier record with the same key is in flight)"
        )
    steps: tuple[int, ...] = ()
    if backoff_ms is not None:
        if isinstance(backoff_ms, str | bytes) or not isinstance(backoff_ms, Sequence):
            raise InvalidArgument(
                f"backoff_ms={backoff_ms!r} is invalid: use None (1 s, 5 s, 30 s, 2 min) or a "
                f"list of 1 to {MAX_BACKOFF_STEPS} delays in milliseconds"
            )
        if not 1 <= len(backoff_ms) <= MAX_BACKOFF_STEPS:
            raise InvalidArgument(
                f"backoff_ms has {len(backoff_ms)} delays: give 1 to {MAX_BACKOFF_STEPS}"
            )
        steps = tuple(
            _int_in("backoff_ms[]", step, 0, MAX_DELAY_MS, "milliseconds") for step in backoff_ms
        )
    if max_in_flight is not None:
        _int_in("max_in_flight", max_in_flight, 1, MAX_IN_FLIGHT, "per partition; default 2000")
    assert isinstance(group, str) and isinstance(topic, str)
    assert type(invisible_ms) is int and type(max_deliveries) is int
    assert type(session_timeout_ms) is int and isinstance(ordering, str)
    return QueueSettings(
        group,
        topic,
        invisible_ms,
        max_deliveries,
        session_timeout_ms,
        dead_letter_topic if isinstance(dead_letter_topic, str) else None,
        ordering,
        steps,
        max_in_flight if type(max_in_flight) is int else 0,
    )


def check_deliveries(deliveries: object) -> list[Delivery]:
    """One Delivery or a list of them; InvalidArgument naming anything else."""
    if isinstance(deliveries, Delivery):
        return [deliveries]
    if isinstance(deliveries, list | tuple):
        for item in deliveries:
            if not isinstance(item, Delivery):
                raise InvalidArgument(
                    f"{item!r} is not a Delivery: give one Delivery or a list of those "
                    "receive() returned"
                )
        return list(deliveries)
    raise InvalidArgument(
        f"{deliveries!r} is not a Delivery: give one Delivery or a list of those receive() returned"
    )


def key_of(d: Delivery) -> LeaseKey:
    return (d.topic, d.partition, d.offset)


class LeaseBook:
    """The leases this member holds: key -> (delivery_count, deadline_ms)."""

    def __init__(self) -> None:
        self._held: dict[LeaseKey, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def add(self, leases: Iterable[pb.QueueLease]) -> None:
        with self._lock:
            for lease in leases:
                key = (lease.topic, lease.partition, lease.offset)
                self._held[key] = (lease.delivery_count, lease.deadline_ms)

    def split(self, deliveries: Sequence[Delivery]) -> tuple[list[Delivery], list[Delivery]]:
        """(those this member holds under the same delivery count, the others). A delivery
        given twice in one call is settled once."""
        held: list[Delivery] = []
        others: list[Delivery] = []
        seen: set[LeaseKey] = set()
        with self._lock:
            for d in deliveries:
                key = key_of(d)
                if key in seen:
                    continue
                seen.add(key)
                entry = self._held.get(key)
                (held if entry is not None and entry[0] == d.delivery_count else others).append(d)
        return held, others

    def forget(self, keys: Iterable[tuple[LeaseKey, int]]) -> None:
        """Forgets the leases (key, delivery_count) named, if still held under that count."""
        with self._lock:
            for key, count in keys:
                entry = self._held.get(key)
                if entry is not None and entry[0] == count:
                    del self._held[key]

    def extended(self, key: LeaseKey, count: int, deadline_ms: int) -> None:
        with self._lock:
            if self._held.get(key, (None,))[0] == count:
                self._held[key] = (count, deadline_ms)

    def deadline_ms(self, key: LeaseKey) -> int | None:
        with self._lock:
            entry = self._held.get(key)
            return None if entry is None else entry[1]

    def held(self) -> list[tuple[LeaseKey, int]]:
        """Every lease held: (key, delivery_count), in key order."""
        with self._lock:
            return sorted((key, entry[0]) for key, entry in self._held.items())

    def clear(self) -> None:
        with self._lock:
            self._held.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


class QueueState:
    """One queue member: its settings, its group membership and the leases it holds."""

    def __init__(self, settings: QueueSettings, now: float) -> None:
        self.settings = settings
        self.group = settings.group
        self.topic = settings.topic
        self.member = MemberState(
            settings.group,
            (settings.topic,),
            session_timeout_ms=settings.session_timeout_ms,
            instance_id=None,
            auto_commit_interval_ms=3_600_000,  # a queue commits nothing
            now=now,
        )
        self.book = LeaseBook()
        self.closed = False

    # -- membership --------------------------------------------------------------------------------
    def needs_join(self) -> bool:
        """True while the member has no id, or its session is lost (it rejoins first)."""
        member_id, _ = self.member.identity()
        return not self.closed and (not member_id or self.member.lost)

    def heartbeat_request(self) -> pb.GroupHeartbeatRequest | None:
        """The next heartbeat: a join (with the queue's options) when the member has no id or
        its session was lost (its leases are forgotten first); None once closed."""
        if self.closed:
            return None
        if self.member.lost:
            self.book.clear()
            self.member.rejoin()
        request = self.member.heartbeat_request()
        if request is None:
            return None
        request.kind = pb.GROUP_KIND_QUEUE
        if request.topics:  # a join (or the first heartbeat after it): the options go too
            request.queue.CopyFrom(self.settings.options())
        return request

    def leave_request(self) -> pb.GroupHeartbeatRequest | None:
        """The heartbeat that leaves the group (epoch -1); None if the member never joined."""
        request = self.member.leave_request()
        self.closed = self.member.closed = True
        if request is not None:
            request.kind = pb.GROUP_KIND_QUEUE
        return request

    def lose(self) -> None:
        """The session is over (fenced): every lease is forgotten; the member rejoins."""
        self.member.fenced()
        self.book.clear()

    def check_session(self, now: float) -> bool:
        """Has the session ended by the member's own clock? Its leases are then forgotten."""
        if self.member.check_session(now):
            self.book.clear()
            return True
        return False

    def identity(self) -> tuple[str, int]:
        return self.member.identity()

    # -- requests ----------------------------------------------------------------------------------
    def receive_request(
        self, member_id: str, epoch: int, max_records: int, wait_ms: int
    ) -> pb.QueueReceiveRequest:
        return pb.QueueReceiveRequest(
            group=self.group,
            member_id=member_id,
            member_epoch=epoch,
            topic=self.topic,
            max_records=max_records,
            invisible_ms=self.settings.invisible_ms,
            wait_ms=wait_ms,
        )

    def settle_requests(
        self,
        deliveries: Sequence[Delivery],
        action: pb.SettleAction,
        *,
        delay_ms: int = 0,
        invisible_ms: int = 0,
    ) -> list[pb.QueueSettleRequest]:
        """The QueueSettle calls that settle `deliveries` (held ones), MAX_SETTLEMENTS each."""
        member_id, epoch = self.identity()
        requests = []
        for start in range(0, len(deliveries), MAX_SETTLEMENTS):
            chunk = deliveries[start : start + MAX_SETTLEMENTS]
            requests.append(
                pb.QueueSettleRequest(
                    group=self.group,
                    member_id=member_id,
                    member_epoch=epoch,
                    settlements=[
                        pb.QueueSettlement(
                            topic=d.topic,
                            partition=d.partition,
                            offset=d.offset,
                            delivery_count=d.delivery_count,
                            action=action,
                            delay_ms=delay_ms,
                            invisible_ms=invisible_ms,
                        )
                        for d in chunk
                    ],
                )
            )
        return requests


def runs(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted offsets as contiguous runs [start, end): one read each."""
    out: list[tuple[int, int]] = []
    for offset in sorted(set(offsets)):
        if out and out[-1][1] == offset:
            out[-1] = (out[-1][0], offset + 1)
        else:
            out.append((offset, offset + 1))
    return out
