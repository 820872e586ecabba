"""ProduceRoute: where a batch goes next across retries (pure; both clients use it)."""

from __future__ import annotations

import grpc
import pytest

from flotilla._core import ClientCore, Failed, Rpc, Sleep
from flotilla._plans import MAX_HINT_HOPS, MAX_OVERLOAD_BACKOFF_S, ProducerGap, ProduceRoute
from flotilla._router import Router
from flotilla.errors import (
    InvalidArgument,
    NotLeader,
    OutOfOrder,
    Overloaded,
    SequenceInFlight,
    TopicNotFound,
    Unavailable,
    UnknownProducer,
    from_rpc_error,
)
from proto import flotilla_pb2 as pb
from proto.reasons import REASON_KEY, SEQUENCE_IN_FLIGHT
from proto.records import peek_producer

ADDRESS = {"n1": "127.0.0.1:1", "n2": "127.0.0.2:1", "n3": "127.0.0.3:1"}


def _router(leader: str = "n1") -> Router:
    router = Router(["127.0.0.1:1"])
    router.absorb(
        pb.MetadataResponse(
            members=[pb.Member(id=i, address=a, state=pb.ALIVE) for i, a in ADDRESS.items()],
            topics=[
                pb.TopicInfo(
                    name="t",
                    partitions=[pb.PartitionInfo(index=0, leader=leader, replicas=list(ADDRESS))],
                )
            ],
        )
    )
    return router


def test_a_dead_leader_sends_the_batch_to_the_survivors_at_once() -> None:
    route = ProduceRoute(_router("n1"), "t", 0, timeout_s=10)
    assert route.next_address() == ADDRESS["n1"]
    assert route.failed(ADDRESS["n1"], Unavailable("connection refused"))
    assert route.next_address() == ADDRESS["n2"]
    assert route.failed(ADDRESS["n2"], Unavailable("no leader is known yet"))
    assert route.next_address() == ADDRESS["n3"]
    assert not route.failed(ADDRESS["n3"], Unavailable("no leader is known yet"))
    assert 0 <= route.pause_s() <= 0.05 and route.pauses == 1
    assert route.next_address() in ADDRESS.values()  # after a pause, every replica again


def test_an_overloaded_leader_is_asked_again_after_a_growing_backoff() -> None:
    """Overload is no reason to leave the leader (the others would only send the batch back)
    nor to ask the cluster for metadata; the pauses grow past the failover pace, jittered, up
    to MAX_OVERLOAD_BACKOFF_S."""
    route = ProduceRoute(_router("n1"), "t", 0, timeout_s=60)
    pauses = []
    for _ in range(12):
        assert route.next_address() == ADDRESS["n1"]
        assert not route.failed(ADDRESS["n1"], Overloaded("max_inflight_produce=2"))
        assert not route.refresh_due()
        pauses.append(route.pause_s())
    assert max(pauses) > 0.05, pauses
    assert all(p <= MAX_OVERLOAD_BACKOFF_S for p in pauses), pauses


def test_a_leader_hint_is_followed_but_not_forever() -> None:
    route = ProduceRoute(_router("n1"), "t", 0, timeout_s=10)
    for _ in range(MAX_HINT_HOPS):
        assert route.failed(
            route.next_address() or "", NotLeader("moved", leader="n2=" + ADDRESS["n2"])
        )
        assert route.next_address() == ADDRESS["n2"]
    # views that bounce between stale leaders: stop hopping, try the others, then pause
    route.failed(ADDRESS["n2"], NotLeader("moved", leader="n1=" + ADDRESS["n1"]))
    assert route.next_address() != ADDRESS["n2"]


def test_errors_that_a_retry_cannot_cure_raise_at_once() -> None:
    route = ProduceRoute(_router(), "t", 0, timeout_s=10)
    with pytest.raises(InvalidArgument):
        route.failed(ADDRESS["n1"], InvalidArgument("bad batch"))
    assert route.failed(ADDRESS["n1"], TopicNotFound("lagging node"))  # within the grace
    route.grace_until = 0
    with pytest.raises(TopicNotFound):
        route.failed(ADDRESS["n2"], TopicNotFound("gone"))


def test_the_deadline_raises_the_last_error() -> None:
    route = ProduceRoute(_router(), "t", 0, timeout_s=10)
    route.failed(ADDRESS["n1"], Unavailable("down"))
    route.deadline = 0
    with pytest.raises(Unavailable, match="down"):
        route.remaining()


def test_an_early_batch_waits_unless_the_one_before_it_failed_for_good() -> None:
    failed: list[bool] = [False]
    route = ProduceRoute(_router("n1"), "t", 0, timeout_s=10, abandoned=lambda: failed[0])
    assert not route.failed(ADDRESS["n1"], OutOfOrder("102 comes next"))  # pause, same leader
    assert route.next_address() == ADDRESS["n1"]
    failed[0] = True
    with pytest.raises(Unavailable, match="failed for good"):
        route.failed(ADDRESS["n1"], OutOfOrder("102 comes next"))


