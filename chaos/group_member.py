"""One consumer-group member as its own process, for tests that kill or pause members:

    python -m chaos.group_member --bootstrap 127.0.0.1:7001 --group G --topic T --name m1 \\
        --history /tmp/m1.jsonl [--session-timeout-ms 4000] [--poll-timeout-s 0.2]

It polls, commits after every poll, and writes the same events as `chaos.group_workload`
(assign, revoke, poll, consume, commit) to its own history file, flushed per line, with
`time.monotonic()` timestamps (one clock for every process on the machine), so a test can merge
the members' files and judge them with `chaos.group_checker`. SIGTERM closes the consumer (it
commits and leaves at once) and exits 0.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from chaos.client_tls import ClientTls
from chaos.history import EventType, HistoryWriter
from flotilla.errors import FencedMember, FlotillaError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.group_member")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--history", type=Path, required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=4000)
    parser.add_argument("--poll-timeout-s", type=float, default=0.2)
    ClientTls.add_arguments(parser)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    history = HistoryWriter(args.history)
    name = args.name

    def assigned(partitions: set[tuple[str, int]]) -> None:
        for _, p in sorted(partitions):
            history.record(name, EventType.OK, "assign", partition=p)

    def revoked(partitions: set[tuple[str, int]]) -> None:
        for _, p in sorted(partitions):
            history.record(name, EventType.OK, "revoke", partition=p)

    try:
        with (
            ClientTls.from_args(args).client(args.bootstrap.split(","), timeout_s=10) as client,
            client.consumer(
                args.group, [args.topic], start="earliest", auto_commit=True,
                session_timeout_ms=args.session_timeout_ms, on_assign=assigned,
                on_revoke=revoked,
            ) as consumer,
        ):  # fmt: skip
            history.record(name, EventType.OK, "started")
            while not stop.is_set():
                history.record(name, EventType.INVOKE, "poll")
                try:
                    records = consumer.poll(max_records=100, timeout_s=args.poll_timeout_s)
                except FlotillaError as error:
                    history.record(name, EventType.FAIL, "poll", error=repr(error)[:200])
                    continue
                by_partition: dict[int, list[tuple[int, str]]] = {}
                for record in records:
                    by_partition.setdefault(record.partition, []).append(
                        (record.offset, record.value.decode())
                    )
                for p, pairs in sorted(by_partition.items()):
                    history.record(name, EventType.OK, "consume", partition=p, records=tuple(pairs))
                history.record(name, EventType.OK, "poll")
                if not by_partition:
                    continue
                positions = {
                    (topic, p): consumer.position(topic, p) for topic, p in consumer.assignment()
                }
                committing = tuple(
                    (p, str(offset)) for (_, p), offset in sorted(positions.items()) if offset
                )
                history.record(name, EventType.INVOKE, "commit", records=committing)
                try:
                    consumer.commit({tp: o for tp, o in positions.items() if o})
                except FencedMember as error:
                    history.record(name, EventType.FAIL, "commit", error=repr(error)[:200])
                except FlotillaError as error:
                    history.record(name, EventType.INFO, "commit", error=repr(error)[:200])
                else:
                    history.record(name, EventType.OK, "commit")
    finally:
        history.record(name, EventType.OK, "closed")
        history.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
