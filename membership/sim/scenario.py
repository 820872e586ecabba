"""The scripted run behind `python -m membership.sim`, and the JSON summary it prints.

One seed runs these phases on one `SimCluster` (times in simulated seconds; n = --nodes):

    bootstrap   n members join through n00; run until every view is complete (limit 60 s)
    steady      `steady_s` of normal operation: messages per member per protocol period
    crash       max(1, n // 16) members crash at once: ticks until the first `dead` verdict and
                until every running member holds it not-live (limit: the config's bound with
                the maximum awareness multiplier, which holds whatever the loss)
    pause/slow  one member pauses for half the minimum suspicion timeout, then resumes (it must
                refute); another is slow (inbound messages 1 s late) for 20 s; then 30 s more
    partition   the running members split into two halves for max suspicion timeout + 10 s,
                then heal: ticks until every view is complete again (limit 180 s)
    join        a new member joins through a random seed: ticks until all views agree (60 s)
    leave       a random member leaves gracefully: ticks until all views agree (60 s)

Throughout, every `dead` event is judged by `SimCluster.is_false_dead`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from membership.config import SwimConfig
from membership.sim.cluster import NodeStatus, SimCluster, SwimFactory
from membership.sim.network import NetworkConfig
from membership.swim import Swim
from membership.types import EventKind

__all__ = ["Scenario", "SeedResult", "percentile", "run_seed", "summarize"]


@dataclass(frozen=True, slots=True)
class Scenario:
    nodes: int = 32
    loss: float = 0.0
    steady_s: float = 60.0
    slow_s: float = 20.0
    heal_limit_s: float = 180.0
    converge_limit_s: float = 60.0
    swim: SwimConfig = field(default_factory=SwimConfig)
    base_delay_ticks: int = 0
    jitter_fraction: float = 0.05
    encode: bool = False

    def network(self) -> NetworkConfig:
        return NetworkConfig(
            loss=self.loss,
            base_delay_ticks=self.base_delay_ticks,
            jitter_fraction=self.jitter_fraction,
            encode=self.encode,
        )

    def ticks(self, seconds: float) -> int:
        return max(1, round(seconds * 1000 / self.swim.tick_ms))


@dataclass(slots=True)
class SeedResult:
    seed: int
    detection_first_ticks: list[int | None] = field(default_factory=list)
    detection_all_ticks: list[int | None] = field(default_factory=list)
    join_ticks: int | None = None
    leave_ticks: int | None = None
    heal_ticks: int | None = None
    messages_per_node_per_period: float = 0.0
    false_dead_declarations: int = 0
    false_dead_events: int = 0
    node_seconds: float = 0.0
    refutations: int = 0
    simulated_ticks: int = 0


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def _first_dead_tick(cluster: SimCluster, member_id: str, after: int) -> int | None:
    for recorded in cluster.events:
        event = recorded.event
        if recorded.tick >= after and event.kind is EventKind.DEAD and event.member.id == member_id:
            return recorded.tick
    return None


def measure_load(cluster: SimCluster, steady_ticks: int) -> float:
    """Messages sent per running member per protocol period over the next `steady_ticks`."""
    running = cluster.running_ids()
    addresses = [cluster.nodes[m].swim.self_member.address for m in running]
    before = sum(cluster.network.sent_by[a] for a in addresses)
    cluster.run(steady_ticks)
    sent = sum(cluster.network.sent_by[a] for a in addresses) - before
    periods = steady_ticks / cluster.config.probe_interval_ticks
    return sent / (len(running) * periods)


def run_seed(scenario: Scenario, seed: int, swim_factory: SwimFactory = Swim) -> SeedResult:
    config = scenario.swim
    n = scenario.nodes
    cluster = SimCluster.bootstrap(n, config, scenario.network(), seed, swim_factory=swim_factory)
    rng = random.Random(seed ^ 0x5EED)
    result = SeedResult(seed)
    converge_limit = scenario.ticks(scenario.converge_limit_s)

    cluster.phase = "bootstrap"
    cluster.run_until(cluster.converged, converge_limit)
    cluster.phase = "steady"
    result.messages_per_node_per_period = measure_load(cluster, scenario.ticks(scenario.steady_s))

    cluster.phase = "crash"
    # Crash.
    victims = rng.sample(cluster.running_ids(), max(1, n // 16))
    crash_tick = cluster.now
    for victim in victims:
        cluster.crash(victim)
    bound = config.crash_detection_bound_ticks(n, config.awareness_max_multiplier)
    all_ticks: dict[str, int] = {}
    while cluster.now - crash_tick < bound and len(all_ticks) < len(victims):
        cluster.step()
        for victim in victims:
            if victim not in all_ticks and cluster.all_see_not_live(victim):
                all_ticks[victim] = cluster.now - crash_tick
    for victim in victims:
        first = _first_dead_tick(cluster, victim, crash_tick)
        result.detection_first_ticks.append(None if first is None else first - crash_tick)
        result.detection_all_ticks.append(all_ticks.get(victim))
    cluster.run(scenario.ticks(5))

    cluster.phase = "pause"
    # A short pause (must refute, never be declared dead) and a slow member.
    paused, slowed = rng.sample(cluster.running_ids(), 2)
    cluster.pause(paused, excused=False)
    cluster.slow(slowed, scenario.ticks(scenario.slow_s))
    cluster.run(max(1, config.suspicion_min_timeout_ticks(n) // 2))
    cluster.resume(paused)
    cluster.run(scenario.ticks(30))

    cluster.phase = "partition"
    # Partition into halves, long enough for each side to declare the other dead; heal.
    running = cluster.running_ids()
    rng.shuffle(running)
    half = len(running) // 2
    cluster.partition([set(running[:half]), set(running[half:])])
    cluster.run(config.suspicion_max_timeout_ticks(n) + scenario.ticks(10))
    cluster.heal()
    cluster.phase = "heal"
    result.heal_ticks = cluster.run_until(cluster.converged, scenario.ticks(scenario.heal_limit_s))
    cluster.run(scenario.ticks(10))

    cluster.phase = "join"
    # Join.
    seed_member = rng.choice(cluster.running_ids())
    cluster.add_node("joiner", seeds=[seed_member], rack="r9")
    result.join_ticks = cluster.run_until(cluster.converged, converge_limit)
    cluster.run(scenario.ticks(5))

    cluster.phase = "leave"
    # Graceful leave.
    leaver = rng.choice([m for m in cluster.running_ids() if m != "joiner"])
    cluster.leave(leaver)
    result.leave_ticks = cluster.run_until(cluster.converged, converge_limit)

    false_events = cluster.false_dead_events()
    result.false_dead_events = len(false_events)
    result.false_dead_declarations = sum(
        1 for e in false_events if e.event.declared_by == e.observer_id
    )
    result.node_seconds = cluster.node_seconds
    result.refutations = cluster.refutations
    result.simulated_ticks = cluster.now
    assert all(cluster.nodes[m].status is not NodeStatus.PAUSED for m in cluster.nodes), (
        "no member may stay paused at the end of a run"
    )
    return result


def _periods(ticks: int, config: SwimConfig) -> float:
    return round(ticks / config.probe_interval_ticks, 2)


def _troubled(result: SeedResult) -> bool:
    measured = [
        *result.detection_first_ticks,
        *result.detection_all_ticks,
        result.join_ticks,
        result.leave_ticks,
        result.heal_ticks,
    ]
    return result.false_dead_events > 0 or any(t is None for t in measured)


def _timing(ticks: list[int | None], config: SwimConfig) -> dict[str, Any]:
    done = [float(t) for t in ticks if t is not None]
    median = percentile(done, 50)
    p99 = percentile(done, 99)

    def periods(value: float | None) -> float | None:
        return None if value is None else round(value / config.probe_interval_ticks, 2)

    def seconds(value: float | None) -> float | None:
        return None if value is None else round(config.seconds(value), 2)

    return {
        "median_periods": periods(median),
        "p99_periods": periods(p99),
        "median_s": seconds(median),
        "p99_s": seconds(p99),
        "samples": len(done),
        "failed": len(ticks) - len(done),
    }


def summarize(
    scenario: Scenario, results: list[SeedResult], fault: str, wall_s: float
) -> dict[str, Any]:
    config = scenario.swim
    node_hours = sum(r.node_seconds for r in results) / 3600.0
    declarations = sum(r.false_dead_declarations for r in results)
    loads = [r.messages_per_node_per_period for r in results]
    return {
        "nodes": scenario.nodes,
        "loss": scenario.loss,
        "seeds": len(results),
        "fault": fault,
        "tick_ms": config.tick_ms,
        "probe_interval_s": config.seconds(config.probe_interval_ticks),
        "crash_detection": {
            "first_dead": _timing([t for r in results for t in r.detection_first_ticks], config),
            "all_members": _timing([t for r in results for t in r.detection_all_ticks], config),
            "bound_periods": {
                "lossless": _periods(config.crash_detection_bound_ticks(scenario.nodes), config),
                "any_loss": _periods(
                    config.crash_detection_bound_ticks(
                        scenario.nodes, config.awareness_max_multiplier
                    ),
                    config,
                ),
            },
        },
        "false_dead": {
            "declarations": declarations,
            "events": sum(r.false_dead_events for r in results),
            "node_hours": round(node_hours, 2),
            "per_node_hour": round(declarations / node_hours, 4) if node_hours else 0.0,
        },
        "convergence": {
            "join": _timing([r.join_ticks for r in results], config),
            "leave": _timing([r.leave_ticks for r in results], config),
            "partition_heal": _timing([r.heal_ticks for r in results], config),
        },
        "messages_per_node_per_period": {
            "mean": round(sum(loads) / len(loads), 3) if loads else None,
            "max": round(max(loads), 3) if loads else None,
        },
        "refutations": sum(r.refutations for r in results),
        # Replay one with: python -m membership.sim --nodes N --loss L --seeds 1 --seed-base SEED
        "seeds_with_false_dead_or_failure": [r.seed for r in results if _troubled(r)],
        "simulated_s": round(config.seconds(sum(r.simulated_ticks for r in results)), 1),
        "wall_s": round(wall_s, 2),
    }
