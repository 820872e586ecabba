"""Parallel workers draw local-cluster ports from disjoint ranges (tests/conftest.py), and
`cluster.local` keeps to the range it is given."""

from __future__ import annotations

import pytest
from harness import worker_port_range

from cluster import local


def test_workers_get_disjoint_ranges_inside_the_range_below_ephemeral() -> None:
    for workers in (1, 2, 3, 4):
        ranges = [worker_port_range(f"gw{n}", workers) for n in range(workers)]
        assert all(20_000 <= low < high <= 32_768 for low, high in ranges), ranges
        ports = [set(range(low, high)) for low, high in ranges]
        assert sum(len(p) for p in ports) == len(set().union(*ports)), ranges  # disjoint
    with pytest.raises(ValueError, match="gw2"):
        worker_port_range("gw2", 2)


def test_free_port_keeps_to_the_range_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(local.PORTS_ENV, "21000-21050")
    ports = {local.free_port("127.0.0.1") for _ in range(20)}
    assert all(21_000 <= port < 21_050 for port in ports), ports


@pytest.mark.parametrize("text", ["21000", "x-y", "21050-21000", "1000-2000", "30000-40000"])
def test_a_bad_range_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(local.PORTS_ENV, text)
    with pytest.raises(ValueError, match=f"{local.PORTS_ENV}={text!r}: use LOW-HIGH"):
        local.free_port("127.0.0.1")
