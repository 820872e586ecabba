"""The membership simulator: many `Swim` members on a seeded lossy network, with ground truth.

`SimCluster` hosts the members tick by tick; `SimNetwork` loses, delays and partitions messages;
`membership.sim.scenario` scripts crashes, pauses, partitions, joins and leaves and measures
them; `membership.sim.faults` holds deliberately broken members for the checkers' own tests.
Everything is deterministic from a seed.
"""

from __future__ import annotations

from membership.sim.cluster import NodeStatus, RecordedEvent, SimCluster, SimNode
from membership.sim.network import NetworkConfig, SimNetwork

__all__ = ["NetworkConfig", "NodeStatus", "RecordedEvent", "SimCluster", "SimNetwork", "SimNode"]
