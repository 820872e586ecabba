"""Suite-wide pytest configuration: the `own_cluster` marker, and under pytest-xdist (`make
test` runs two workers) a port range of its own for each worker's local clusters."""

from __future__ import annotations

import os

import pytest
from harness import worker_port_range

from cluster.local import PORTS_ENV


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "own_cluster: the test kills, stops or pauses a node, so it gets a cluster of its own "
        "instead of its module's shared one",
    )
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        low, high = worker_port_range(worker, workers)
        os.environ[PORTS_ENV] = f"{low}-{high}"
