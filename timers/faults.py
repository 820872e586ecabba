"""Deliberate bugs, for proving the timer checkers can fail. TEST-ONLY (as consumers/faults.py):
never reachable from configuration; tests, `python -m timers.sim --fault NAME` and the node's
test-only FLOTILLA_TIMER_FAULTS hook build one."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["FAULT_NAMES", "NO_FAULTS", "TimerFaults"]


@dataclass(frozen=True, slots=True)
class TimerFaults:
    fire_twice: bool = False  # a planned batch is planned again (fired twice)
    fire_early: bool = False  # timers are planned before their due time
    forget_last_plan: bool = False  # a new leader does not fire the last plan again (loses it)
    skip_far_bucket: bool = False  # a bucket beyond the window is never loaded (timers lost)
    # a plan fired in full is not marked so (`TimerBook.done_marker`): a later leader fires it
    # again, and once the source forgot the fire producer (a day idle) the repeat lands again
    no_done_marker: bool = False
    # a held batch rolled forward stays held beside its copy: the original and the copy are
    # both live (both planned, both fired)
    roll_keeps_original: bool = False
    # the copier (`cluster.copy_produce`, modelled by `timers.sim.firing.Copier`) rebases a copy
    # the source refused as behind (SEQUENCE_BEHIND), as it did before that reason existed: a
    # plan fired again past the batches the source remembers lands twice. Honoured by the
    # simulator only (the node's copier has no such switch)
    rebase_behind: bool = False
    # the copier rebases a copy the source refused because its first copy is still in flight
    # (proposed, not appended: SEQUENCE_IN_FLIGHT), as it did before that reason existed (any
    # ABORTED but SEQUENCE_BEHIND was rebased): the first copy lands, and the rebased one too.
    # Honoured by the simulator only
    rebase_in_flight: bool = False
    # a plan made while the last one is still being fired (two plans outstanding) does not
    # list the last one's batches again: a new leader fires only the new plan's, and those of
    # the last one that had not landed are lost
    no_carry: bool = False
    # a new leader fires again only the last plan's own batches, not those it carries (the
    # plan before it, whose outcome is as unknown)
    refire_own_only: bool = False

    @property
    def any(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    @classmethod
    def named(cls, name: str) -> TimerFaults:
        if name not in FAULT_NAMES:
            raise ValueError(f"unknown timer fault {name!r}; valid: {', '.join(FAULT_NAMES)}")
        return cls(**{name: True})


FAULT_NAMES = tuple(f.name for f in fields(TimerFaults))
NO_FAULTS = TimerFaults()
