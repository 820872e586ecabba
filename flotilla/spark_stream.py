"""`spark.readStream.format("flotilla")`: micro-batches of offset ranges per topic-partition.

Offsets are JSON per topic-partition, `{"orders": {"0": 120, "1": 97}}`: the next offset to read
(exclusive end of what is done). Spark writes each micro-batch's end into the checkpoint before
running it and commits it after the sink; a restarted query resumes from the last committed end,
so with an exactly-once sink every record lands once. `latestOffset` never goes past a
partition's high watermark (its commit index), and admits at most `maxOffsetsPerTrigger`
records per micro-batch (Spark's `ReadMaxRows` admission control, PySpark >= 4.2), shared among
partitions in proportion to their backlog.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from flotilla.spark_partition import describe_topics, group_offsets, partitions_of
from flotilla.spark_plan import SparkOptions, plan_ranges, resolve_offsets
from flotilla.spark_read import read_output

__all__ = ["FlotillaStreamReader", "admit"]

StreamOffset = dict[str, dict[str, int]]  # topic -> str(partition) -> next offset


def _encode(offsets: dict[str, dict[int, int]]) -> StreamOffset:
    return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in offsets.items()}


def _decode(offsets: StreamOffset) -> dict[str, dict[int, int]]:
    return {t: {int(p): int(o) for p, o in ps.items()} for t, ps in offsets.items()}


def admit(
    start: dict[str, dict[int, int]], latest: dict[str, dict[int, int]], max_rows: int
) -> dict[str, dict[int, int]]:
    """End offsets admitting at most `max_rows` records in all, shared by backlog; every
    partition with a backlog gets at least one record while the budget lasts."""
    backlog = {
        (t, p): max(0, latest[t][p] - start.get(t, {}).get(p, latest[t][p]))
        for t in latest
        for p in latest[t]
    }
    total = sum(backlog.values())
    end = {t: {p: start.get(t, {}).get(p, o) for p, o in ps.items()} for t, ps in latest.items()}
    if total <= max_rows:
        return {t: dict(ps) for t, ps in latest.items()}
    budget = max_rows
    for (t, p), waiting in sorted(backlog.items()):
        share = min(waiting, max(1, waiting * max_rows // total), budget)
        end[t][p] += share
        budget -= share
    return end


class FlotillaStreamReader(DataSourceStreamReader):
    def __init__(self, options: SparkOptions) -> None:
        self.options = options

    def _latest(self) -> tuple[dict[str, Any], dict[str, dict[int, int]]]:
        topics = describe_topics(self.options)
        return topics, resolve_offsets("endingOffsets", "latest", topics)

    def initialOffset(self) -> StreamOffset:
        topics = describe_topics(self.options)
        return _encode(
            resolve_offsets(
                "startingOffsets",
                self.options.starting_offsets,
                topics,
                group_offsets(self.options),
            )
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger > 0:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: StreamOffset, limit: ReadLimit) -> StreamOffset:
        topics, latest = self._latest()
        begin = _decode(start)
        for topic, info in topics.items():  # partitions added since: from their log start
            for p in info.partitions:
                begin.setdefault(topic, {}).setdefault(p.index, p.log_start)
        if isinstance(limit, ReadMaxRows):
            return _encode(admit(begin, latest, limit.max_rows))
        return _encode(latest)

    def reportLatestOffset(self) -> StreamOffset:
        return _encode(self._latest()[1])

    def partitions(self, start: StreamOffset, end: StreamOffset) -> Sequence[InputPartition]:
        addresses: dict[str, str] = {}
        topics = describe_topics(self.options, addresses)
        first, last = _decode(start), _decode(end)
        for topic, info in topics.items():
            begins, ends = first.setdefault(topic, {}), last.setdefault(topic, {})
            for p in info.partitions:
                if p.index not in begins:  # added since `start`: read from its log start
                    begins[p.index] = min(p.log_start, ends.get(p.index, p.log_start))
                ends.setdefault(p.index, begins[p.index])  # added since `end`: next batch
        ranges = plan_ranges(
            topics, first, last, self.options, ending_option="latestOffset", addresses=addresses
        )
        return partitions_of(ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_output(partition.value, self.options)

    def commit(self, end: StreamOffset) -> None:
        """Nothing to release: the log keeps records by retention, not by consumer progress."""
