"""The timer host looks for timer partitions among a node's replicas every 0.1 s
(`cluster.timers.TimerHost._look`). A node may host 60,000 replicas (issue 28: 100,000
partitions RF3 on 5 nodes), so it walks them only when the hosted set changed
(`MultiRaft.timer_groups_version`: a timer partition came or went), not at every look."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cluster.copy_produce import CopyProducer
from cluster.multiraft import MultiRaft
from cluster.replica import Replica
from cluster.timers import TimerHost
from raft.types import Role
from storage import StateJournal


class _Follower:
    """A Raft node as the host's timer wheel asks it: a follower whose ticks all matter."""

    role = Role.FOLLOWER
    quiesced = False
    leader_id = None

    def quiet_ticks(self) -> int:
        return 0


@dataclass(eq=False, slots=True)
class _Hosted:
    """A replica as `MultiRaft.add` / `remove` and the timer host see it."""

    topic: str
    group: str = ""
    node: _Follower = field(default_factory=_Follower)
    ticks_given: int = 0  # the host's timer-wheel bookkeeping (`Replica`)
    tick_due: int = 0
    counted: int = 0  # the host's count of leaders and led replicas (`Replica`)


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


def test_opening_ordinary_replicas_leaves_the_timer_partitions_unscanned(tmp_path: Path) -> None:
    """While a node opens thousands of replicas (a topic created, a restart) the hosted set
    changes at every batch: the timer host walks the replicas again only when a timer
    partition (`__timers.*`) came or went (`MultiRaft.timer_groups_version`, as the node wires
    it), not at every replica added."""

    async def run() -> None:
        multiraft = MultiRaft("n1", lambda *a: None, 0.05, StateJournal(tmp_path / "journal"))
        replicas = _CountingReplicas()
        multiraft.replicas = replicas
        host = _host(replicas, [0])
        host._hosted_version = lambda: multiraft.timer_groups_version
        host._look()
        walks = replicas.walks
        for index in range(500):  # a topic's replicas opening, a look between each
            multiraft.add(_Hosted("t", f"t/{index}"))  # type: ignore[arg-type]
            host._look()
        assert replicas.walks == walks, (replicas.walks, walks)
        timer = _Hosted("__timers.00ff/0", "__timers.00ff/0/0")
        multiraft.add(timer)  # type: ignore[arg-type]
        host._look()
        assert replicas.walks == walks + 1, (replicas.walks, walks)
        assert list(host.followers) == [timer.group]
        multiraft.remove("t/0")
        host._look()
        assert replicas.walks == walks + 1, (replicas.walks, walks)
        multiraft.remove(timer.group)
        host._look()
        assert replicas.walks == walks + 2 and not host.followers, (replicas.walks, walks)
        for group in list(replicas):
            multiraft.remove(group)
        await multiraft.stop()

    asyncio.run(run())
