"""A `__groups` partition's log as the coordinator sees it: each record's value is one entry of
the core (`consumers`), its key the group's name (none for the entries of a tick); replaying
every committed record in log order rebuilds the coordinator (`replay`); a round's entries are
appended as record batches (`batches`, `proto.records`).

Replay reads the whole partition: there is no checkpoint of `__groups` yet (compaction, a
checkpoint entry and deleting what it covers, is future work), so loading grows with the
partition's history.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from cluster.replica import Replica
from consumers import Coordinator, CoordinatorConfig
from consumers.faults import NO_FAULTS, CoordinatorFaults
from proto.records import decode_batch, encode_batch

__all__ = ["MAX_BATCH_BYTES", "batches", "replay"]

# Bytes of entries per record batch appended (a larger write is split into several batches).
MAX_BATCH_BYTES = 1024 * 1024
# The replay reads the partition this much at a time.
REPLAY_RECORDS = 10_000
REPLAY_BYTES = 4 * 1024 * 1024
# A record's framing beside its key and value, counted against MAX_BATCH_BYTES.
_RECORD_OVERHEAD = 16

Entry = tuple[str | None, bytes]  # (group name, or None for a tick's; the core's entry)


def replay(
    replica: Replica, config: CoordinatorConfig, faults: CoordinatorFaults = NO_FAULTS
) -> tuple[Coordinator, int]:
    """Reader thread: a coordinator loaded from every committed record of `replica`, and how
    many records that was. Raises `consumers.coordinator.UnknownEntry` for an entry of a newer
    format, `storage.LogClosed` if the replica closes meanwhile. `faults`: TEST-ONLY
    (`cluster.coordinator_faults`)."""
    coordinator = Coordinator(config, faults=faults)
    offset = replica.segmented.first_offset
    end = replica.high_watermark
    records = 0
    while offset < end:
        stored = replica.read_committed(offset, REPLAY_RECORDS, REPLAY_BYTES)
        if not stored:
            break
        for batch in stored:
            for record in decode_batch(batch.data, batch.base_offset):
                coordinator.load(record.value)
                records += 1
        last = stored[-1]
        offset = last.base_offset + last.record_count
    return coordinator, records


def batches(
    entries: Sequence[Entry], timestamp_ms: int, max_bytes: int = MAX_BATCH_BYTES
) -> Iterator[tuple[bytes, int]]:
    """(record batch, record count) for `entries`, in order, each batch at most about
    `max_bytes` (one entry larger than that goes alone)."""
    chunk: list[Entry] = []
    size = 0
    for key, value in entries:
        cost = len(value) + (len(key) if key else 0) + _RECORD_OVERHEAD
        if chunk and size + cost > max_bytes:
            yield _encode(chunk, timestamp_ms), len(chunk)
            chunk, size = [], 0
        chunk.append((key, value))
        size += cost
    if chunk:
        yield _encode(chunk, timestamp_ms), len(chunk)


def _encode(chunk: list[Entry], timestamp_ms: int) -> bytes:
    return encode_batch(
        [(None if key is None else key.encode(), value, None, timestamp_ms) for key, value in chunk]
    )
