"""A deliberately broken build for the disk nemesis's mutation test: a node that logs its storage
error and goes on instead of stopping (fail-stop's exit made a no-op). Run as
`python tests/chaos/node_without_failstop.py node --id ...`, in place of `python -m flotilla`."""

from __future__ import annotations

import sys

from cluster import failstop


def _go_on(code: int) -> None:
    """The mutation: the exit does nothing, so the node goes on after a failed write/fsync."""


failstop.FailStop.__init__.__defaults__ = (_go_on,)

from flotilla.cli import main  # noqa: E402 (the mutation is in place before the node exists)

sys.exit(main(sys.argv[1:]))
