"""Deliberate bugs, for proving that the simulator's checkers can fail. TEST-ONLY.

`CoordinatorFaults` is not part of `CoordinatorConfig` and is not exported by `consumers`: no
configuration reaches it. Only tests and `python -m consumers.sim --fault NAME` build one, and
`Coordinator` takes it as a separate keyword argument. Each field names the rule it breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["FAULT_NAMES", "NO_FAULTS", "CoordinatorFaults"]


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

    @property
    def any(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    @classmethod
    def named(cls, name: str) -> CoordinatorFaults:
        if name not in FAULT_NAMES:
            raise ValueError(f"unknown fault {name!r}; valid: {', '.join(FAULT_NAMES)}")
        return cls(**{name: True})


FAULT_NAMES = tuple(f.name for f in fields(CoordinatorFaults))
NO_FAULTS = CoordinatorFaults()
