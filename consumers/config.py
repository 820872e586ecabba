"""The coordinator's configuration: intervals and session limits, in milliseconds."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_CONFIG", "CoordinatorConfig"]


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    tick_ms: int = 100  # how often the node calls `tick`
    # what the coordinator asks of members, lowered to a third of a member's session timeout
    heartbeat_interval_ms: int = 500
    default_session_timeout_ms: int = 10_000
    min_session_timeout_ms: int = 1_000
    max_session_timeout_ms: int = 300_000

    def __post_init__(self) -> None:
        if self.tick_ms < 1 or self.heartbeat_interval_ms < 1:
            raise ValueError(
                f"tick_ms {self.tick_ms} and heartbeat_interval_ms "
                f"{self.heartbeat_interval_ms} must be >= 1"
            )
        if not (
            1
            <= self.min_session_timeout_ms
            <= self.default_session_timeout_ms
            <= self.max_session_timeout_ms
        ):
            raise ValueError(
                "session timeouts must satisfy 1 <= min <= default <= max, not "
                f"{self.min_session_timeout_ms} <= {self.default_session_timeout_ms} <= "
                f"{self.max_session_timeout_ms}"
            )


DEFAULT_CONFIG = CoordinatorConfig()
