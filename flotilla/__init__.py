"""Flotilla: a distributed, replicated, partitioned log — the client SDK.

    from flotilla import Client          # synchronous, thread-safe
    from flotilla.aio import Client      # asyncio, the same calls as coroutines

The `flotilla` command (`flotilla.cli`) runs nodes, local clusters and the demo.
"""

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
]
