"""Delayed delivery in the SDK and CLI (issue 26), the parts with no I/O: the arguments, the
header every record of a delayed batch carries, the produce request, the sequence spaces, the
batching producer's grouping by due time, the topic settings and the CLI's arguments.

The client core runs under a scripted driver (as in test_client_surface_core.py); the batching
producer sends through a recording `Sender` (its seam: the real client is the end-to-end test's,
tests/flotilla/test_delayed_e2e.py)."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable

import pytest
from harness import drive

import timers.types as timer_types
from flotilla import _delays
from flotilla._checks import alter_request, create_request
from flotilla._core import ClientCore, Failed, Rpc, Sleep
from flotilla._plans import ProducerGap, ProduceRoute
from flotilla._router import Router, topic_info
from flotilla.cli import main
from flotilla.cli_format import at_time, delay, duration_ms, duration_text, max_delay
from flotilla.errors import FlotillaError, InvalidArgument, NotLeader, UnknownProducer
from flotilla.producer import Producer
from flotilla.types import RecordMetadata, TopicInfo
from proto import flotilla_pb2 as pb
from proto.records import decode_batch, peek_producer

HEADER = "flotilla-deliver-at"
ADDRESS = {"n1": "127.0.0.1:1", "n2": "127.0.0.2:1", "n3": "127.0.0.3:1"}
METADATA = pb.MetadataResponse(
    members=[pb.Member(id=i, address=a, state=pb.ALIVE) for i, a in ADDRESS.items()],
    topics=[
        pb.TopicInfo(
            name="t",
            uid="u1",
            max_delay_ms=7 * 86_400_000,
            partitions=[
                pb.PartitionInfo(index=0, leader="n1", replicas=list(ADDRESS), pending_timers=5),
                pb.PartitionInfo(index=1, leader="n2", replicas=list(ADDRESS)),
            ],
        )
    ],
)


def core() -> ClientCore:
    client = ClientCore(list(ADDRESS.values()), timeout_s=10, acks="all")
    client.router.absorb(METADATA)
    return client


def accepted(rpc: Rpc) -> pb.ProduceResponse | pb.MetadataResponse:
    """A node of 0.4.0 on: a delayed batch answered with its due time (its base: timer log);
    the client's question where the timer log is led, after its first delayed batch, with the
    topic's metadata (its timer log not known yet)."""
    request = rpc.request
    if isinstance(request, pb.MetadataRequest):
        return METADATA
    assert isinstance(request, pb.ProduceRequest)
    return pb.ProduceResponse(base_offset=40, record_count=1, deliver_at_ms=request.deliver_at_ms)


def produces(steps: list[Rpc | Sleep]) -> list[pb.ProduceRequest]:
    return [s.request for s in steps if isinstance(s, Rpc) and s.method == "Produce"]


# -- the limits and the arguments ----------------------------------------------------------------
def test_the_sdk_limits_are_the_timer_cores() -> None:
    assert _delays.DELIVER_AT_HEADER == timer_types.DELIVER_AT_HEADER == HEADER
    assert _delays.DEFAULT_MAX_DELAY_MS == timer_types.DEFAULT_MAX_DELAY_MS
    assert _delays.MIN_MAX_DELAY_MS == timer_types.MIN_MAX_DELAY_MS
    assert _delays.MAX_MAX_DELAY_MS == timer_types.MAX_MAX_DELAY_MS
    assert timer_types.timer_topic("u1") == _delays.TIMER_TOPIC_PREFIX + "u1"


def test_due_time_from_a_delay_or_a_time_and_each_bad_argument_named() -> None:
    assert _delays.due_ms(None, None, 1000) is None
    assert _delays.due_ms(0, None, 1000) == 1000
    assert _delays.due_ms(60_000, None, 1000) == 61_000
    assert _delays.due_ms(None, 5_000, 1000) == 5_000
    bad: list[tuple[object, object, str]] = [
        (10, 5_000, "at most one"),
        (-1, None, "delay_ms=-1"),
        (1.5, None, "delay_ms=1.5"),
        (True, None, "delay_ms=True"),
        (_delays.MAX_MAX_DELAY_MS + 1, None, "365 days"),
        (None, 0, "deliver_at_ms=0"),
        (None, -5, "deliver_at_ms=-5"),
        (None, 1.7e12, "deliver_at_ms=1700000000000.0"),
        (None, "soon", "deliver_at_ms='soon'"),
        (None, 1 << 63, "epoch"),
    ]
    for delay_ms, deliver_at_ms, named in bad:
        with pytest.raises(InvalidArgument, match=named):
            _delays.due_ms(delay_ms, deliver_at_ms, 1000)


