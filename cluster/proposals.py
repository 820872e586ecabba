"""A proposal (a batch for one replica's Raft log, with the waiter its proposer awaits) and how
its leader admits it: the only place a batch enters a leader's log, so that the idempotence
verdict (`cluster.idempotence`) and the append are one step, in proposal order, on the MultiRaft
driver (`cluster.multiraft`), which calls `admit` with the group's owed ticks given.

    admit(p) =
        ProposalDropped         if p.term and the node is at another term (a proposer that
                                decided in one leader term must not have its entry appended by
                                the same node leading again later, beside its successor's)
        OutOfOrderSequence      if the node leads and the verdict is not Fresh (refused,
                                unwritten: `Idempotence.refusal`)
        NotLeader               if the node does not lead (`RaftNode.propose`, with a hint)
        the entry's index       else: appended, the producer's next sequence noted for this
                                term, and the waiter registered at that index

Pure but for the replica it is given: no I/O, no clock, no loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.idempotence import Fresh, Verdict
from cluster.replica import Replica, Waiter
from raft.errors import ProposalDropped
from raft.types import Role

__all__ = ["Proposal", "admit"]


@dataclass(slots=True)
class Proposal:
    replica: Replica
    batch: bytes
    record_count: int
    timestamp_ms: int
    waiter: Waiter
    producer_id: int = 0
    base_sequence: int = 0
    # nonzero: only the leader of this term may append it. A proposer that decided in one term
    # (a timer partition's plan, made from what its leader knew then) must not have its entry
    # appended by the same node leading again in a later term, beside its successor's decisions
    term: int = 0


def admit(proposal: Proposal) -> int:
    """Appends the proposal to its replica's log (see the module docstring); the entry's index.
    Raises ProposalDropped, OutOfOrderSequence or NotLeader, unwritten; anything else is the
    replica's own failure."""
    replica, waiter = proposal.replica, proposal.waiter
    node = replica.node
    if proposal.term and node.term != proposal.term:
        raise ProposalDropped(
            f"{replica.group}: proposed for term {proposal.term}, the node is at term {node.term}"
        )
    idempotence, producer_id = replica.idempotence, proposal.producer_id
    verdict: Verdict | None = None
    if node.role is Role.LEADER:  # else propose raises NotLeader, with a hint
        term, base_sequence = node.term, proposal.base_sequence
        verdict = idempotence.admit(producer_id, base_sequence, proposal.record_count, term)
        refusal = idempotence.refusal(verdict, producer_id, base_sequence, term, replica.group)
        if refusal is not None:
            raise refusal
    index = node.propose(proposal.batch, proposal.record_count, proposal.timestamp_ms)
    if isinstance(verdict, Fresh):  # always, once propose succeeded (only a leader's does)
        idempotence.proposed(producer_id, verdict.next_sequence, node.term)
    waiter.index, waiter.term = index, node.term
    replica.waiters[index] = waiter
    replica.idle_ticks = 0
    return index
