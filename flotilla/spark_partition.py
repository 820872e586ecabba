"""What the batch and the stream reader share (`flotilla.spark`, `flotilla.spark_stream`): the
Spark task (`FlotillaPartition`, one planned offset range) and the driver's metadata lookup
(`describe_topics`). Both readers import this module; neither imports the other's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql.datasource import InputPartition

from flotilla.errors import TopicNotFound
from flotilla.spark_plan import OffsetRange, SparkOptionError, SparkOptions, group_of
from flotilla.spark_read import client_for

__all__ = ["FlotillaPartition", "describe_topics", "group_offsets", "partitions_of"]


class FlotillaPartition(InputPartition):
    """One Spark task's work: `value` is an `OffsetRange` (with its replica preference order)."""

    def __init__(self, value: OffsetRange) -> None:
        super().__init__(value)


def describe_topics(
    options: SparkOptions, addresses: dict[str, str] | None = None
) -> dict[str, Any]:
    """Metadata of every topic read; an unknown topic fails naming the option. Fills
    `addresses` (member id -> address) when given."""
    option = "topic" if len(options.topics) == 1 else "topics"
    with client_for(options, list(options.bootstrap), 15) as client:
        infos = {}
        for name in options.topics:
            try:
                infos[name] = client.describe_topic(name)
            except TopicNotFound:
                known = sorted(client.list_topics())
                raise SparkOptionError(
                    f"option {option!r}: topic {name!r} does not exist; existing topics: {known}"
                ) from None
        if addresses is not None:
            addresses.update((m.id, m.address) for m in client.members())
    return infos


def group_offsets(options: SparkOptions) -> dict[tuple[str, int], int] | None:
    """With startingOffsets "group:<name>", that group's committed offsets of the topics read
    (from its coordinator; none if the group does not exist yet); else None."""
    group = group_of(options.starting_offsets)
    if group is None:
        return None
    with client_for(options, list(options.bootstrap), 15) as client:
        found: dict[tuple[str, int], int] = {}
        for topic in options.topics:
            found.update(client._group_offsets(group, topic))
    return found


def partitions_of(ranges: Sequence[OffsetRange]) -> list[FlotillaPartition]:
    """One Spark task per planned range."""
    return [FlotillaPartition(r) for r in ranges]
