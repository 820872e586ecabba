"""Reading one planned offset range inside a Spark task: replica failover, then rows or Arrow.

Guarantees: the records yielded are exactly offsets `start <= offset < end` of the range, in order,
each once. A replica serves a Fetch only up to its commit index, and `end` is at most the high
watermark seen at planning, so nothing uncommitted is ever returned. A replica that is down (or
unknown to the cluster's membership), or that has not yet applied up to the next wanted offset,
is skipped in favour of the next one in the range's preference order; the task fails only when no
replica made progress for `stall_timeout_s`.

Assumes: offsets within a partition are dense (offset n+1 follows n).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from flotilla.client import Client
from flotilla.errors import NotLeader, OffsetOutOfRange, Timeout, TopicNotFound, Unavailable
from flotilla.spark_plan import OffsetRange, SparkOptions
from flotilla.types import Record

__all__ = ["SCHEMA_DDL", "client_for", "read_range", "to_arrow", "to_rows"]

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, headers array<struct<key: string, value: binary>>"
)
STALL_TIMEOUT_S = 60.0
METADATA_TIMEOUT_S = 15.0
_SKIP = (Unavailable, Timeout, NotLeader, OffsetOutOfRange)

FailoverHook = Callable[[str, str], None]  # (replica skipped, why)


def client_for(options: SparkOptions, bootstrap: list[str], timeout_s: float) -> Client:
    """A client with the options' TLS and token settings (see `flotilla.spark`)."""
    return Client(
        bootstrap,
        timeout_s=timeout_s,
        tls_ca=options.tls_ca,
        tls_cert=options.tls_cert,
        tls_key=options.tls_key,
        token=options.token,
    )


def read_range(
    offset_range: OffsetRange,
    options: SparkOptions,
    on_failover: FailoverHook | None = None,
    stall_timeout_s: float = STALL_TIMEOUT_S,
) -> Iterator[list[Record]]:
    """The range's records in chunks of at most `maxRecordsPerRequest`, failing over replicas."""
    if offset_range.size <= 0:
        return
    replicas = list(offset_range.replicas)
    # The replicas' planned addresses first: the bootstrap node may be the one that is down.
    bootstrap = list(dict.fromkeys(offset_range.addresses + options.bootstrap))
    with client_for(options, bootstrap, METADATA_TIMEOUT_S) as client:
        client.describe_topic(offset_range.topic)  # learns members and their addresses
        client.timeout_s = options.replica_timeout_ms / 1000  # per replica, then fail over
        offset, turn = offset_range.start, 0
        progress_at = time.monotonic()
        while offset < offset_range.end:
            replica = replicas[turn % len(replicas)] if replicas else None
            wanted = min(options.max_records_per_request, offset_range.end - offset)
            why = ""
            records: list[Record] = []
            if replica is not None and client.router.address_of(replica) is None:
                why = "not an alive member"
            else:
                try:
                    records = client.read(
                        offset_range.topic, offset_range.partition, offset, wanted, replica=replica
                    )
                except _SKIP as error:
                    why = f"{type(error).__name__}: {error}"
                if not records and not why:
                    why = f"has not applied offset {offset} yet"
            if why:
                if on_failover is not None and replica is not None:
                    on_failover(replica, why)
                if time.monotonic() - progress_at > stall_timeout_s:
                    raise Unavailable(
                        f"no replica of {offset_range.topic}/{offset_range.partition} in "
                        f"{replicas} served offset {offset} for {stall_timeout_s:.0f} s; last: {why}"
                    )
                turn += 1
                if replicas and turn % len(replicas) == 0:
                    time.sleep(0.05)  # every replica refused: give them a moment
                    _refresh(client, offset_range.topic)
                continue
            chunk = [r for r in records if r.offset < offset_range.end]
            if not chunk or chunk[0].offset != offset:
                raise Unavailable(
                    f"{offset_range.topic}/{offset_range.partition}: asked for offset {offset}, "
                    f"got {chunk[0].offset if chunk else 'nothing'} from {replica}"
                )
            yield chunk
            offset = chunk[-1].offset + 1
            progress_at = time.monotonic()


def _refresh(client: Client, topic: str) -> None:
    try:
        client.refresh([topic])
    except (Unavailable, Timeout, TopicNotFound):
        pass  # the cached routes still stand


def _timestamp(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def to_rows(topic: str, partition: int, records: list[Record]) -> Iterator[tuple[Any, ...]]:
    for r in records:
        yield (
            r.key, r.value, topic, partition, r.offset, _timestamp(r.timestamp_ms),
            [(k, v) for k, v in r.headers],
        )  # fmt: skip


def arrow_schema() -> Any:
    import pyarrow as pa  # noqa: PLC0415 (optional dependency)

    return pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ]
    )


def to_arrow(topic: str, partition: int, records: list[Record], schema: Any) -> Any:
    """One Arrow RecordBatch: columns built once per chunk, not a Python tuple per row."""
    import pyarrow as pa  # noqa: PLC0415 (optional dependency)

    count = len(records)
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array([topic] * count, pa.string()),
        pa.array([partition] * count, pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp_ms * 1000 for r in records], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")
        ),
        pa.array(
            [[{"key": k, "value": v} for k, v in r.headers] for r in records],
            schema.field("headers").type,
        ),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_output(offset_range: OffsetRange, options: SparkOptions) -> Iterator[Any]:
    """What a Spark reader's `read()` yields for one range: Arrow batches or row tuples."""
    schema = arrow_schema() if options.arrow else None
    for chunk in read_range(offset_range, options):
        if schema is not None:
            yield to_arrow(offset_range.topic, offset_range.partition, chunk, schema)
        else:
            yield from to_rows(offset_range.topic, offset_range.partition, chunk)
