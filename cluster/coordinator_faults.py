"""TEST-ONLY: deliberate bugs in a node's group coordinators, for proving that a test or a
chaos checker catches them. Unset (the default, and the only setting for real use), nothing here
does anything.

`FLOTILLA_COORDINATOR_FAULTS=<name>[,<name>...]` (read once, when the node is built):
- a name of `consumers.faults.CoordinatorFaults` (e.g. `forget_lease_on_load`): the node builds
  its coordinators with that fault;
- `dead_letter_stall_after_copy` (the node's own, not the core's): the dead-letter copier
  (`cluster.dead_letters`) copies one dead letter and then never confirms it nor copies another,
  so a test can kill -9 that coordinator between the copy and its bookkeeping.
A node started with any of them logs a loud warning. An unknown name stops the node at start
(`ConfigError`, exit code 2).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster.config import ConfigError
from consumers.faults import FAULT_NAMES, NO_FAULTS, CoordinatorFaults

__all__ = ["ENV_VAR", "SHELL_FAULT_NAMES", "NodeFaults", "faults_from_env"]

log = logging.getLogger("flotilla.groups")

ENV_VAR = "FLOTILLA_COORDINATOR_FAULTS"
STALL_AFTER_COPY = "dead_letter_stall_after_copy"
SHELL_FAULT_NAMES = (STALL_AFTER_COPY,)


@dataclass(slots=True)
class NodeFaults:
    """The faults a node's coordinators run with. `stalled`: the stall fault has fired (the
    copier copied once and confirms nothing from then on), for every coordinator of the node."""

    names: tuple[str, ...] = ()
    coordinator: CoordinatorFaults = NO_FAULTS
    dead_letter_stall_after_copy: bool = False
    stalled: bool = field(default=False)

    @property
    def any(self) -> bool:
        return bool(self.names)

    def warn(self) -> None:
        if self.any:
            log.warning(
                "TEST-ONLY FAULTS ARMED: %s=%s: this node's group coordinators are deliberately "
                "broken; never run it for real data", ENV_VAR, ",".join(self.names),
            )  # fmt: skip


def faults_from_env(environ: Mapping[str, str] | None = None) -> NodeFaults:
    """The faults `FLOTILLA_COORDINATOR_FAULTS` names (none when unset or empty). Raises
    `ConfigError` naming an unknown fault and the valid ones."""
    text = (os.environ if environ is None else environ).get(ENV_VAR, "")
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        return NodeFaults()
    valid = (*FAULT_NAMES, *SHELL_FAULT_NAMES)
    for name in names:
        if name not in valid:
            raise ConfigError(f"{ENV_VAR}: unknown fault {name!r}; valid: {', '.join(valid)}")
    core = [name for name in names if name in FAULT_NAMES]
    return NodeFaults(
        names=names,
        coordinator=CoordinatorFaults(**dict.fromkeys(core, True)),
        dead_letter_stall_after_copy=STALL_AFTER_COPY in names,
    )
