"""`OneWriterHistogram` exposes exactly what prometheus-client's `Histogram` does for the same
observations (bucket bounds, `le` meaning "at most", `_count`, `_sum`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from cluster.histogram import OneWriterHistogram

BUCKETS = (0.0002, 0.001, 0.5, 1, 10)


def _series(registry: CollectorRegistry) -> list[str]:
    text = generate_latest(registry).decode()
    return [line for line in text.splitlines() if line and "_created" not in line]


def test_the_exposition_is_prometheus_clients() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    histogram = OneWriterHistogram("x_seconds", "what x took", {"node": "n1"}, BUCKETS)
    ours.register(histogram)
    reference = Histogram("x_seconds", "what x took", ["node"], buckets=BUCKETS, registry=theirs)
    # on a bound (le: at most), between bounds, below the first, above the last
    for amount in (0.0002, 0.0001, 0.0003, 1, 1.0000001, 0.5, 10, 11, 0, 0.75):
        histogram.observe(amount)
        reference.labels("n1").observe(amount)
    assert _series(ours) == _series(theirs)
    assert 'x_seconds_bucket{le="0.0002",node="n1"} 3.0' in _series(ours)
