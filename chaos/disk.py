"""Disk faults on real nodes: a local cluster whose every node has its own fault-control file.

Each node is started with `FLOTILLA_DISK_FAULTS=<root>/<node id>.disk-faults.json` (the storage
layer's fault hook, armed only by that variable). The file holds a JSON object naming the
operations to fail and the error they fail with, e.g. `{"fsync": "EIO"}`; `{}` (or no file)
means no faults. The node re-reads it when it changes, so `arm` and `clear` take effect on the
running process. A node that gets a storage error must stop with exit code 75 (fail-stop) and
never retry the fsync; `wait_exit` is how the disk nemesis sees it do so.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.local import LocalCluster, NodeSpec

__all__ = [
    "DISK_FAULTS",
    "FAIL_STOP_EXIT_CODE",
    "FAULTS_ENV",
    "DiskFault",
    "DiskFaultCluster",
]

FAULTS_ENV = "FLOTILLA_DISK_FAULTS"
# The contract's exit code for a node that stopped on a storage error (cluster/failstop.py's
# FAIL_STOP_EXIT_CODE, not imported so that this module does not depend on a node's internals).
FAIL_STOP_EXIT_CODE = 75


@dataclass(frozen=True, slots=True)
class DiskFault:
    operation: str  # "write" or "fsync"
    error: str  # "EIO" or "ENOSPC"

    def to_json(self) -> str:
        return json.dumps({self.operation: self.error})

    def __str__(self) -> str:
        return f"{self.error} on {self.operation}"


DISK_FAULTS = tuple(
    DiskFault(operation, error) for operation in ("fsync", "write") for error in ("EIO", "ENOSPC")
)


class DiskFaultCluster(LocalCluster):
    """A `LocalCluster` whose nodes each read faults from their own control file.

    `launcher` (test-only): the command that runs a node in place of `python -m flotilla`, given
    the same arguments (`node --id ...`); a mutation test starts a deliberately broken build so."""

    def __init__(
        self, root: str | Path, nodes: int = 3, *, launcher: tuple[str, ...] = (), **options: Any
    ) -> None:
        super().__init__(root, nodes, **options)
        self.launcher = launcher

    def control_file(self, node_id: str) -> Path:
        return self.root / f"{node_id}.disk-faults.json"

    def command(self, spec: NodeSpec) -> list[str]:
        # env(1) execs the node in place: the pid (and process group) stay the node's own
        control = self.control_file(spec.node_id)
        command = super().command(spec)
        if self.launcher:
            assert command[1:3] == ["-m", "flotilla"], command
            command = [*self.launcher, *command[3:]]
        return ["env", f"{FAULTS_ENV}={control}", *command]

    def start(self, node_id: str | None = None, *, wait: bool = True) -> None:
        for each in [node_id] if node_id else list(self.nodes):
            if not self.control_file(each).exists():
                self._write(each, "{}")
        super().start(node_id, wait=wait)

    def arm(self, node_id: str, fault: DiskFault) -> None:
        self._write(node_id, fault.to_json())

    def clear(self, node_id: str) -> None:
        self._write(node_id, "{}")

    def _write(self, node_id: str, content: str) -> None:
        """Replaced in one rename, so the node never reads half a file."""
        path = self.control_file(node_id)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(content)
        os.replace(temporary, path)

    def wait_exit(self, node_id: str, timeout_s: float) -> int | None:
        """The node's exit code once it stops, or None if it is still running after timeout_s."""
        process = self.nodes[node_id].process
        if process is None:
            return None
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
