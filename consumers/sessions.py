"""Member sessions, counted in coordinator ticks. Not replicated: a coordinator that takes over
(failover) starts every member's session afresh, so a failover alone ends no session.

A member heard after tick t (and before tick t + 1) with a session of T ticks expires at tick
t + T + 1, where T = ceil(session_timeout_ms / tick_ms): T whole tick intervals after it was heard,
so silent for its whole session timeout, never less (the node's ticks never run ahead of its
clock). The member, which gives up once its session timeout has passed since it *sent* the last
heartbeat that was answered, therefore always gives its partitions up before the coordinator
hands them on.
"""

from __future__ import annotations

__all__ = ["Sessions", "session_ticks"]

MemberKey = tuple[str, str]  # (group, member id)


def session_ticks(session_timeout_ms: int, tick_ms: int) -> int:
    return max(1, -(-session_timeout_ms // tick_ms))


class Sessions:
    def __init__(self) -> None:
        self.now = 0  # ticks
        self._deadlines: dict[MemberKey, int] = {}

    def touch(self, key: MemberKey, ticks: int) -> None:
        self._deadlines[key] = self.now + ticks + 1

    def end(self, key: MemberKey) -> None:
        self._deadlines.pop(key, None)

    def deadline(self, key: MemberKey) -> int | None:
        return self._deadlines.get(key)

    def advance(self) -> list[MemberKey]:
        """One tick passes: the sessions that ended, in a stable order (they are forgotten)."""
        self.now += 1
        expired = sorted(key for key, deadline in self._deadlines.items() if deadline <= self.now)
        for key in expired:
            del self._deadlines[key]
        return expired
