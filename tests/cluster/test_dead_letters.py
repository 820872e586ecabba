"""The queue shell's pieces that need no cluster: the dead-letter copier's order, retries and
TEST-ONLY stall (`cluster.dead_letters`), the dead letter's batch, reading only the keys of a
window of records (`cluster.queue_source.keys_of`) and the TEST-ONLY fault switch
(`cluster.coordinator_faults`). The copies themselves, on real nodes: tests/cluster/test_queues.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from cluster.config import ConfigError
from cluster.coordinator_faults import ENV_VAR, NodeFaults, faults_from_env
from cluster.dead_letters import (
    DeadLetterCopier,
    DeadLetterSink,
    Sink,
    dead_letter_batch,
    rebased_producer_id,
)
from cluster.errors import TopicExists
from cluster.idempotence import Duplicate, Fresh, Idempotence
from cluster.producers import WINDOW, BatchRef
from cluster.queue_source import keys_of
from cluster.topic_spec import TopicSpec
from consumers.faults import FAULT_NAMES
from consumers.queue_types import REASON_REJECTED, DeadLetterJob
from proto import flotilla_pb2 as pb
from proto.records import Record, decode_batch, encode_batch, read_header


def job(partition: int, sequence: int, group: str = "g") -> DeadLetterJob:
    return DeadLetterJob(
        group=group, topic="jobs", topic_uid="u" * 32, partition=partition,
        offset=10 * sequence, delivery_count=2, reason=REASON_REJECTED,
        dead_letter_topic="jobs.g.dlq", producer_id=77 + partition, sequence=sequence,
    )  # fmt: skip


class Copies:
    """Records the copies; the first `failures` attempts of each job fail."""

    def __init__(self, failures: int = 0, gone: frozenset[tuple[int, int]] = frozenset()) -> None:
        self.failures = failures
        self.gone = gone  # (partition, sequence) whose source record is gone
        self.attempts: dict[tuple[int, int], int] = {}
        self.copied: list[tuple[int, int]] = []

    async def copy(self, job: DeadLetterJob) -> str:
        key = (job.partition, job.sequence)
        self.attempts[key] = self.attempts.get(key, 0) + 1
        if self.attempts[key] <= self.failures:
            raise OSError("the dead-letter partition has no leader yet")
        await asyncio.sleep(0)
        if key in self.gone:
            return "not copied: retention deleted the record first"
        self.copied.append(key)
        return "copied"


async def run_copier(
    sink: Sink,
    jobs: list[DeadLetterJob],
    faults: NodeFaults,
    until: Callable[[list[list[tuple[int, int]]]], bool] | None = None,
) -> list[list[tuple[int, int]]]:
    """Runs a copier over `jobs` until `until(confirmed)` (default: every job confirmed, as
    copied or gone), within a deadline; then a few more turns of the loop, so that anything
    the copier would still do shows."""
    confirmed: list[list[tuple[int, int]]] = []
    done = until or (lambda chunks: sum(len(c) for c in chunks) >= len(jobs))

    async def confirm(done: Sequence[DeadLetterJob], gone: Sequence[DeadLetterJob]) -> None:
        confirmed.append([(j.partition, j.sequence) for j in done])
        if gone:
            confirmed.append([(-1, j.sequence) for j in gone])  # reported gone, apart

    copier = DeadLetterCopier("__groups/0", sink, confirm, faults)
    copier.retry_first_s = 0.01
    copier.offer(jobs)
    copier.offer(jobs)  # offered again while being copied: not copied twice
    deadline = asyncio.get_running_loop().time() + 10
    while not done(confirmed):
        assert asyncio.get_running_loop().time() < deadline, f"copier stuck at {confirmed}"
        await asyncio.sleep(0.005)
    for _ in range(50):
        await asyncio.sleep(0)
    copier.cancel()
    return confirmed


def test_each_partitions_dead_letters_are_copied_in_sequence_order_then_confirmed() -> None:
    sink = Copies(failures=1, gone=frozenset({(1, 1)}))  # each copy fails once: retried
    jobs = [job(0, 2), job(1, 0), job(0, 0), job(0, 1), job(1, 1)]
    confirmed = asyncio.run(run_copier(sink, jobs, NodeFaults()))
    assert [k for k in sink.copied if k[0] == 0] == [(0, 0), (0, 1), (0, 2)]
    assert sorted(sink.copied) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert sorted(confirmed) == [[(-1, 1)], [(0, 0), (0, 1), (0, 2)], [(1, 0)]]
    assert set(sink.attempts.values()) == {2}


def test_a_stream_confirms_its_copies_before_the_partition_could_forget_them() -> None:
    """A dead-letter partition answers a repeated copy as a duplicate only while the copy is
    among the producer's last `WINDOW` batches there; older, the repeat is out of order and
    would stall the stream for good. So at most `WINDOW` copies of a stream are unconfirmed at
    any time: a successor coordinator repeats no more than that."""
    jobs = [job(0, sequence) for sequence in range(3 * WINDOW + 2)]
    confirmed = asyncio.run(run_copier(Copies(), jobs, NodeFaults()))
    assert [k for chunk in confirmed for k in chunk] == [(0, j.sequence) for j in jobs]
    assert max(len(chunk) for chunk in confirmed) <= WINDOW, [len(c) for c in confirmed]
    # why: the table answers a repeat of the newest WINDOW batches, and nothing older
    table = Idempotence()
    for sequence in range(WINDOW + 1):
        assert isinstance(table.admit(77, sequence, 1, 1), Fresh)
        table.written(77, sequence, BatchRef(sequence + 1, 1, 1))
    assert isinstance(table.admit(77, 1, 1, 1), Duplicate)
    assert not isinstance(table.admit(77, 0, 1, 1), Duplicate | Fresh)


def test_the_stall_fault_copies_once_and_never_confirms() -> None:
    faults = faults_from_env({ENV_VAR: "dead_letter_stall_after_copy"})
    sink = Copies()
    jobs = [job(0, 0), job(0, 1), job(1, 0)]
    confirmed = asyncio.run(run_copier(sink, jobs, faults, until=lambda _: bool(sink.copied)))
    assert len(sink.copied) == 1 and confirmed == [] and faults.stalled


def test_a_dead_letter_carries_the_source_record_and_every_header() -> None:
    source = Record(5, b"k", b"v", (("trace", b"1"), ("flotilla-dlq-reason", b"old")), 1234)
    batch = dead_letter_batch(job(3, 9), source)
    header = read_header(batch)
    assert (header.record_count, header.producer_id, header.base_sequence) == (1, 80, 9)
    (copy,) = decode_batch(batch, 0)
    assert (copy.key, copy.value, copy.timestamp_ms) == (b"k", b"v", 1234)
    assert copy.headers == (
        ("trace", b"1"),
        ("flotilla-dlq-topic", b"jobs"),
        ("flotilla-dlq-partition", b"3"),
        ("flotilla-dlq-offset", b"90"),
        ("flotilla-dlq-deliveries", b"2"),
        ("flotilla-dlq-reason", b"rejected"),
    )


def test_keys_of_a_window_reads_only_its_records_keys() -> None:
    records = [(b"k%d" % n if n % 3 else None, b"v" * 100, [("h", b"x")], 0) for n in range(10)]
    batch = encode_batch(records)
    assert keys_of(batch, 100, range(103, 106)) == {103: None, 104: b"k4", 105: b"k5"}
    assert keys_of(batch, 100, range(95, 101)) == {100: None}
    assert keys_of(batch, 100, range(110, 120)) == {}


def test_the_fault_switch_names_core_and_shell_faults_and_refuses_unknown_ones() -> None:
    assert not faults_from_env({}).any and not faults_from_env({ENV_VAR: " "}).any
    core = FAULT_NAMES[0]
    faults = faults_from_env({ENV_VAR: f"{core}, dead_letter_stall_after_copy"})
    assert getattr(faults.coordinator, core) and faults.dead_letter_stall_after_copy
    with pytest.raises(ConfigError, match=r"'forget_everything'.*dead_letter_stall_after_copy"):
        faults_from_env({ENV_VAR: "forget_everything"})


def test_a_rebased_copy_has_one_producer_id_per_job_whoever_sends_it() -> None:
    """A copy the dead-letter partition refused under the job's producer is sent again under
    `rebased_producer_id(job)` at sequence 0: a successor repeating it must derive the same id
    (so the partition answers the repeat as a duplicate), and no two jobs may share one."""
    job = DeadLetterJob("g", "t", "uid", 0, 7, 2, "rejected", "t.g.dlq", 12345, 3)
    again = DeadLetterJob("g", "t", "uid", 0, 7, 2, "rejected", "t.g.dlq", 12345, 3)
    ids = {rebased_producer_id(job), rebased_producer_id(again)}
    assert len(ids) == 1 and 0 < next(iter(ids)) < 1 << 63
    others = {rebased_producer_id(replace(job, sequence=s)) for s in range(100)}
    assert len(others) == 100 and 12345 not in others


class ControlPlane:
    """The controllers' topic table (`table`) and one node's copy of it (`view`); the node's
    first refresh reaches a controller that has not applied the latest change yet (the view
    stays as it was), later ones catch up; `latest` asks them all and gets the table. The
    copies the sink sends, with the incarnation named."""

    def __init__(self, view: dict[str, TopicSpec], table: dict[str, TopicSpec]) -> None:
        self.view, self.table = dict(view), dict(table)
        self.copies: list[tuple[str, int, str]] = []  # (topic, partition, uid)
        self.refreshes = 0

    async def create_topic(self, request: pb.CreateTopicRequest) -> None:
        if request.name in self.table:
            raise TopicExists(request.name)
        self.table[request.name] = TopicSpec(
            request.name, request.partitions, request.replication_factor, uid="new" * 8
        )

    async def refresh(self) -> None:
        self.refreshes += 1
        if self.refreshes > 1:  # the first one reached a controller trailing the others
            self.view = dict(self.table)

    async def latest(self, name: str) -> TopicSpec | None:
        return self.table.get(name)

    async def copy(
        self, topic: str, partition: int, batch: bytes, topic_uid: str = ""
    ) -> pb.ProduceResponse:
        self.copies.append((topic, partition, topic_uid))
        return pb.ProduceResponse(base_offset=len(self.copies) - 1)

    def known_leader(self, topic: str, partition: int) -> str | None:
        return "n1"

    async def leader(self, topic: str, partition: int, fresh: bool = False) -> str | None:
        return "n1"

    async def record(
        self, topic: str, partition: int, offset: int, topic_uid: str = ""
    ) -> Record | None:
        return Record(offset, b"k", b"v", (), 1)


def test_a_dead_letter_topic_deleted_behind_a_stale_table_gets_the_copy_in_its_new_incarnation() -> (
    None
):
    """The node's table may still hold a dead-letter topic the controllers deleted (it polls
    them every second, later under load; a controller's own table may trail the control plane's
    leader by a moment), and a node that has not seen the delete still leads the old partition
    and takes a copy there: gone with the deleted topic, yet confirmed. A copy counts only once
    the control plane, asked after it landed (every controller: `latest`), still has that
    incarnation. (A check against the node's table after a refresh missed it: the CI failure
    of `test_dead_letters_go_on_when_the_dead_letter_partition_forgot_their_producer`.)"""
    source = TopicSpec("jobs", 2, 3, uid="u" * 32)
    old = TopicSpec("jobs.g.dlq", 2, 3, uid="old" * 8)
    plane = ControlPlane(view={"jobs": source, old.name: old}, table={"jobs": source})
    sink = DeadLetterSink(
        topics=lambda: plane.view, create_topic=plane.create_topic,
        refresh_topics=plane.refresh, latest_topic=plane.latest, source=plane,
        stub=lambda _: None, copies=plane,
    )  # fmt: skip
    confirmed = asyncio.run(run_copier(sink, [job(1, 0)], NodeFaults()))
    assert confirmed == [[(1, 0)]]
    assert plane.copies[-1] == ("jobs.g.dlq", 1, "new" * 8), plane.copies
    assert plane.table["jobs.g.dlq"].uid == "new" * 8
