"""The topic table a node that is not a controller polls (`cluster.topics.TopicAdmin`): the whole
table comes every TOPICS_FULL_POLL_S, and each topic's spec is built again only when its answer
changed (building 100,000 partitions' specs held the event loop ~0.4 s a poll)."""

from __future__ import annotations

import pytest

from cluster import topics as topics_module
from cluster.config import NodeConfig
from cluster.topic_spec import TopicSpec
from cluster.topics import TopicAdmin
from proto import flotilla_pb2 as pb


def _topic(name: str, assignment: list[list[str]], uid: str = "u1") -> pb.TopicInfo:
    topic = pb.TopicInfo(name=name, replication_factor=len(assignment[0]), uid=uid)
    for index, replicas in enumerate(assignment):
        topic.partitions.append(pb.PartitionInfo(index=index, replicas=replicas))
    return topic


def test_a_topic_is_built_again_only_when_its_answer_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []
    spec_of = topics_module.spec_of

    def counting(topic: pb.TopicInfo) -> TopicSpec:
        built.append(topic.name)
        return spec_of(topic)

    monkeypatch.setattr(topics_module, "spec_of", counting)
    admin = TopicAdmin(NodeConfig(node_id="n9"), None, list, lambda: None, None)  # type: ignore[arg-type]
    a, b = _topic("a", [["n1", "n2"], ["n2", "n3"]]), _topic("b", [["n3", "n1"]])
    first = admin._specs([a, b])
    assert built == ["a", "b"]
    assert first["a"].assignment == (("n1", "n2"), ("n2", "n3"))
    again = admin._specs([_topic("a", [["n1", "n2"], ["n2", "n3"]]), b])  # the same answer
    assert built == ["a", "b"] and again["a"] is first["a"] and again["b"] is first["b"]
    moved = _topic("a", [["n1", "n2"], ["n2", "n4"]])  # a replica moved
    recreated = _topic("b", [["n3", "n1"]], uid="u2")  # deleted and created again
    changed = admin._specs([moved, recreated])
    assert built == ["a", "b", "a", "b"]
    assert changed["a"].assignment == (("n1", "n2"), ("n2", "n4")) and changed["b"].uid == "u2"
    assert set(admin._specs([moved])) == {"a"}  # b deleted
    assert built == ["a", "b", "a", "b"]
