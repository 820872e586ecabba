"""Majority arithmetic and per-follower flow control, in isolation."""

from __future__ import annotations

from raft.progress import Progress, ProgressState
from raft.quorum import VoteResult, committed_index, has_quorum, vote_result


def test_committed_index_is_the_quorum_th_highest_match() -> None:
    matches = {"a": 9, "b": 7, "c": 3}
    assert committed_index(("a", "b", "c"), matches.__getitem__) == 7
    matches = {"a": 9, "b": 7, "c": 3, "d": 1}
    assert committed_index(tuple(matches), matches.__getitem__) == 3  # 3 of 4 hold >= 3
    assert committed_index((), matches.__getitem__) == 0


def test_vote_result_counts_only_voters() -> None:
    voters = ("a", "b", "c")
    assert vote_result(voters, {"a": True}) is VoteResult.PENDING
    assert vote_result(voters, {"a": True, "b": True}) is VoteResult.WON
    assert vote_result(voters, {"a": True, "b": False, "c": False}) is VoteResult.LOST
    assert vote_result(voters, {"a": True, "x": True, "y": True}) is VoteResult.PENDING
    assert has_quorum(voters, lambda v: v != "c") and not has_quorum(voters, lambda v: v == "a")


def test_probe_sends_one_message_then_waits() -> None:
    progress = Progress(next_index=11)
    assert not progress.is_paused(100, 10)
    progress.sent(last_index=12, size_bytes=80, entry_count=2)
    assert progress.is_paused(100, 10) and progress.next_index == 11
    assert progress.maybe_decrease_to(rejected=10, hint_index=4)
    assert progress.next_index == 5 and not progress.is_paused(100, 10)
    assert not progress.maybe_decrease_to(rejected=10, hint_index=2)  # stale: already moved


def test_replicate_streams_until_the_window_is_full() -> None:
    progress = Progress(next_index=1)
    assert progress.maybe_update(5)
    progress.become_replicate()
    assert progress.state is ProgressState.REPLICATE and progress.next_index == 6
    progress.sent(7, 60, 2)
    progress.sent(9, 60, 2)
    assert progress.next_index == 10 and progress.is_paused(100, 10)  # 120 bytes >= 100
    progress.free_to(7)
    assert not progress.is_paused(100, 10) and progress.inflight_bytes == 60
    assert progress.maybe_decrease_to(rejected=9, hint_index=0)
    assert progress.next_index == 6  # back to match + 1
    assert not progress.maybe_update(3)  # an old acknowledgement changes nothing


def test_a_member_whose_log_ends_below_its_match_index_is_probed_from_its_end() -> None:
    # it lost entries it acknowledged (a replica rebuilt after its log was found damaged)
    progress = Progress(next_index=1)
    assert progress.maybe_update(5)
    progress.become_replicate()
    assert not progress.maybe_decrease_to(rejected=5, hint_index=0)  # an append's: stale
    assert progress.match_index == 5
    assert progress.maybe_decrease_to(rejected=0, hint_index=0)  # a heartbeat's answer
    assert (progress.match_index, progress.next_index) == (0, 1)
    assert progress.state is ProgressState.PROBE


def test_reset_pauses_until_the_member_answers() -> None:
    progress = Progress(next_index=3)
    progress.reset_to(boundary_index=40)
    assert progress.next_index == 41 and progress.is_paused(100, 10)
    assert progress.maybe_update(40) and progress.match_index == 40
