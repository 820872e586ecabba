"""The client's CPU per record, without the network: `Producer.send` and the encode path of
`Client.produce`, in this process alone.

    python -m bench.client_encode [--records 200000] [--rounds 5]

- `Producer.send`: `--records` 1 KiB records through a real `Producer` (1 MiB batches, linger
  5 ms, 16 in flight) whose sender answers each batch at once, as a leader would, with the next
  base offset (`LoopbackSender`: no gRPC, no cluster; the batch is encoded for real and its
  record count read back from its header). Two figures: the calling thread's CPU per `send`
  (`time.thread_time`), and the process's CPU per record end to end (send, dispatch, encode,
  settle the futures; rusage, every thread).
- `Client.produce`'s encode path: what it does per call before the gRPC call (its plan run up
  to the request: the record's checks, the timestamp, routing, one batch of one record encoded
  under the partition's producer id and sequence, the ProduceRequest built), per record.
Medians over `--rounds`. Prints a table and one JSON line. Run it before and after a change in
the same session, alternating (another process's load moves both alike).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import threading
import time

from flotilla import Client
from flotilla.producer import Producer
from flotilla.types import TopicInfo
from proto import flotilla_pb2 as pb
from proto.records import read_header

RECORD = b"r" * 1024
TOPIC = "bench"


class LoopbackSender:
    """A `Sender` whose partition leader is this process: each batch is acknowledged at once
    with the next base offset of its partition. Its router is a `Client`'s (never dialled),
    told of one topic of one partition led by node "n1"."""

    def __init__(self) -> None:
        self.client = Client(["127.0.0.1:1"])
        self.router = self.client.router
        self.timeout_s = 30.0
        self.router.absorb(
            pb.MetadataResponse(
                members=[pb.Member(id="n1", address="127.0.0.1:1", state=pb.ALIVE)],
                topics=[pb.TopicInfo(name=TOPIC, replication_factor=1, partitions=[
                    pb.PartitionInfo(index=0, leader="n1", replicas=["n1"])])],
            )
        )  # fmt: skip
        info = self.router.topic(TOPIC)
        assert info is not None
        self.info: TopicInfo = info
        self.offsets: dict[int, int] = {}
        self.lock = threading.Lock()  # the producer's sending threads call at once

    def _topic(self, name: str) -> TopicInfo:
        return self.info

    def send_batch(self, topic, partition, batch, on_issued=None, abandoned=None,  # type: ignore[no-untyped-def]
                   on_moved=None, deliver_at_ms=0) -> int:  # fmt: skip
        if on_issued is not None:
            on_issued()
        count = read_header(batch).record_count
        with self.lock:
            base = self.offsets.get(partition, 0)
            self.offsets[partition] = base + count
        return base


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def producer_send(count: int) -> tuple[float, float]:
    """(caller-thread CPU µs per send, process CPU µs per record end to end)."""
    sender = LoopbackSender()
    producer = Producer(sender, linger_ms=5, batch_bytes=1 << 20, max_in_flight=16)
    process_before = _cpu_s()
    thread_before = time.thread_time()
    futures = [producer.send(TOPIC, RECORD, partition=0) for _ in range(count)]
    thread_spent = time.thread_time() - thread_before
    producer.flush()
    for future in futures:
        future.result()
    process_spent = _cpu_s() - process_before
    producer.close()
    assert sender.offsets[0] == count, sender.offsets
    return thread_spent / count * 1e6, process_spent / count * 1e6


def produce_encode(count: int) -> float:
    """CPU µs per `Client.produce` before its gRPC call: the call's plan run up to the Produce
    request it would send (checks, timestamp, routing, the batch encoded under the partition's
    producer id and sequence, the request built)."""
    client = LoopbackSender().client
    before = time.thread_time()
    for _ in range(count):
        plan = client._core.produce(TOPIC, RECORD, None, 0, None)
        step = next(plan)
        plan.close()
    spent = time.thread_time() - before
    assert step.method == "Produce", step  # type: ignore[union-attr]
    return spent / count * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    runs: dict[str, list[float]] = {"send": [], "end_to_end": [], "produce": []}
    producer_send(10_000)  # warm-up
    for _ in range(args.rounds):
        send_us, end_to_end_us = producer_send(args.records)
        runs["send"].append(send_us)
        runs["end_to_end"].append(end_to_end_us)
        runs["produce"].append(produce_encode(args.records // 4))
    medians = {name: statistics.median(values) for name, values in runs.items()}
    print(f"{'client CPU per record (µs, median of ' + str(args.rounds) + ')':<52}{'µs':>8}")
    print(f"{'Producer.send, calling thread':<52}{medians['send']:>8.2f}")
    print(f"{'Producer, send to settled future, every thread':<52}{medians['end_to_end']:>8.2f}")
    print(f"{'Client.produce before its gRPC call':<52}{medians['produce']:>8.2f}")
    print(json.dumps({
        "producer_send_us": round(medians["send"], 3),
        "producer_end_to_end_us": round(medians["end_to_end"], 3),
        "produce_encode_us": round(medians["produce"], 3),
        "records": args.records, "rounds": args.rounds,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
