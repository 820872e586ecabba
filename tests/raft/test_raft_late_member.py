"""A member that answers late (its node's inbox far behind, e.g. a node restarted with tens of
thousands of replicas) is not sent the same append again at every late answer: only an answer
to a heartbeat sent after the last append shows that append lost (messages to a member keep
their order), and only then may another go. On the `group` harness (conftest.py)."""

from __future__ import annotations

from raft.config import RaftConfig
from raft.types import AppendRequest, HeartbeatResponse

ABC = ("a", "b", "c")
E = RaftConfig().election_ticks


def _appends_to(g, member: str) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for m in g.sent if isinstance(m, AppendRequest) and m.recipient == member)


def test_an_answer_to_an_earlier_heartbeat_does_not_resend_the_append(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    g.tick(1)
    before = a._clock  # c answers a heartbeat sent now, before the append, only later
    g.tick(1, only=["a"])
    g.isolate("c")  # what a sends c from here on waits in c's inbox (here: is lost)
    g.run("a", lambda n: n.propose(b"x", 1))
    g.deliver()
    assert a.commit == a.log.last_index and a.match_index("c") < a.log.last_index
    sent = _appends_to(g, "c")
    # c, far behind, answers the heartbeat sent before the append: nothing shows it lost
    for _ in range(3):
        g.run("a", lambda n: n.step(HeartbeatResponse(a.term, "c", "a", before)))
    assert _appends_to(g, "c") == sent, "the append was sent again at a late answer"
    # an answer to a heartbeat sent after it: the append (or its answer) was lost
    g.tick(2, only=["a"])
    g.run("a", lambda n: n.step(HeartbeatResponse(a.term, "c", "a", a._clock)))
    assert _appends_to(g, "c") == sent + 1
    g.heal()
    g.tick(E, only=["a"])
    g.deliver()
    assert a.match_index("c") == a.log.last_index  # caught up once its answers arrive
