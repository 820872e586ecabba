"""A controller's topics-only answer (the whole topic table, which every node that is not a
controller asks for every 30 s and at each change) is built once per table version, topics
asked and members: at 100,000 partitions building it held the controller's event loop about a
second each time (a py-spy of n1 electing 100,000 partitions on 5 nodes: 5.6% of its samples,
each call a stall its ticks and SWIM waited out). `MetadataView` over its own parts, with the
membership and the topic table standing still as a controller's do between changes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from cluster.config import NodeConfig
from cluster.metadata_view import MetadataView
from cluster.topic_spec import TopicSpec
from membership import Member, MemberState
from membership.types import MemberRecord
from proto import flotilla_pb2 as pb


@dataclass
class _Swim:
    table: list[MemberRecord] = field(default_factory=list)

    def records(self) -> tuple[MemberRecord, ...]:
        return tuple(self.table)


@dataclass
class _Gossip:
    swim: _Swim


def _view() -> tuple[MetadataView, dict[str, TopicSpec], list[int], _Swim]:
    topics = {"t": TopicSpec("t", 3, 2, assignment=(("a", "b"), ("b", "c"), ("c", "a")))}
    version = [5]
    swim = _Swim([MemberRecord(Member("a", "127.0.0.1:1"), MemberState.ALIVE, 1)])
    view = MetadataView(
        NodeConfig(node_id="a"), lambda: topics, cast(Any, None), cast(Any, _Gossip(swim)),
        cast(Any, None), lambda: None, lambda: True, topics_version=lambda: version[0],
    )  # fmt: skip
    return view, topics, version, swim


def _ask(view: MetadataView, *names: str) -> pb.MetadataResponse:
    return asyncio.run(view.metadata(list(names), topics_only=True))


def test_the_same_table_is_answered_with_the_answer_built_once() -> None:
    view = _view()[0]
    first = _ask(view)
    assert [list(p.replicas) for p in first.topics[0].partitions] == [
        ["a", "b"], ["b", "c"], ["c", "a"]
    ]  # fmt: skip
    assert first.topics_version == 5
    assert _ask(view) is first  # not built again
    assert _ask(view, "t") is first  # the same topics, named
    other = _ask(view, "gone")  # a topic the table does not hold is left out: another answer
    assert other is not first and not other.topics
    assert _ask(view) is not other and _ask(view).topics == first.topics


def test_a_new_table_version_or_a_member_change_is_answered_anew() -> None:
    view, topics, version, swim = _view()
    first = _ask(view)
    # the same topic grew a partition (the same names asked): the version tells
    topics["t"] = TopicSpec("t", 4, 2, assignment=(*topics["t"].assignment, ("a", "c")))
    version[0] = 6
    changed = _ask(view)
    assert len(changed.topics[0].partitions) == 4 and changed.topics_version == 6
    swim.table.append(MemberRecord(Member("b", "127.0.0.2:1"), MemberState.SUSPECT, 3))
    members = _ask(view)
    assert members is not changed
    assert [(m.id, m.state) for m in members.members] == [("a", pb.ALIVE), ("b", pb.SUSPECT)]
    assert first.topics_version == 5 and len(first.topics) == 1  # an answer given never changes
