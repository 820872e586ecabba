"""How hostile one simulated run is: drawn from its seed, so seeds sweep a range of conditions
(lossy or clean networks, long or short delays, frequent or rare crashes, tiny or large message
batches, PreVote / CheckQuorum on or off, quiescence on or off)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from raft.config import RaftConfig
from raft.sim.network import NetworkFaults

__all__ = ["SimProfile"]


@dataclass(frozen=True, slots=True)
class SimProfile:
    """Rates are per tick of the chaos phase unless said otherwise.

    chaos_ticks:    (min, max) length of a chaos phase; a calm phase follows each.
    calm_ticks:     length of a calm phase: partitions healed, crashed nodes restarted, no
                    drops; liveness is checked.
    leader_bound_ticks, commit_bound_ticks: the liveness bounds of a calm phase: a leader
                    within the first, every calm proposal committed within the second.
    eager_crash_rate: chance per tick that a leader holding uncommitted entries crashes (the
                    moment that loses half-replicated entries: Raft paper, Figure 8).
    pivot_crash_rate: chance that a leader crashes after persisting, but before sending, the
                    Ready in which it was elected or advanced its commit index.
    calm_propose_rate: proposals per tick in a calm phase: at most half the replication
                    capacity the flow-control settings allow, so the queue stays bounded.
    parallel_rate:  chance a leader's Ready is sent before its fsync (thesis §10.2.1).
    codec_rate:     chance a message travels encoded (msgpack round trip).
    disk:           where hosts keep their log and hard state (`raft.sim.disk.DISK_MODES`):
                    "memory" (the simulator's own model) or "sim" (the real storage on a
                    `SimDisk`). Chosen by the caller, not drawn.
    flip_rate:      on a simulated disk, the chance a crash of the one host chosen for it
                    also flips a bit in one of its sealed segments (found on reopen: the host
                    then stays down). Chosen by the caller.
    io_error_rate:  on a simulated disk, the chance each write and fsync of a chaos phase
                    fails (EIO or ENOSPC): the host fail-stops. Chosen by the caller.
    churn_rate:     chance per tick that a membership-churn episode starts (`raft.sim.churn`).
    """

    nodes: int
    raft: RaftConfig
    network: NetworkFaults
    crash_rate: float
    eager_crash_rate: float
    pivot_crash_rate: float
    max_down_ticks: int
    partition_rate: float
    heal_rate: float
    transfer_rate: float
    config_rate: float
    compact_rate: float
    propose_rate: float
    calm_propose_rate: float
    quiesce: bool
    parallel_rate: float
    codec_rate: float
    churn_rate: float
    chaos_ticks: tuple[int, int]
    calm_ticks: int
    leader_bound_ticks: int
    commit_bound_ticks: int
    disk: str = "memory"
    flip_rate: float = 0.0
    io_error_rate: float = 0.0

    @classmethod
    def draw(cls, rng: random.Random, nodes: int) -> SimProfile:
        election_ticks = rng.choice((6, 10, 10, 16))
        max_delay = rng.choice((0, 1, 1, 2, 3))
        raft = RaftConfig(
            election_ticks=election_ticks,
            heartbeat_ticks=rng.choice((1, 1, 2)),
            max_msg_bytes=rng.choice((1, 2, 200, 1 << 20)),  # 1, 2: one entry a message
            max_inflight_bytes=rng.choice((1, 300, 1 << 20)),
            max_inflight_msgs=rng.choice((1, 4, 64)),
            max_uncommitted_bytes=rng.choice((600, 3000, 1 << 20)),
            pre_vote=rng.random() < 0.8,
            check_quorum=rng.random() < 0.8,
        )
        network = NetworkFaults(
            drop_rate=rng.choice((0.0, 0.01, 0.05, 0.2)),
            duplicate_rate=rng.choice((0.0, 0.02, 0.1)),
            max_delay_ticks=max_delay,
            reorder=rng.random() < 0.8,
        )
        chaos_ticks = (3 * election_ticks, 25 * election_ticks)
        propose_rate = rng.choice((0.1, 0.3, 0.8))
        # Liveness bounds. Replication capacity, in ticks per entry, is one round trip per
        # window of in-flight entries; a calm phase proposes at no more than half of it, and
        # its commit bound allows for draining the most a chaos phase can leave uncommitted.
        ticks_per_entry = (2 * max_delay + 2) / _window_entries(raft)
        backlog = min(raft.max_uncommitted_bytes // _ENTRY_BYTES + 1, chaos_ticks[1]) + 20
        leader_bound = 12 * election_ticks + 10 * max_delay
        commit_bound = leader_bound + 4 * election_ticks + int(2 * ticks_per_entry * backlog)
        return cls(
            nodes=nodes,
            raft=raft,
            network=network,
            crash_rate=rng.choice((0.0, 0.005, 0.02, 0.05)),
            eager_crash_rate=rng.choice((0.0, 0.0, 0.05, 0.2)),
            pivot_crash_rate=rng.choice((0.0, 0.0, 0.1, 0.3)),
            max_down_ticks=rng.choice((1, 2 * election_ticks, 6 * election_ticks)),
            partition_rate=rng.choice((0.0, 0.01, 0.03)),
            heal_rate=rng.choice((0.02, 0.1)),
            transfer_rate=rng.choice((0.0, 0.01, 0.05)),
            config_rate=rng.choice((0.0, 0.05, 0.2)),
            compact_rate=rng.choice((0.0, 0.02, 0.1)),
            propose_rate=propose_rate,
            calm_propose_rate=min(propose_rate, 0.5 / ticks_per_entry),
            quiesce=rng.random() < 0.3,
            parallel_rate=rng.choice((0.0, 0.5, 1.0)),
            codec_rate=rng.choice((0.0, 0.05)),
            churn_rate=rng.choice((0.0, 0.01, 0.03)),
            chaos_ticks=chaos_ticks,
            calm_ticks=commit_bound + 10 * election_ticks,
            leader_bound_ticks=leader_bound,
            commit_bound_ticks=commit_bound,
        )


_ENTRY_BYTES = 53  # a simulated batch: ~5 bytes of data + ENTRY_OVERHEAD_BYTES


def _window_entries(raft: RaftConfig) -> int:
    """Entries a leader keeps in flight to one follower in the replicate state."""
    per_message = max(1, raft.max_msg_bytes // _ENTRY_BYTES)
    by_bytes = max(1, -(-raft.max_inflight_bytes // _ENTRY_BYTES))
    return max(1, min(per_message * raft.max_inflight_msgs, by_bytes))
