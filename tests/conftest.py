"""Suite-wide pytest configuration."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "own_cluster: the test kills, stops or pauses a node, so it gets a cluster of its own "
        "instead of its module's shared one",
    )
