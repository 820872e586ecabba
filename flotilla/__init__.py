"""Flotilla: a distributed, replicated, partitioned log — the client SDK.

    from flotilla import Client          # synchronous, thread-safe
    from flotilla.aio import Client      # asyncio, the same calls as coroutines

The `flotilla` command (`flotilla.cli`) runs nodes, local clusters and the demo.
"""

from importlib import metadata as _metadata

from flotilla import _fork_safety  # noqa: F401  (first: before gRPC initialises)
from flotilla._routing import Member, PartitionInfo, Record, RecordMetadata, TopicInfo
from flotilla.client import Client
from flotilla.errors import (
    FlotillaError,
    InvalidArgument,
    NotLeader,
    OffsetNotAvailable,
    OffsetOutOfRange,
    OutOfOrder,
    Overloaded,
    Timeout,
    TopicNotFound,
    Unavailable,
    UnknownProducer,
)

try:  # one source of truth: the version pyproject.toml gives the installed distribution
    __version__ = _metadata.version("flotilla-mq")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

# The data classes the SDK returns are defined beside the code that builds them (flotilla._routing,
# proto.records), which says nothing of them to a user; their user-facing text is here.
Record.__doc__ = """One record as read: `offset` in its partition, `key` (None if it has none),
`value`, `headers` ((name, value) pairs, in the order written) and `timestamp_ms` (the
producer's clock when it was sent, milliseconds since the Unix epoch). Frozen."""
PartitionInfo.__doc__ = """One partition of a topic as a node reported it: `index`, `leader`
(member id; "" while none is known), `replicas` (the voters, preferred leader first),
`high_watermark` (the offset after the last committed record) and `log_start` (the first
offset retained). Frozen."""
TopicInfo.__doc__ = """A topic: `name`, its `partitions` (PartitionInfo, by index),
`replication_factor`, `retention_bytes` and `retention_ms` (0: unlimited) and `uid` (this
incarnation: a topic deleted and created again gets another). Frozen."""
Member.__doc__ = """A cluster member: `id`, `address` (host:port clients dial), `state`
("ALIVE", "SUSPECT", "DEAD" or "LEFT"), placement `weight` and `rack` ("" when not set).
Frozen."""

__all__ = [
    "Client",
    "FlotillaError",
    "InvalidArgument",
    "Member",
    "NotLeader",
    "OffsetNotAvailable",
    "OffsetOutOfRange",
    "OutOfOrder",
    "Overloaded",
    "PartitionInfo",
    "Record",
    "RecordMetadata",
    "Timeout",
    "TopicInfo",
    "TopicNotFound",
    "Unavailable",
    "UnknownProducer",
    "__version__",
]
