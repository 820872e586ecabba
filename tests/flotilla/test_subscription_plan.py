"""A subscription's decisions (`flotilla._plans.Subscription`), without a cluster: which failures
end it and which send it to another replica."""

from __future__ import annotations

import time

import pytest

from flotilla._plans import METADATA_GRACE_S, Subscription
from flotilla._router import Router
from flotilla.errors import InvalidArgument, NotLeader, TopicNotFound, Unavailable


def _subscription() -> Subscription:
    return Subscription(Router(["127.0.0.1:1"]), "t", 0, 0, None, idle_s=5.0, stop_s=None)


def test_a_node_that_has_not_learned_a_new_topic_yet_is_left_for_another() -> None:
    """A topic just created may be unknown to a node for a moment (its metadata lags): within
    the grace reads and produces already allow, the subscription tries another replica."""
    subscription = _subscription()
    subscription.failed(TopicNotFound("topic 't' does not exist"))  # no raise: retried
    subscription.failed(Unavailable("a replica is starting"))
    subscription.failed(NotLeader("n2 leads"))


def test_a_topic_still_unknown_after_the_grace_ends_the_subscription(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    subscription = _subscription()
    later = time.monotonic() + METADATA_GRACE_S + 1
    monkeypatch.setattr(time, "monotonic", lambda: later)
    with pytest.raises(TopicNotFound):
        subscription.failed(TopicNotFound("topic 't' does not exist"))


def test_a_failure_no_replica_can_cure_ends_it_at_once() -> None:
    with pytest.raises(InvalidArgument):
        _subscription().failed(InvalidArgument("offset -1"))
