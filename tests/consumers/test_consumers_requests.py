"""Commits and the admin requests through the coordinator: fencing (all or nothing), offsets keyed
by the topic's incarnation, commits that change nothing, and bad fields refused with a message
that names the field and what is valid, changing nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from consumers import (
    CommitRequest,
    Coordinator,
    FencedMember,
    GroupError,
    GroupNotEmpty,
    GroupNotFound,
    HeartbeatReply,
    HeartbeatRequest,
    InvalidGroupRequest,
    TopicMeta,
    UnknownTopic,
)
from consumers.types import JOIN, LEAVE

TOPICS = {"orders": TopicMeta("uid-1", 4), "audit": TopicMeta("uid-a", 2)}


def started() -> Coordinator:
    c = Coordinator()
    c.start()
    return c


def join(c: Coordinator, group: str = "g", topics: tuple[str, ...] = ("orders",)) -> HeartbeatReply:
    request = HeartbeatRequest(group, "", JOIN, 0, topics=topics)
    return c.heartbeat(request, TOPICS).reply


def commit(
    c: Coordinator, member: HeartbeatReply, *offsets: tuple[str, int, int], epoch: int = 0
) -> list[bytes]:
    request = CommitRequest("g", member.member_id, epoch or member.member_epoch, offsets)
    return c.commit(request, TOPICS).entries


# -- commits and fencing -------------------------------------------------------------------------


def test_a_member_commits_what_it_owns_and_a_repeat_writes_nothing() -> None:
    c = started()
    a = join(c)
    assert len(commit(c, a, ("orders", 0, 10), ("orders", 3, 5))) == 1
    assert c.offsets("g", TOPICS) == {("orders", 0): 10, ("orders", 3): 5}
    assert commit(c, a, ("orders", 0, 10), ("orders", 3, 5)) == []  # unchanged: no Raft write
    assert commit(c, a) == []
    assert len(commit(c, a, ("orders", 0, 10), ("orders", 3, 6))) == 1
    assert c.offsets("g", TOPICS, only=frozenset({"audit"})) == {}


def test_a_commit_naming_one_partition_not_owned_commits_nothing() -> None:
    c = started()
    a = join(c)
    b = join(c)  # owns nothing yet: A still holds everything
    with pytest.raises(FencedMember, match=r"does not own orders/1"):
        commit(c, b, ("orders", 1, 3))
    commit(c, a, ("orders", 0, 1))
    with pytest.raises(FencedMember, match="audit/0"):
        commit(c, a, ("orders", 0, 9), ("audit", 0, 1))  # A does not subscribe to audit
    assert c.offsets("g", TOPICS) == {("orders", 0): 1}  # all or nothing


def test_a_commit_from_an_unknown_or_expired_member_is_fenced() -> None:
    c = started()
    a = join(c)
    with pytest.raises(FencedMember, match="'g-99' is not in group 'g'"):
        commit(c, HeartbeatReply("g-99", 1, frozenset(), 0), ("orders", 0, 1))
    for _ in range(101):  # the default session: 10 s of 100 ms ticks, + 1 (see sessions)
        c.tick()
    with pytest.raises(FencedMember, match=a.member_id):
        commit(c, a, ("orders", 0, 1))
    assert c.offsets("g", TOPICS) == {}


def test_commit_epochs_a_bogus_one_is_fenced_an_older_one_only_for_older_grants() -> None:
    c = started()
    a = join(c)  # granted all four at epoch 2
    with pytest.raises(FencedMember, match="newer than its epoch 2"):
        commit(c, a, ("orders", 0, 1), epoch=3)
    commit(c, a, ("orders", 0, 1), epoch=2)
    # B joins and leaves: A is revoked nothing, but a partition freed and granted again
    # carries the new epoch; a commit with an epoch older than that grant is fenced
    b = join(c)
    owned = frozenset(("orders", p) for p in range(4))
    reply = c.heartbeat(HeartbeatRequest("g", a.member_id, 2, 0, owned=owned), TOPICS).reply
    c.heartbeat(HeartbeatRequest("g", a.member_id, 2, 0, owned=reply.assignment), TOPICS)
    c.heartbeat(HeartbeatRequest("g", b.member_id, LEAVE, 0), TOPICS)
    again = c.heartbeat(HeartbeatRequest("g", a.member_id, 2, 0, owned=reply.assignment), TOPICS)
    assert again.reply.member_epoch == 3 and again.reply.assignment == owned
    regranted = sorted(owned - reply.assignment)[0]
    with pytest.raises(FencedMember, match=f"does not own orders/{regranted[1]}"):
        commit(c, a, ("orders", regranted[1], 1), epoch=2)  # sent before the re-grant
    kept = sorted(reply.assignment)[0]
    commit(c, a, ("orders", kept[1], 7), epoch=2)  # a commit racing a grant is fine
    commit(c, a, ("orders", regranted[1], 1), epoch=3)


def test_an_admin_commit_only_when_the_group_has_no_members() -> None:
    c = started()
    a = join(c)
    admin = CommitRequest("g", "", LEAVE, (("orders", 0, 5),))
    with pytest.raises(GroupNotEmpty, match=a.member_id):
        c.commit(admin, TOPICS)
    with pytest.raises(GroupNotEmpty):
        c.reset_offsets("g", "orders", {0: 5}, TOPICS)
    with pytest.raises(GroupNotEmpty):
        c.delete_group("g")
    c.heartbeat(HeartbeatRequest("g", a.member_id, LEAVE, 0), TOPICS)
    assert len(c.commit(admin, TOPICS).entries) == 1
    assert len(c.reset_offsets("g", "orders", {1: 0, 2: 9}, TOPICS).entries) == 1
    assert c.reset_offsets("g", "orders", {1: 0}, TOPICS).entries == []
    assert c.offsets("g", TOPICS) == {("orders", 0): 5, ("orders", 1): 0, ("orders", 2): 9}
    assert c.groups() == ["g"]
    assert len(c.delete_group("g").entries) == 1
    assert c.groups() == []
    with pytest.raises(GroupNotFound, match="'g'"):
        c.delete_group("g")
    with pytest.raises(GroupNotFound):
        c.describe("g", TOPICS)
    assert c.offsets("g", TOPICS) == {}


def test_offsets_are_keyed_by_the_topics_incarnation() -> None:
    c = started()
    a = join(c)
    commit(c, a, ("orders", 0, 42))
    recreated = {**TOPICS, "orders": TopicMeta("uid-2", 4)}
    assert c.offsets("g", recreated) == {}
    view = c.describe("g", recreated)
    assert all(p.committed is None for p in view.partitions)
    assert c.describe("g", TOPICS).partitions[0].committed == 42
    # deleted (absent from the metadata): no offsets either, and no partitions to describe
    assert c.offsets("g", {"audit": TOPICS["audit"]}) == {}


def test_describe_lists_members_partitions_owners_and_committed_topics() -> None:
    c = started()
    a = join(c)
    commit(c, a, ("orders", 2, 8))
    c.heartbeat(HeartbeatRequest("g", a.member_id, LEAVE, 0), TOPICS)
    c.commit(CommitRequest("g", "", LEAVE, (("audit", 1, 3),)), TOPICS)
    view = c.describe("g", TOPICS)
    assert view.members == () and view.kind == "stream"
    assert [(p.topic, p.partition, p.committed, p.owner) for p in view.partitions] == [
        ("audit", 0, None, None),
        ("audit", 1, 3, None),
        ("orders", 0, None, None),
        ("orders", 1, None, None),
        ("orders", 2, 8, None),
        ("orders", 3, None, None),
    ]


# -- bad fields ----------------------------------------------------------------------------------


def beat(**fields: object) -> Callable[[Coordinator], object]:
    base: dict[str, object] = {
        "group": "g",
        "member_id": "",
        "member_epoch": JOIN,
        "session_timeout_ms": 0,
        "topics": ("orders",),
    }
    request = HeartbeatRequest(**{**base, **fields})  # type: ignore[arg-type]
    return lambda c: c.heartbeat(request, TOPICS)


def admin(
    *offsets: tuple[str, int, int], group: str = "g", epoch: int = LEAVE
) -> Callable[[Coordinator], object]:
    return lambda c: c.commit(CommitRequest(group, "", epoch, offsets), TOPICS)


BAD = [
    (beat(group=""), InvalidGroupRequest, r"group '' is not valid: use 1 to 200 .*A-Za-z0-9._-"),
    (beat(group="a/b"), InvalidGroupRequest, "group 'a/b' is not valid"),
    (beat(group="x" * 201), InvalidGroupRequest, "group 'xxx.* is not valid"),
    (
        beat(session_timeout_ms=999),
        InvalidGroupRequest,
        r"session_timeout_ms 999 .* 1000\.\.300000",
    ),
    (beat(session_timeout_ms=300_001), InvalidGroupRequest, "session_timeout_ms 300001"),
    (
        beat(kind="fifo"),
        InvalidGroupRequest,
        "kind 'fifo' is not served: valid kinds are stream, queue",
    ),
    (beat(member_epoch=-3), InvalidGroupRequest, r"member_epoch -3 .*0 \(join\)"),
    (beat(topics=None), InvalidGroupRequest, "topics: a join names"),
    (beat(topics=("ok", "bad topic")), InvalidGroupRequest, "topic 'bad topic' is not valid"),
    (beat(instance_id="i d"), InvalidGroupRequest, "instance_id 'i d' is not valid"),
    (admin(("orders", 0, -1)), InvalidGroupRequest, r"offset -1 for orders/0 is negative"),
    (admin(("orders", 4, 1)), InvalidGroupRequest, r"partition 4 .* partitions 0\.\.3"),
    (admin(("orders", -1, 1)), InvalidGroupRequest, "partition -1"),
    (admin(("nope", 0, 1)), UnknownTopic, "topic 'nope' does not exist"),
    (admin(("orders", 0, 1), ("orders", 0, 2)), InvalidGroupRequest, "orders/0 is named twice"),
    (admin(("orders", 0, 1), epoch=3), InvalidGroupRequest, "admin commit has member_epoch -1"),
    (admin(group="g\n"), InvalidGroupRequest, "group 'g\\\\n' is not valid"),
    (lambda c: c.describe("", TOPICS), InvalidGroupRequest, "group ''"),
    (lambda c: c.offsets("?", TOPICS), InvalidGroupRequest, "group '[?]'"),
    (lambda c: c.delete_group(" "), InvalidGroupRequest, "group ' '"),
    (lambda c: c.reset_offsets("g", "nope", {0: 1}, TOPICS), UnknownTopic, "'nope'"),
    (lambda c: c.reset_offsets("g", "orders", {9: 1}, TOPICS), InvalidGroupRequest, "partition 9"),
]


@pytest.mark.parametrize(("call", "error", "message"), BAD)
def test_bad_fields_are_refused_by_name_and_change_nothing(
    call: Callable[[Coordinator], object], error: type[GroupError], message: str
) -> None:
    c = started()
    a = join(c)
    commit(c, a, ("orders", 0, 3))
    before = c.describe("g", TOPICS), c.offsets("g", TOPICS), c.groups()
    with pytest.raises(error, match=message):
        call(c)
    assert (c.describe("g", TOPICS), c.offsets("g", TOPICS), c.groups()) == before


def test_a_member_commit_with_a_join_or_leave_epoch_is_refused() -> None:
    c = started()
    a = join(c)
    for epoch in (JOIN, LEAVE):
        with pytest.raises(InvalidGroupRequest, match=f"member_epoch {epoch}: a member commits"):
            c.commit(CommitRequest("g", a.member_id, epoch, (("orders", 0, 1),)), TOPICS)


def test_a_stream_group_refuses_a_member_of_another_kind() -> None:
    c = started()
    join(c)
    request = HeartbeatRequest("g", "", JOIN, 0, topics=("orders",), kind="queue")
    with pytest.raises(InvalidGroupRequest, match="kind 'queue'"):
        c.heartbeat(request, TOPICS)
