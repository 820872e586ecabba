"""The errors of the timer core: one hierarchy rooted in `TimerError`. Each message names the bad
value and what would be valid; an operation that raises one changed nothing."""

from __future__ import annotations

__all__ = ["InvalidTimer", "TimerError"]


class TimerError(Exception):
    """Base class of every error raised by `timers`."""


class InvalidTimer(TimerError, ValueError):
    """A timer batch, plan, summary or setting outside what the core accepts."""