def test_the_header_goes_first_and_the_caller_may_not_set_it() -> None:
    assert _delays.deliver_at_header(1234, [("a", b"1")]) == [(HEADER, b"1234"), ("a", b"1")]
    assert _delays.deliver_at_header(7, None) == [(HEADER, b"7")]
    with pytest.raises(InvalidArgument, match="set by the SDK"):
        _delays.deliver_at_header(7, [(HEADER, b"8")])


# -- produce ---------------------------------------------------------------------------------------
def test_a_delayed_produce_carries_the_header_and_the_due_time_and_has_no_offset() -> None:
    client = core()
    before = int(time.time() * 1000)
    value, steps = drive(
        client.produce("t", b"v", None, 0, [("h", b"x")], delay_ms=60_000), accepted
    )
    after = int(time.time() * 1000)
    (request,) = produces(steps)
    assert before + 60_000 <= request.deliver_at_ms <= after + 60_000
    assert value == RecordMetadata("t", 0, None, request.deliver_at_ms)
    (record,) = decode_batch(request.batch, 0)
    assert record.headers == ((HEADER, str(request.deliver_at_ms).encode()), ("h", b"x"))
    assert client.router.written_to("t", 0) == 0  # a timer log's place is no read position

    value, steps = drive(client.produce("t", b"w", None, 1, None, deliver_at_ms=123), accepted)
    (request,) = produces(steps)
    assert request.deliver_at_ms == 123 and request.partition == 1
    assert value == RecordMetadata("t", 1, None, 123)
    assert decode_batch(request.batch, 0)[0].headers == ((HEADER, b"123"),)


def test_an_ordinary_produce_is_unchanged() -> None:
    value, steps = drive(
        core().produce("t", b"v", None, 0, None),
        lambda rpc: pb.ProduceResponse(base_offset=9, record_count=1),
    )
    (request,) = produces(steps)
    assert request.deliver_at_ms == 0 and decode_batch(request.batch, 0)[0].headers == ()
    assert value == RecordMetadata("t", 0, 9) and value.deliver_at_ms is None


def test_bad_delay_arguments_send_nothing() -> None:
    for kwargs, named in (
        ({"delay_ms": 1, "deliver_at_ms": 2}, "at most one"),
        ({"delay_ms": -1}, "delay_ms=-1"),
        ({"deliver_at_ms": 0}, "deliver_at_ms=0"),
    ):
        asked: list[Rpc] = []
        with pytest.raises(InvalidArgument, match=named):
            drive(core().produce("t", b"v", None, 0, None, **kwargs), asked.append)
        assert asked == []
    asked = []
    with pytest.raises(InvalidArgument, match="set by the SDK"):
        drive(core().produce("t", b"v", None, 0, [(HEADER, b"1")], delay_ms=5), asked.append)
    assert asked == []


def test_delayed_and_ordinary_batches_are_sequence_spaces_of_their_own() -> None:
    client = core()
    ordinary = lambda rpc: pb.ProduceResponse(base_offset=0, record_count=1)  # noqa: E731
    sent: list[tuple[int, int]] = []
    for delayed in (False, True, True, False, True):
        _, steps = drive(
            client.produce("t", b"v", None, 0, None, delay_ms=1000 if delayed else None),
            accepted if delayed else ordinary,
        )
        sent.append(peek_producer(produces(steps)[0].batch))
    plain_id, delayed_id = sent[0][0], sent[1][0]
    assert plain_id != delayed_id
    assert [sequence for _, sequence in sent] == [0, 0, 1, 1, 2]
    assert [producer for producer, _ in sent] == [
        plain_id, delayed_id, delayed_id, plain_id, delayed_id,
    ]  # fmt: skip