def test_a_lagging_node_s_metadata_never_takes_added_partitions_away() -> None:
    def topic(uid: str, partitions: int, retention_ms: int = 0) -> pb.MetadataResponse:
        parts = [pb.PartitionInfo(index=i, replicas=["n1"]) for i in range(partitions)]
        info = pb.TopicInfo(name="t", partitions=parts, uid=uid, retention_ms=retention_ms)
        return pb.MetadataResponse(topics=[info])

    router = Router(["127.0.0.1:1"])
    router.absorb(topic("u1", 3))  # as alter_topic's answer
    router.absorb(topic("u1", 1, retention_ms=5))  # a node that has not seen it yet
    info = router.topic("t")
    assert info is not None and len(info.partitions) == 3
    assert router.partition_for("t", None, 2) == 2
    router.absorb(topic("u2", 1))  # deleted and created again: the new incarnation's count
    info = router.topic("t")
    assert info is not None and (len(info.partitions), info.uid) == (1, "u2")


def test_a_batch_the_leader_will_never_write_moves_only_when_it_is_the_earliest() -> None:
    """UNKNOWN_PRODUCER_ID, or out of order with nothing earlier still on its way (acks=leader:
    an acknowledged batch lost with its leader): move to a new id (ProducerGap), at once. While
    an earlier batch is still on its way, wait for it instead."""
    router = _router()
    first = router.sequences.take("t", 0, 3)
    second = router.sequences.take("t", 0, 3)
    for error in (UnknownProducer("unknown"), OutOfOrder("gap")):
        route = ProduceRoute(router, "t", 0, timeout_s=10)
        route.batch = second
        assert not route.failed(ADDRESS["n1"], error)  # the first is on its way: wait
    router.sequences.settled("t", 0, *first)
    for error in (UnknownProducer("unknown"), OutOfOrder("gap")):
        route = ProduceRoute(router, "t", 0, timeout_s=10)
        route.batch = second
        with pytest.raises(ProducerGap):
            route.failed(ADDRESS["n1"], error)
    route.batch = (12345, 0)  # a batch encoded elsewhere: nothing known of what came before
    assert not route.failed(ADDRESS["n1"], UnknownProducer("unknown"))


def test_a_batch_whose_earlier_attempt_is_in_flight_is_sent_again_never_moved() -> None:
    """ABORTED with SEQUENCE_IN_FLIGHT: this very batch's earlier attempt (it ended on its
    deadline) is still proposed at the leader. Sent again under the same id and sequence, it is
    answered with the first copy's offsets; moved to a new id (as a gap with nothing earlier on
    its way would be), it would be written twice."""
    router = _router()
    batch = router.sequences.take("t", 0, 3)  # the earliest: nothing before it on its way
    error = from_rpc_error(_aborted(SEQUENCE_IN_FLIGHT))
    assert isinstance(error, SequenceInFlight) and isinstance(error, OutOfOrder)
    route = ProduceRoute(router, "t", 0, timeout_s=10)
    route.batch = batch
    assert not route.failed(ADDRESS["n1"], error)  # pause, then the same leader: no ProducerGap
    assert type(from_rpc_error(_aborted(""))) is OutOfOrder  # a gap: as before


class _Aborted(grpc.RpcError):  # type: ignore[misc]
    """ABORTED, with `reason` in the trailing metadata ("": none), as a node answers."""

    def __init__(self, reason: str) -> None:
        self.trailing = ((REASON_KEY, reason),) if reason else ()

    code = staticmethod(lambda: grpc.StatusCode.ABORTED)
    details = staticmethod(lambda: "refused")

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.trailing


def _aborted(reason: str) -> grpc.RpcError:
    return _Aborted(reason)


def test_moving_to_a_new_id_keeps_the_order_of_every_batch_in_flight() -> None:
    sequences = Router(["127.0.0.1:1"]).sequences
    a, b, c = (sequences.take("t", 0, 3) for _ in range(3))
    producer = a[0]
    assert [a, b, c] == [(producer, 0), (producer, 3), (producer, 6)]
    sequences.settled("t", 0, *a)  # acknowledged; then the partition forgot the producer
    moved_b = sequences.move("t", 0, *b)
    assert moved_b is not None and moved_b[1] == 0 and moved_b[0] != producer
    sequences.settled("t", 0, *moved_b)  # written under the new id
    d = sequences.take("t", 0, 3)  # taken after the move: after c under the new id
    assert d == (moved_b[0], 6)
    # c, still under the old id, was taken before d: d is not the earliest, whatever its id
    # (else d, refused as out of order, would move ahead of c)
    assert not sequences.earliest("t", 0, *d)
    assert sequences.move("t", 0, *c) == (moved_b[0], 3)
    assert not sequences.earliest("t", 0, *d)
    sequences.settled("t", 0, moved_b[0], 3)
    assert sequences.earliest("t", 0, *d)


def test_a_producer_id_reset_by_a_failure_is_not_moved() -> None:
    """A batch of an id that failed for good (reset) fails too, as ever: it may follow a batch
    whose outcome is unknown, so resending it under a new id could reorder them."""
    sequences = Router(["127.0.0.1:1"]).sequences
    a, b = sequences.take("t", 0, 1), sequences.take("t", 0, 1)
    sequences.reset("t", 0, a[0])
    sequences.settled("t", 0, *a)
    assert sequences.move("t", 0, *b) is None


