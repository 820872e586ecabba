"""Deliberately broken members, for proving that the simulator's checkers can fail.

The production core has no fault flags: each fault here is a subclass that overrides one seam of
`ClusterState` or `Awareness` (the methods a test would otherwise monkeypatch). They are reachable
only through `membership.sim` (`--fault` on the command line) and the tests.
"""

from __future__ import annotations

from membership.awareness import Awareness
from membership.state import ClusterState
from membership.swim import Swim

__all__ = ["FAULTS"]

_FOREVER_TICKS = 10**9


class _NoRefuteState(ClusterState):
    def refute(self, incarnation: int, accuser_id: str | None) -> None:
        """Never defend ourselves: a suspected live member cannot clear its name."""


class _ZeroSuspicionState(ClusterState):
    def suspicion_window(self, live_members: int) -> tuple[int, int, int]:
        """Declare dead on the first failed probe (no time to refute)."""
        return 0, 0, 0


class _NeverDeadState(ClusterState):
    def suspicion_window(self, live_members: int) -> tuple[int, int, int]:
        """A suspicion never expires: crashed members are never declared dead."""
        return 0, _FOREVER_TICKS, _FOREVER_TICKS


class _FixedSuspicionState(ClusterState):
    def suspicion_window(self, live_members: int) -> tuple[int, int, int]:
        """Plain SWIM: a fixed suspicion timeout (the minimum), no confirmations."""
        minimum = self.config.suspicion_min_timeout_ticks(live_members)
        return 0, minimum, minimum


class _NoAwareness(Awareness):
    def apply_delta(self, delta: int) -> None:
        """Local health never changes: a struggling node keeps its short timeouts."""


class NoRefuteSwim(Swim):
    state_class = _NoRefuteState


class ZeroSuspicionTimeoutSwim(Swim):
    state_class = _ZeroSuspicionState


class NeverDeclareDeadSwim(Swim):
    state_class = _NeverDeadState


class NoLifeguardSwim(Swim):
    """SWIM without Lifeguard: no awareness, fixed suspicion timeout."""

    state_class = _FixedSuspicionState
    awareness_class = _NoAwareness


FAULTS: dict[str, type[Swim]] = {
    "none": Swim,
    "no-refute": NoRefuteSwim,
    "zero-suspicion-timeout": ZeroSuspicionTimeoutSwim,
    "never-declare-dead": NeverDeclareDeadSwim,
    "no-lifeguard": NoLifeguardSwim,
}