def test_unknown_producer_on_a_delayed_batch_moves_it_within_the_delayed_space() -> None:
    """The UNKNOWN_PRODUCER_ID path as for ordinary batches: the timer log forgot the id, the
    batch is the delayed space's earliest, so it moves to a new id at sequence 0 — even with an
    ordinary batch of the partition still on its way (another space)."""
    router = Router(list(ADDRESS.values()))
    router.absorb(METADATA)
    router.sequences.take("t", 0, 1)  # an ordinary batch, unsettled
    batch = router.sequences.take("t", 0, 1, delayed=True)
    route = ProduceRoute(router, "t", 0, 10, delayed=True)
    route.batch = batch
    with pytest.raises(ProducerGap):
        route.failed(ADDRESS["n1"], UnknownProducer("unknown producer id"))
    moved = router.sequences.move("t", 0, *batch, delayed=True)
    assert moved is not None and moved[1] == 0 and moved[0] != batch[0]
    assert router.sequences.next[("t", 0, False)][1] == 1  # the ordinary space untouched


def test_a_retry_of_a_delayed_batch_resends_the_same_bytes_and_due_time() -> None:
    calls = 0

    def answer(rpc: Rpc) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:  # the leader moved: the hint is followed with the very same request
            return Failed(NotLeader("not leader", "n2=127.0.0.2:1"), "")
        return accepted(rpc)

    value, steps = drive(core().produce("t", b"v", None, 0, None, delay_ms=5000), answer)
    first, second = produces(steps)
    assert first.batch == second.batch and first.deliver_at_ms == second.deliver_at_ms
    assert isinstance(value, RecordMetadata) and value.deliver_at_ms == first.deliver_at_ms


def test_a_node_that_wrote_a_delayed_batch_at_once_is_reported() -> None:
    """A node older than 0.4.0 ignores deliver_at_ms and writes the batch at once: its answer
    has no due time. The caller hears it, with the offset, instead of a silent success."""
    with pytest.raises(FlotillaError, match=r"does not support delayed delivery.*offset 17"):
        drive(
            core().produce("t", b"v", None, 0, None, delay_ms=5000),
            lambda rpc: pb.ProduceResponse(base_offset=17, record_count=1),
        )


# -- topics ----------------------------------------------------------------------------------------
def test_topic_settings_max_delay_and_pending_timers() -> None:
    info = topic_info(METADATA.topics[0])
    assert isinstance(info, TopicInfo) and info.max_delay_ms == 7 * 86_400_000
    assert [p.pending_timers for p in info.partitions] == [5, 0]
    assert create_request("a", 1, 1, 0, 0, 3_600_000).max_delay_ms == 3_600_000
    assert create_request("a", 1, 1, 0, 0).max_delay_ms == 0  # the node's default, 40 days
    altered = alter_request("a", None, None, None, 86_400_000)
    assert altered.HasField("max_delay_ms") and altered.max_delay_ms == 86_400_000
    assert not alter_request("a", 2, None, None).HasField("max_delay_ms")
    assert alter_request("a", None, None, None, 0).HasField("max_delay_ms")  # back to default
    for bad in (999, 365 * 86_400_000 + 1, -1, 1.5, True):
        with pytest.raises(InvalidArgument, match=f"max_delay_ms={bad!r}"):
            create_request("a", 1, 1, 0, 0, bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match=f"max_delay_ms={bad!r}"):
            alter_request("a", None, None, None, bad)  # type: ignore[arg-type]


# -- the batching producer -------------------------------------------------------------------------
class Recording:
    """The batching producer's `Sender` seam: it records each batch and acknowledges it (the
    real client sends it: the end-to-end test's)."""

    def __init__(self) -> None:
        self.router = Router(list(ADDRESS.values()))
        self.router.absorb(METADATA)
        self.timeout_s = 10.0
        self.sent: list[tuple[int, int, bytes]] = []  # partition, deliver_at_ms, batch
        self.lock = threading.Lock()

    def _topic(self, name: str) -> TopicInfo:
        info = self.router.topic(name)
        assert info is not None
        return info

    def send_batch(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        on_issued: Callable[[], None] | None = None,
        abandoned: Callable[[], bool] | None = None,
        on_moved: Callable[[int, int], None] | None = None,
        deliver_at_ms: int = 0,
    ) -> int:
        if on_issued is not None:
            on_issued()
        producer_id, sequence = peek_producer(batch)
        with self.lock:
            self.sent.append((partition, deliver_at_ms, batch))
        self.router.sequences.settled(
            topic, partition, producer_id, sequence, delayed=deliver_at_ms != 0
        )
        return 100 * len(self.sent)


