"""The batching producer's batches are byte for byte what `proto.records.encode_batch` makes of
the same records (one encoding of a batch, whichever path built it), and its futures, settled a
batch at a time, wake every kind of waiter; checked with no network: a sender that keeps each
batch and acknowledges it (at once, or when the test opens its gate)."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from harness import wait_until

from flotilla._router import Router
from flotilla.producer import Producer
from flotilla.types import PartitionInfo, TopicInfo
from proto.records import decode_batch, encode_batch, read_header

TOPIC = "t"


class KeepingSender:
    """Keeps every batch the producer sends; acknowledges it at once with the next offset."""

    def __init__(self) -> None:
        self.router = Router(["127.0.0.1:1"])
        self.timeout_s = 10.0
        self.info = TopicInfo(TOPIC, (PartitionInfo(0, "n1", ("n1",), 0, 0),), 1)
        self.router._topics[TOPIC] = self.info
        self.batches: list[bytes] = []
        self.lock = threading.Lock()
        self.gate = threading.Event()  # acknowledgements wait for it
        self.gate.set()

    def _topic(self, name: str) -> TopicInfo:
        return self.info

    def send_batch(self, topic: str, partition: int, batch: bytes, on_issued: Any = None,
                   abandoned: Any = None, on_moved: Any = None, deliver_at_ms: int = 0) -> int:  # fmt: skip
        if on_issued is not None:
            on_issued()
        assert self.gate.wait(timeout=30)
        with self.lock:
            base = sum(read_header(b).record_count for b in self.batches)
            self.batches.append(batch)
        return base


def test_producer_batches_are_encode_batch_byte_for_byte() -> None:
    sender = KeepingSender()
    records: list[tuple[bytes | None, bytes, list[tuple[str, bytes]] | None]] = [
        (None, b"plain", None),
        (b"key", b"keyed", None),
        (None, b"headed", [("h", b"1"), ("ü", b"")]),
        (b"k2", b"", [("x", b"y" * 300)]),
    ] * 40
    with Producer(sender, linger_ms=1000, batch_bytes=4096, max_in_flight=2) as producer:
        futures = [producer.send(TOPIC, v, key=k, headers=h, partition=0) for k, v, h in records]
        producer.flush()
        offsets = [future.result().offset for future in futures]
    assert offsets == list(range(len(records)))
    assert len(sender.batches) > 3  # several batches, each closed by batch_bytes
    seen = []
    for batch in sender.batches:
        header = read_header(batch)
        decoded = decode_batch(batch, 0)
        again = encode_batch(
            [(r.key, r.value, r.headers, r.timestamp_ms) for r in decoded],
            producer_id=header.producer_id,
            base_sequence=header.base_sequence,
        )
        assert again == batch
        seen += [(r.key, r.value, [tuple(h) for h in r.headers] or None) for r in decoded]
    assert seen == [(k, v, h) for k, v, h in records]


def test_settling_a_batch_wakes_waiters_and_runs_callbacks() -> None:
    sender = KeepingSender()
    sender.gate.clear()
    with Producer(sender, linger_ms=0, batch_bytes=1 << 20, max_in_flight=2) as producer:
        futures = [producer.send(TOPIC, b"v%d" % n, partition=0) for n in range(50)]
        seen: list[int] = []
        futures[7].add_done_callback(lambda f: seen.append(f.result().offset))
        waited: list[set[concurrent.futures.Future[Any]]] = []
        completed: list[int] = []
        waiters = [
            threading.Thread(
                target=lambda: waited.append(concurrent.futures.wait(futures, timeout=10).done)
            ),
            threading.Thread(
                target=lambda: completed.extend(
                    f.result().offset for f in concurrent.futures.as_completed(futures, timeout=10)
                )
            ),
        ]
        for waiter in waiters:
            waiter.start()
        # both waiters are installed on every future before any batch is acknowledged
        wait_until(lambda: all(len(f._waiters) == 2 for f in futures), what="waiters installed")
        assert not any(f.done() for f in futures)
        sender.gate.set()
        for waiter in waiters:
            waiter.join(timeout=15)
        assert waited and len(waited[0]) == 50
        assert sorted(completed) == list(range(50))
        assert seen == [7]
