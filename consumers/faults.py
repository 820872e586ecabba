"""Deliberate bugs, for proving that the simulator's checkers can fail. TEST-ONLY.

`CoordinatorFaults` is not part of `CoordinatorConfig` and is not exported by `consumers`: no
configuration reaches it. Only tests and `python -m consumers.sim --fault NAME` build one, and
`Coordinator` takes it as a separate keyword argument. Each field names the rule it breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = [
    "FAULT_NAMES",
    "NO_FAULTS",
    "QUEUE_FAULT_NAMES",
    "STREAM_FAULT_NAMES",
    "CoordinatorFaults",
]


@dataclass(frozen=True, slots=True)
class CoordinatorFaults:
    # grant a partition while another member's assignment still holds it (before its revocation
    # is confirmed or its session ended)
    grant_before_revoke: bool = False
    # accept a commit from a member that is not in the group (a zombie whose session ended)
    accept_zombie_commit: bool = False
    # accept a commit for a partition the member does not own (or owns since a newer epoch)
    commit_ignores_assignment: bool = False
    # never end a silent member's session
    never_expire: bool = False
    # name members from an unseeded random source instead of the replicated counter
    unseeded_member_ids: bool = False
    # on load, keep a partition's first committed offset instead of the last
    load_keeps_first_offset: bool = False
    # queues: replay drops leases (a new coordinator hands out leased records again)
    forget_lease_on_load: bool = False
    # queues: lease expiry ignores the deadline (every lease expires at the next tick)
    redeliver_before_deadline: bool = False
    # queues: a confirmed dead letter is decided again (under a new sequence)
    dead_letter_twice: bool = False
    # queues: a release restarts the record's delivery count
    reset_count_on_release: bool = False

    @property
    def any(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    @classmethod
    def named(cls, name: str) -> CoordinatorFaults:
        if name not in FAULT_NAMES:
            raise ValueError(f"unknown fault {name!r}; valid: {', '.join(FAULT_NAMES)}")
        return cls(**{name: True})


FAULT_NAMES = tuple(f.name for f in fields(CoordinatorFaults))
# the queue core's (`python -m consumers.sim --queue --fault NAME`); the rest are the groups'
QUEUE_FAULT_NAMES = (
    "forget_lease_on_load",
    "redeliver_before_deadline",
    "dead_letter_twice",
    "reset_count_on_release",
)
STREAM_FAULT_NAMES = tuple(name for name in FAULT_NAMES if name not in QUEUE_FAULT_NAMES)
NO_FAULTS = CoordinatorFaults()