def test_the_batches_behind_a_refused_one_move_to_a_new_id_with_no_gap() -> None:
    """A batch refused and written nowhere, once the earliest outstanding: the batches taken
    after it move to a new id from sequence 0, in order, and so do those taken later; one of
    them refused before it moved is skipped among the new id's sequences."""
    sequences = Router(["127.0.0.1:1"]).sequences
    a, b, c, d = (sequences.take("t", 0, 2) for _ in range(4))
    producer = a[0]
    assert sequences.behind("t", 0, *b)  # a is still on its way
    sequences.settled("t", 0, *a)
    assert not sequences.behind("t", 0, *b)
    assert sequences.skip("t", 0, *b, 2)  # b refused: c and d follow a under a new id
    sequences.settled("t", 0, *b)
    moved_c = sequences.move("t", 0, *c)
    assert moved_c is not None and moved_c[0] != producer and moved_c[1] == 0
    e = sequences.take("t", 0, 2)  # taken after the skip: after d under the new id
    assert e == (moved_c[0], 4)
    sequences.settled("t", 0, *moved_c)
    assert sequences.skip("t", 0, *d, 2)  # refused before it moved: its place is (new, 2)
    sequences.settled("t", 0, *d)
    moved_e = sequences.move("t", 0, *e)
    assert moved_e is not None and moved_e[0] not in (producer, moved_c[0]) and moved_e[1] == 0
    assert sequences.take("t", 0, 1) == (moved_e[0], 2)


def test_a_refused_batch_of_a_reset_id_moves_nothing() -> None:
    """An id reset by a failure whose outcome is unknown stays retired: a refusal of one of its
    batches moves nothing (the batches behind an unknown outcome fail, as ever); a batch encoded
    elsewhere is never behind anything known here."""
    sequences = Router(["127.0.0.1:1"]).sequences
    a, b, c = (sequences.take("t", 0, 1) for _ in range(3))
    sequences.reset("t", 0, a[0])
    sequences.settled("t", 0, *a)
    assert not sequences.skip("t", 0, *b, 1)
    assert sequences.move("t", 0, *c) is None
    assert not sequences.behind("t", 0, 12345, 0)


def test_a_refused_batch_waits_for_the_batches_before_it_then_the_later_ones_skip_it() -> None:
    """The send plan of a refused batch: while a batch taken before it is on its way (whose
    outcome may still be unknown) the later ones may not move past it, so it waits; once that
    one settled, it skips its sequences and raises the refusal."""
    core = ClientCore(["127.0.0.1:1"], timeout_s=10, acks="all")
    core.router = _router()
    first, second, third = (
        core.router.encode("t", 0, [(None, v, None, 0)]) for v in (b"a", b"b", b"c")
    )
    plan = core.send_batch("t", 0, second)
    assert isinstance(next(plan), Rpc)
    assert isinstance(plan.send(Failed(InvalidArgument("bad batch"), "")), Sleep)
    assert isinstance(plan.send(None), Sleep)  # the first is still on its way
    core.router.sequences.settled("t", 0, *peek_producer(first))
    with pytest.raises(InvalidArgument, match="bad batch"):
        plan.send(None)
    producer = peek_producer(first)[0]
    moved = core.router.sequences.move("t", 0, *peek_producer(third))
    assert moved is not None and moved[0] != producer and moved[1] == 0


def test_a_delayed_batch_goes_to_its_timer_log_s_leader_and_back_to_the_source_s_if_it_fails() -> (
    None
):
    """A delayed batch goes first to the leader of its timer log partition (it appends it with
    no forward), when one is known; if that node fails it, the source partition's replicas
    are asked as before, and the stale timer leader is forgotten."""
    router = _router("n1")
    route = ProduceRoute(router, "t", 0, timeout_s=10, delayed=True)
    assert route.next_address() == ADDRESS["n1"]  # no timer log known: the source's leader
    uid = "u1"
    log = f"__timers.{uid}"
    router.absorb(
        pb.MetadataResponse(
            topics=[
                pb.TopicInfo(
                    name="t", uid=uid,
                    partitions=[pb.PartitionInfo(index=0, leader="n1", replicas=list(ADDRESS))],
                ),
                pb.TopicInfo(
                    name=log, uid="u2",
                    partitions=[pb.PartitionInfo(index=0, leader="n3", replicas=list(ADDRESS))],
                ),
            ]
        )
    )  # fmt: skip
    assert router.timer_log("t") == log and router.timer_log_to_learn("t") == log
    assert router.timer_log_to_learn("t") is None  # asked just now
    assert route.next_address() == ADDRESS["n3"]
    assert ProduceRoute(router, "t", 0, timeout_s=10).next_address() == ADDRESS["n1"]  # ordinary
    assert route.failed(ADDRESS["n3"], Unavailable("connection refused"))
    assert route.next_address() in (ADDRESS["n1"], ADDRESS["n2"])
    assert router.delayed_address("t", 0) is None
