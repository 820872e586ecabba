"""One queue receiver as its own process, so a workload can kill it (a real crash: no release,
no leave) and start it again:

    python -m chaos.queue_member --bootstrap 127.0.0.1:7001 --group G --topic T --name r1 \\
        --history /tmp/r1.0.jsonl --seed 7 [--invisible-ms 3000] [--max-deliveries 3] ...

It receives in batches and settles each delivery as a seeded choice made from the record's value
and its delivery count (`decide`: the same on any receiver, so a replay makes the same choices):
most are acked, a few released, rejected, left to expire, or extended once and then left to
expire (no one else may get them before the new deadline); "poison" records (about one in
`POISON_ONE_IN`) are always released or left to expire, so they reach the dead-letter topic
after max_deliveries. It writes the events `chaos.queue_checker` judges (lease; ack, release,
reject and extend as an invoke then its outcome, an applied extend with its new deadline; close)
to its own history file, flushed per line, with `time.monotonic()` timestamps and wall-clock
`wall_ms`. SIGTERM closes the queue (which releases every lease it holds) and exits 0.
"""

from __future__ import annotations

import argparse
import random
import signal
import threading
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

from chaos.client_tls import ClientTls
from chaos.history import EventType, HistoryWriter
from flotilla.errors import FlotillaError, LeaseLost
from flotilla.types import Delivery

__all__ = ["ACTIONS", "decide", "main"]

ACK, RELEASE, REJECT, EXPIRE = "ack", "release", "reject", "expire"
EXTEND = "extend"  # extended once, then left to expire
ACTIONS = (ACK, RELEASE, REJECT, EXPIRE, EXTEND)
POISON_ONE_IN = 40
# per hand-out of an ordinary record
WEIGHTS = {ACK: 87, RELEASE: 4, REJECT: 2, EXPIRE: 4, EXTEND: 3}


def now_ms() -> int:
    return int(time.time() * 1000)


def decide(seed: int, value: str, delivery_count: int) -> str:
    """What a receiver does with this hand-out of the record `value`."""
    rng = random.Random(f"{seed}/{value}/{delivery_count}")
    if zlib.crc32(f"{seed}/{value}".encode()) % POISON_ONE_IN == 0:
        return rng.choice((RELEASE, EXPIRE))  # at max_deliveries either dead-letters it
    return rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]


class Receiver:
    def __init__(self, history: HistoryWriter, name: str, invisible_ms: int, seed: int) -> None:
        self.history = history
        self.name = name
        self.invisible_ms = invisible_ms
        self.seed = seed

    def leased(self, deliveries: Sequence[Delivery]) -> None:
        for d in deliveries:
            value = d.record.value.decode(errors="replace")
            self.history.record(self.name, EventType.OK, "lease", partition=d.partition,
                                offset=d.offset, value=value, count=d.delivery_count,
                                deadline_ms=d.deadline_ms,
                                wall_ms=d.deadline_ms - self.invisible_ms)  # fmt: skip

    def settle(self, queue: object, action: str, deliveries: Sequence[Delivery]) -> None:
        """Calls `queue.<action>(deliveries)`; records each delivery's invoke and outcome."""
        began = now_ms()
        for d in deliveries:
            self._record(EventType.INVOKE, action, d, began)
        try:
            getattr(queue, action)(list(deliveries))
        except LeaseLost as error:
            lost = {(d.partition, d.offset, d.delivery_count) for d in error.deliveries}
            for d in deliveries:
                kind = (
                    EventType.FAIL
                    if (d.partition, d.offset, d.delivery_count) in lost
                    else EventType.OK
                )
                self._record(kind, action, d, began)
        except FlotillaError as error:  # unknown: it may have been applied
            for d in deliveries:
                self._record(EventType.INFO, action, d, began, repr(error)[:200])
        else:
            for d in deliveries:
                self._record(EventType.OK, action, d, began)

    def extend(self, queue: object, deliveries: Sequence[Delivery]) -> None:
        """`queue.extend(deliveries, invisible_ms)`: each applied one is recorded with its new
        deadline (-1 when LeaseLost hid it), a lost one as fail, an unknown outcome as info."""
        began = now_ms()
        for d in deliveries:
            self._record(EventType.INVOKE, EXTEND, d, began)
        try:
            extended = queue.extend(list(deliveries), self.invisible_ms)  # type: ignore[attr-defined]
        except LeaseLost as error:
            lost = {(d.partition, d.offset, d.delivery_count) for d in error.deliveries}
            for d in deliveries:
                hidden = d.partition, d.offset, d.delivery_count
                kind = EventType.FAIL if hidden in lost else EventType.OK
                self._record(kind, EXTEND, d, began)
        except FlotillaError as error:
            for d in deliveries:
                self._record(EventType.INFO, EXTEND, d, began, repr(error)[:200])
        else:
            for d in extended:
                self._record(EventType.OK, EXTEND, d, began, deadline_ms=d.deadline_ms)

    def _record(
        self,
        kind: EventType,
        action: str,
        d: Delivery,
        began: int,
        error: str = "",
        deadline_ms: int = -1,
    ) -> None:
        self.history.record(self.name, kind, action, partition=d.partition, offset=d.offset,
                            count=d.delivery_count, wall_ms=began, error=error,
                            deadline_ms=deadline_ms)  # fmt: skip

    def run(self, queue: object, stop: threading.Event, batch: int) -> None:
        while not stop.is_set():
            try:
                deliveries = queue.receive(max_records=batch, timeout_s=0.5)  # type: ignore[attr-defined]
            except FlotillaError as error:  # e.g. a coordinator failing over: try again
                self.history.record(self.name, EventType.INFO, "receive", error=repr(error)[:200])
                stop.wait(0.2)
                continue
            self.leased(deliveries)
            chosen: dict[str, list[Delivery]] = {action: [] for action in ACTIONS}
            for d in deliveries:
                value = d.record.value.decode(errors="replace")
                chosen[decide(self.seed, value, d.delivery_count)].append(d)
            if chosen[EXTEND]:
                self.extend(queue, chosen[EXTEND])
            for action in (ACK, RELEASE, REJECT):
                if chosen[action]:
                    self.settle(queue, action, chosen[action])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.queue_member")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--history", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--invisible-ms", type=int, default=3000)
    parser.add_argument("--max-deliveries", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=8000)
    parser.add_argument("--backoff-ms", default="200,500,1000", help="comma-separated ms")
    parser.add_argument("--batch", type=int, default=20)
    ClientTls.add_arguments(parser)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    history = HistoryWriter(args.history)
    receiver = Receiver(history, args.name, args.invisible_ms, args.seed)
    backoff = [int(ms) for ms in args.backoff_ms.split(",") if ms]
    try:
        tls = ClientTls.from_args(args)
        with tls.client(args.bootstrap.split(","), timeout_s=10) as client:
            queue = client.queue(
                args.group, args.topic, invisible_ms=args.invisible_ms,
                max_deliveries=args.max_deliveries, session_timeout_ms=args.session_timeout_ms,
                backoff_ms=backoff,
            )  # fmt: skip
            history.record(args.name, EventType.OK, "started", wall_ms=now_ms())
            try:
                receiver.run(queue, stop, args.batch)
            finally:
                history.record(args.name, EventType.OK, "close", wall_ms=now_ms())
                queue.close()
    finally:
        history.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
