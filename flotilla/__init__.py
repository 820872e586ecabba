"""Flotilla: a distributed, replicated, partitioned log — the client SDK.

    from flotilla import Client          # synchronous, thread-safe
    from flotilla.aio import Client      # asyncio, the same calls as coroutines

The `flotilla` command (`flotilla.cli`) runs nodes, local clusters and the demo.
"""

from importlib import metadata as _metadata

from flotilla import _fork_safety  # noqa: F401  (first: before gRPC initialises)
from flotilla.client import Client
from flotilla.consumer import AsyncConsumer, Consumer
from flotilla.errors import (
    AuthenticationError,
    AuthorizationError,
    FencedMember,
    FlotillaError,
    GroupNotEmpty,
    GroupNotFound,
    InvalidArgument,
    LeaseLost,
    NotLeader,
    OffsetNotAvailable,
    OffsetOutOfRange,
    OutOfOrder,
    Overloaded,
    SequenceInFlight,
    StaleMetadata,
    Timeout,
    TopicNotFound,
    Unavailable,
    UnknownProducer,
)
from flotilla.queue import AsyncQueue, Queue
from flotilla.types import (
    AclBinding,
    Delivery,
    GroupInfo,
    GroupMember,
    GroupPartition,
    Member,
    PartitionInfo,
    QueueOptions,
    QueuePartitionInfo,
    Record,
    RecordMetadata,
    Token,
    TokenInfo,
    TopicInfo,
    WhoAmI,
)

try:  # one source of truth: the version pyproject.toml gives the installed distribution
    __version__ = _metadata.version("flotilla-mq")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AclBinding",
    "AsyncConsumer",
    "AsyncQueue",
    "AuthenticationError",
    "AuthorizationError",
    "Client",
    "Consumer",
    "Delivery",
    "FencedMember",
    "FlotillaError",
    "GroupInfo",
    "GroupMember",
    "GroupNotEmpty",
    "GroupNotFound",
    "GroupPartition",
    "InvalidArgument",
    "LeaseLost",
    "Member",
    "NotLeader",
    "OffsetNotAvailable",
    "OffsetOutOfRange",
    "OutOfOrder",
    "Overloaded",
    "PartitionInfo",
    "Queue",
    "QueueOptions",
    "QueuePartitionInfo",
    "Record",
    "RecordMetadata",
    "SequenceInFlight",
    "StaleMetadata",
    "Timeout",
    "Token",
    "TokenInfo",
    "TopicInfo",
    "TopicNotFound",
    "Unavailable",
    "UnknownProducer",
    "WhoAmI",
    "__version__",
]