def test_the_producer_batches_delayed_records_by_partition_and_due_time() -> None:
    sender = Recording()
    producer = Producer(sender, linger_ms=60_000, batch_bytes=1 << 20, max_in_flight=4)
    try:
        sends = [
            producer.send("t", b"p0", partition=0),
            producer.send("t", b"a1", partition=0, deliver_at_ms=5_000),
            producer.send("t", b"p1", partition=0),
            producer.send("t", b"a2", partition=0, deliver_at_ms=5_000),
            producer.send("t", b"b1", partition=0, deliver_at_ms=9_000, headers=[("h", b"x")]),
            producer.send("t", b"c1", partition=1, deliver_at_ms=5_000),
        ]
        producer.flush(10)
        metas = [future.result(1) for future in sends]
    finally:
        producer.close()
    batches = {
        (partition, due): [(r.value, r.headers) for r in decode_batch(batch, 0)]
        for partition, due, batch in sender.sent
    }
    assert batches == {
        (0, 0): [(b"p0", ()), (b"p1", ())],
        (0, 5_000): [(b"a1", ((HEADER, b"5000"),)), (b"a2", ((HEADER, b"5000"),))],
        (0, 9_000): [(b"b1", ((HEADER, b"9000"), ("h", b"x")))],
        (1, 5_000): [(b"c1", ((HEADER, b"5000"),))],
    }
    assert len(sender.sent) == 4
    assert [m.deliver_at_ms for m in metas] == [None, 5_000, None, 5_000, 9_000, 5_000]
    assert [m.offset is None for m in metas] == [False, True, False, True, True, True]
    assert metas[2].offset == metas[0].offset + 1
    # sequences: partition 0's delayed batches follow each other in their own space
    spaces: dict[tuple[int, bool], list[tuple[int, int]]] = {}
    for partition, due, batch in sender.sent:
        spaces.setdefault((partition, due != 0), []).append(peek_producer(batch))
    (plain,), delayed0 = spaces[(0, False)], spaces[(0, True)]
    assert plain[1] == 0 and sorted(s for _, s in delayed0) == [0, 2]
    assert len({p for p, _ in delayed0}) == 1 and delayed0[0][0] != plain[0]


def test_the_producer_refuses_bad_delays_before_queueing() -> None:
    sender = Recording()
    producer = Producer(sender, linger_ms=0, batch_bytes=1 << 20, max_in_flight=1)
    try:
        with pytest.raises(InvalidArgument, match="at most one"):
            producer.send("t", b"v", delay_ms=1, deliver_at_ms=2)
        with pytest.raises(InvalidArgument, match="delay_ms=-3"):
            producer.send("t", b"v", delay_ms=-3)
        with pytest.raises(InvalidArgument, match="set by the SDK"):
            producer.send("t", b"v", delay_ms=3, headers=[(HEADER, b"1")])
        producer.flush(5)
    finally:
        producer.close()
    assert sender.sent == []


# -- the CLI ---------------------------------------------------------------------------------------
def test_cli_durations_times_and_their_errors() -> None:
    assert [duration_ms(t) for t in ("10s", "500ms", "2m", "1h", "40d", "1500", "1.5s")] == [
        10_000, 500, 120_000, 3_600_000, 40 * 86_400_000, 1500, 1500,
    ]  # fmt: skip
    assert delay("0s") == 0 and max_delay("40d") == 40 * 86_400_000 and max_delay("0") == 0
    assert [duration_text(ms) for ms in (40 * 86_400_000, 5_400_000, 1500, 0)] == [
        "40d", "90m", "1500ms", "0ms",
    ]  # fmt: skip
    assert at_time("2026-12-01T09:00:00Z") == 1_796_115_600_000
    assert at_time("2026-12-01T10:00:00+01:00") == 1_796_115_600_000
    for parse, text, named in (
        (delay, "10 seconds", "not a duration"),
        (delay, "-5s", "not a duration"),
        (max_delay, "500ms", "out of range"),
        (max_delay, "366d", "out of range"),
        (at_time, "2026-12-01T09:00:00", "not a time with a zone"),
        (at_time, "tomorrow", "not a time with a zone"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=named) as caught:
            parse(text)
        assert "\n" not in str(caught.value) and repr(text) in str(caught.value)


def test_cli_produce_takes_delay_or_at_not_both(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["produce", "t", "--delay", "10s", "--at", "2026-12-01T09:00:00Z"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["produce", "t", "--at", "next tuesday"])
    assert exited.value.code == 2
    assert "'next tuesday' is not a time with a zone" in capsys.readouterr().err
