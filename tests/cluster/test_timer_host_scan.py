"""The timer host looks for timer partitions among a node's replicas every 0.1 s
(`cluster.timers.TimerHost._look`). A node may host 60,000 replicas (issue 28: 100,000
partitions RF3 on 5 nodes), so it walks them only when the hosted set changed
(`MultiRaft.hosted_version`), not at every look."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cluster.copy_produce import CopyProducer
from cluster.replica import Replica
from cluster.timers import TimerHost


@dataclass(frozen=True, slots=True)
class _Hosted:
    topic: str


class _CountingReplicas(dict[str, Replica]):
    """The hosted replicas, counting the walks over all of them."""

    walks = 0

    def items(self):  # type: ignore[no-untyped-def]
        self.walks += 1
        return super().items()

    def __iter__(self) -> Iterator[str]:
        self.walks += 1
        return super().__iter__()


def _nobody(*args: object) -> None:
    raise AssertionError(f"not expected to be called ({args})")


def _host(replicas: _CountingReplicas, version: list[int]) -> TimerHost:
    return TimerHost(
        topics=dict,
        replicas=lambda: replicas,
        propose=lambda proposal: None,
        copies=CopyProducer(_nobody, _nobody),  # type: ignore[arg-type]  # no timer partition
        tick_s=0.05,
        write_timeout_s=1.0,
        hosted_version=lambda: version[0],
    )


def test_the_look_walks_the_replicas_only_when_the_hosted_set_changed() -> None:
    replicas = _CountingReplicas(
        {f"t/{index}": _Hosted("t") for index in range(1000)}  # type: ignore[misc]
    )
    version = [1]
    host = _host(replicas, version)
    for _ in range(20):
        host._look()
    assert replicas.walks == 1, replicas.walks
    version[0] += 1  # a replica added or removed: the next look walks them again, once
    for _ in range(20):
        host._look()
    assert replicas.walks == 2, replicas.walks
    assert not host.followers and not host.slots
