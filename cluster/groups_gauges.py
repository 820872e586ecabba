"""The consumer-group gauges a coordinator serves (`cluster.metrics.GroupGauges`): each group's
lag per partition and its member count, and a queue group's in-flight and dead-lettered records
per partition, for the groups this node coordinates. Refreshed every
`REFRESH_S` from the coordinators (one metadata request for the topics' high watermarks), and
for one group on each DescribeGroup; a group whose coordinator moved away is forgotten here
(its new coordinator serves it). The snapshot is replaced whole, so a scrape (another thread)
reads one consistent copy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping

from cluster.metrics import GroupGauges
from consumers import Coordinator, GroupError, TopicMeta
from consumers.queue_types import QueuePartitionView
from proto import flotilla_pb2 as pb

__all__ = ["REFRESH_S", "GaugeKeeper", "group_lag", "high_watermarks"]

# How often the gauges are refreshed from the coordinators.
REFRESH_S = 10.0


def group_lag(high_watermark: int, log_start: int, committed: int | None) -> int:
    """Records a group has yet to consume in a partition: from its committed offset, or from
    the log start when it committed none."""
    return max(0, high_watermark - (log_start if committed is None else committed))


def high_watermarks(metadata: pb.MetadataResponse) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (high watermark, log start)} of a metadata answer."""
    return {
        (topic.name, info.index): (info.high_watermark, info.log_start)
        for topic in metadata.topics
        for info in topic.partitions
    }


class GaugeKeeper:
    def __init__(self, metadata: Callable[[list[str]], Awaitable[pb.MetadataResponse]]) -> None:
        """`metadata(topics)`: the node's metadata view (the topics' high watermarks)."""
        self._metadata = metadata
        self.gauges = GroupGauges()

    def note_group(
        self,
        group: str,
        members: int,
        lags: Iterable[tuple[str, int, int]],
        queue: Iterable[QueuePartitionView] = (),
    ) -> None:
        """A describe's fresh figures for `group`: members, (topic, partition, lag), and a queue
        group's partitions."""
        old = self.gauges
        lag = {k: v for k, v in old.lag.items() if k[0] != group}
        lag.update({(group, topic, partition): value for topic, partition, value in lags})
        in_flight = {k: v for k, v in old.in_flight.items() if k[0] != group}
        dead_lettered = {k: v for k, v in old.dead_lettered.items() if k[0] != group}
        for view in queue:
            in_flight[(group, view.topic, view.partition)] = view.in_flight
            dead_lettered[(group, view.topic, view.partition)] = view.dead_lettered
        self.gauges = GroupGauges(lag, {**old.members, group: members}, in_flight, dead_lettered)

    def forget(self, groups: Iterable[str]) -> None:
        gone = set(groups)
        if gone:
            old = self.gauges
            self.gauges = GroupGauges(
                {k: v for k, v in old.lag.items() if k[0] not in gone},
                {k: v for k, v in old.members.items() if k not in gone},
                {k: v for k, v in old.in_flight.items() if k[0] not in gone},
                {k: v for k, v in old.dead_lettered.items() if k[0] not in gone},
            )

    async def refresh(
        self, coordinators: Iterable[Coordinator], topics: Mapping[str, TopicMeta]
    ) -> None:
        committed: dict[tuple[str, str, int], int | None] = {}
        members: dict[str, int] = {}
        in_flight: dict[tuple[str, str, int], int] = {}
        dead_lettered: dict[tuple[str, str, int], int] = {}
        for coordinator in coordinators:
            for group in coordinator.groups():
                try:
                    view = coordinator.describe(group, topics)  # a queue group's: its queue
                except GroupError:
                    continue
                members[group] = len(view.members)
                floors = {(q.topic, q.partition): q.acked_floor for q in view.queue}
                for partition in view.partitions:
                    where = (partition.topic, partition.partition)
                    committed[(group, *where)] = floors.get(where, partition.committed)
                for queue in view.queue:
                    in_flight[(group, queue.topic, queue.partition)] = queue.in_flight
                    dead_lettered[(group, queue.topic, queue.partition)] = queue.dead_lettered
        names = sorted({topic for _, topic, _ in committed} & set(topics))
        marks = high_watermarks(await self._metadata(names)) if names else {}
        lag = {}
        for key, offset in committed.items():
            mark = marks.get(key[1:])
            if mark is not None:
                lag[key] = group_lag(*mark, offset)
        self.gauges = GroupGauges(lag, members, in_flight, dead_lettered)
