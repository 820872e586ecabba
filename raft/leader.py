"""The leader's side of `RaftNode`: replication and flow control, commit, heartbeats and
CheckQuorum, leadership transfer, configuration changes and quiescence.

A mixin of `raft.core.RaftNode`, split out along the role seam; it shares the node's state.

Commits reach followers lazily: a commit sends appends only to followers with entries to take
(they carry the new commit index); the others hear of it on the leader's next tick. A commit's
own round of empty appends, and their answers, would otherwise delay the replies it releases.
"""

from __future__ import annotations

from raft.codec import encode_config_entry
from raft.errors import ConfigChangeRejected, ProposalDropped, TransferRejected
from raft.node_state import NodeState
from raft.progress import Progress, ProgressState
from raft.quorum import committed_index, has_quorum
from raft.types import (
    AppendRequest,
    AppendResponse,
    ConfigChange,
    ConfigChangeOp,
    Configuration,
    Entry,
    EntryKind,
    Heartbeat,
    LogBoundary,
    LogReset,
    NodeId,
    Removed,
    Role,
    TimeoutNow,
    VoteRequest,
)

__all__ = ["LeaderMixin"]


class LeaderMixin(NodeState):
    # -- public, leader only -------------------------------------------------------------------
    def transfer_leader(self, to: NodeId) -> None:
        """Hands leadership to voter `to`: it is caught up, then told to campaign at once
        (TimeoutNow). Proposals are refused until the transfer ends; it is abandoned after an
        election timeout."""
        self._require_leader()
        if to == self.id:
            return
        if to not in self._configuration.voters:
            raise TransferRejected(
                f"cannot transfer leadership to {to}: not a voter "
                f"(voters: {', '.join(self._voters)})"
            )
        if self._transferee == to:
            return
        self.wake()
        self._transferee = to
        self._transfer_elapsed = 0
        self._lease_void = True  # TimeoutNow lets `to` win despite followers' leases
        if self._progress[to].match_index == self.log.last_index:
            self._send(TimeoutNow(self.term, self.id, to))
        else:
            self._send_append(to)

    def change_config(self, change: ConfigChange) -> int:
        """Appends one single-server configuration change and returns its index. It takes
        effect at once (the latest configuration in the log rules). Refused while another change
        or this leader's first entry is uncommitted, or during a transfer. Removing the leader
        itself starts a transfer to the most caught-up voter and raises `ProposalDropped`:
        retry the removal on the new leader."""
        self._require_leader()
        if self._transferee is not None:
            raise ProposalDropped(
                f"leader {self.id} is transferring leadership to {self._transferee}"
            )
        if self._pending_conf_index > self.commit:
            raise ProposalDropped(
                f"entry {self._pending_conf_index} (a configuration change or the leader's "
                f"first entry) is not committed yet (commit {self.commit}): one change at a time"
            )
        new = self._changed_configuration(change)
        self.wake()
        data = encode_config_entry(change, new)
        index = self._append(EntryKind.CONFIG, data, 0, 0)
        self._pending_conf_index = index
        self._configs.append((index, new))
        self._use_configuration(new)
        self._broadcast_append()
        return index

    def match_index(self, node_id: NodeId) -> int | None:
        """What this leader knows `node_id` holds durably; None if not leader or not a member."""
        progress = self._progress.get(node_id)
        return None if progress is None else progress.match_index

    def is_caught_up(self, node_id: NodeId) -> bool:
        """Whether `node_id` holds every committed entry (the bar for promoting a learner)."""
        match = self.match_index(node_id)
        return match is not None and match >= self.commit

    def recently_active(self, node_id: NodeId) -> bool:
        """Whether `node_id` answered within the current check-quorum window."""
        progress = self._progress.get(node_id)
        return progress is not None and progress.recent_active

    def quiesce(self) -> bool:
        """Tries to put an idle group to sleep; True if it is (now) quiesced. Idle: every member
        holds the whole log (but one silent for a whole check-quorum window: see below) and it is
        all committed and durable. The leader then sends one quiescing heartbeat; followers that
        receive it stop expecting heartbeats. The host stops ticking a node while
        `node.quiesced`; any proposal, message or `wake()` resumes it."""
        if self.role is not Role.LEADER:
            return False
        if self.quiesced:
            return True
        last = self.log.last_index
        if self._transferee is not None or self.commit != last or self._durable_index != last:
            return False
        matched = []
        for node_id, progress in self._progress.items():
            if progress.match_index == last:
                if node_id != self.id:
                    matched.append(node_id)
            elif node_id == self.id or progress.recent_active or progress.was_active:
                return False  # a live member lags: it is sent the log first
        # the others are silent (down, cut off) since a whole window: they do not keep the group
        # awake, heartbeating into the void; they are sent nothing now (a quiescing heartbeat
        # would put a member that lacks entries to sleep for ever), and a silent member back
        # wakes the leader: its probe (`probe_membership`, at its node's restart) or its
        # pre-vote (its election timer runs)
        commit = self.commit
        for node_id in matched:
            self._send(Heartbeat(self.term, self.id, node_id, commit, True, self._clock))
            self._progress[node_id].commit_sent = commit
        self.quiesced = True
        return True

    # -- becoming leader and ticking -------------------------------------------------------------
    def _become_leader(self) -> None:
        self._reset(self.term)
        self._become_leader_hook()
        self._sync_progress()
        self._progress[self.id].match_index = min(self._durable_index, self.log.last_index)
        self._heartbeat_elapsed = 0
        # The no-op: commits everything before it (the current-term rule) and bars
        # configuration changes until it is committed (the single-server change fix).
        self._pending_conf_index = self._append(EntryKind.NOOP, b"", 0, 0)
        self._broadcast_append()

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        election_ticks = self.config.election_ticks
        if self._transferee is not None:
            self._transfer_elapsed += 1
            if self._transfer_elapsed >= election_ticks:
                self._transferee = None
        if self._election_elapsed >= election_ticks:
            self._election_elapsed = 0
            if self.config.check_quorum:
                progress = self._progress
                if not has_quorum(self._voters, lambda v: progress[v].recent_active):
                    self._become_follower(self.term, None)
                    return
                for node_id, each in progress.items():
                    each.was_active = each.recent_active
                    each.recent_active = node_id == self.id
        if self._heartbeat_elapsed >= self.config.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._broadcast_heartbeat()
        else:
            self._send_commit_updates()

    def _sync_progress(self) -> None:
        """Progress for exactly the members of the configuration in force."""
        progress = self._progress
        learners = self._configuration.learners
        next_index = self.log.last_index + 1
        for node_id in self._members:
            each = progress.get(node_id)
            if each is None:
                each = progress[node_id] = Progress(next_index)
                each.recent_active = True  # a new member gets one election timeout to answer
            each.is_learner = node_id in learners
        for node_id in [n for n in progress if n not in self._configuration.members]:
            del progress[node_id]
        if self.id not in progress:  # a leader outside its configuration still tracks itself
            progress[self.id] = Progress(next_index)
        progress[self.id].recent_active = True
        if self._transferee is not None and self._transferee not in self._configuration.voters:
            self._transferee = None
        if self._maybe_commit():
            self._broadcast_append()

    # -- appending and replicating ------------------------------------------------------------------
    def _append(self, kind: EntryKind, data: bytes, record_count: int, timestamp_ms: int) -> int:
        index = self.log.last_index + 1
        entry = Entry(index, self.term, kind, record_count, data, timestamp_ms)
        self.log.append([entry])
        self._uncommitted.append((index, entry.size_bytes))
        self._uncommitted_bytes += entry.size_bytes
        if self._faults.leader_counts_unsynced:
            self._progress[self.id].maybe_update(index)
            self._maybe_commit()
        return index

    def _broadcast_append(self) -> None:
        for node_id in self._progress:
            if node_id != self.id:
                self._send_append(node_id)

    def _broadcast_new_entries(self) -> None:
        """After a commit: appends to the followers that have entries to receive (they carry
        the new commit index); the others learn it on the next tick (`_send_commit_updates`)."""
        for node_id in self._progress:
            if node_id != self.id:
                self._send_append(node_id, send_if_empty=False)

    def _answer_probe_asleep(self, m: VoteRequest) -> bool:
        """A quiesced leader asked by a member whose log ends where its own does and is all
        committed (a restarted follower's `probe_membership`: a pre-vote at the member's own
        term, not past the leader's): sends that member alone a quiescing heartbeat, which
        tells it who leads and lets it sleep too, and stays quiesced. True if so answered. Waking instead cost the whole group
        `quiesce_after_ticks` of heartbeats to every member before it slept again: a node
        restarted with 60,000 replicas woke 60,000 groups at once. A member behind (or any
        other message) wakes the leader as before."""
        progress = self._progress.get(m.sender)
        last = self.log.last_index
        if (
            progress is None
            or m.sender == self.id
            or m.last_log_index != last
            or m.last_log_term != self.log.last_term
            or progress.match_index != last
            or self.commit != last
        ):
            return False
        self._send(Heartbeat(self.term, self.id, m.sender, last, True, self._clock))
        return True

    def _broadcast_heartbeat(self) -> None:
        for node_id, progress in self._progress.items():
            if node_id != self.id:
                commit = min(progress.match_index, self.commit)
                heartbeat = Heartbeat(self.term, self.id, node_id, commit, False, self._clock)
                self._send(heartbeat)
                progress.commit_sent = max(progress.commit_sent, commit)

    def _send_commit_updates(self) -> None:
        """A commit index followers have not been told yet goes out with the next tick: a
        commit does not send a message of its own to a follower with nothing new to append
        (that message and its answer would delay the very replies the commit releases); the
        next append carries it, or this tick's (empty) append does."""
        for node_id, progress in self._progress.items():
            if node_id != self.id and progress.commit_sent < min(progress.match_index, self.commit):
                self._send_append(node_id)

    def _send_append(self, to: NodeId, *, send_if_empty: bool = True) -> bool:
        """Sends `to` what it needs next, if flow control allows; True if something went."""
        progress = self._progress[to]
        config = self.config
        if progress.is_paused(config.max_inflight_bytes, config.max_inflight_msgs):
            return False
        log = self.log
        prev_index = progress.next_index - 1
        prev_term = log.term(prev_index)
        if prev_term is None:  # compacted away: the member starts over at our boundary
            boundary = log.boundary()
            boundary = LogBoundary(
                boundary.index,
                boundary.term,
                boundary.next_offset,
                self._config_at(boundary.index),
            )
            self._send(LogReset(self.term, self.id, to, boundary))
            progress.reset_to(boundary.index)
            progress.append_tick = self._clock
            return True
        last = log.last_index
        entries = log.entries(progress.next_index, last + 1, config.max_msg_bytes)
        if not entries and not send_if_empty:
            return False
        request = AppendRequest(
            self.term, self.id, to, prev_index, prev_term, self.commit, tuple(entries)
        )
        self._send(request)
        size = sum(e.size_bytes for e in entries)
        progress.sent(entries[-1].index if entries else prev_index, size, len(entries))
        progress.commit_sent = max(progress.commit_sent, self.commit)
        progress.append_tick = self._clock
        return True

    def _on_append_response(self, m: AppendResponse) -> None:
        progress = self._progress.get(m.sender)
        if progress is None:
            return
        progress.recent_active = True
        if m.reject:
            next_probe = m.hint_index
            if m.hint_term > 0:
                next_probe = self.log.find_conflict_by_term(m.hint_index, m.hint_term)[0]
            if progress.forget_lost(m.index, m.hint_index):
                self._send_append(m.sender)
            elif progress.maybe_decrease_to(m.index, next_probe):
                if progress.state is ProgressState.REPLICATE:
                    progress.become_probe()
                self._send_append(m.sender)
            return
        if not progress.maybe_update(m.index):
            return
        if progress.state is ProgressState.PROBE:
            progress.become_replicate()
        else:
            progress.free_to(m.index)
        if self._maybe_commit():
            self._broadcast_new_entries()
        while self._send_append(m.sender, send_if_empty=False):
            pass
        if m.sender == self._transferee and progress.match_index == self.log.last_index:
            self._send(TimeoutNow(self.term, self.id, m.sender))

    def _on_heartbeat_response(self, sender: NodeId, lease_tick: int) -> None:
        progress = self._progress.get(sender)
        if progress is None:
            return
        progress.recent_active = True
        if lease_tick > self._lease_acks.get(sender, -1):
            self._lease_acks[sender] = lease_tick
        if lease_tick > progress.append_tick:
            # it answered a heartbeat sent after the last append (messages to it keep their
            # order): that append or its answer was lost, so what it lacks goes again. An
            # answer to an earlier heartbeat says nothing of it: a member that answers late
            # (its inbox far behind) was sent an append at each such answer, and fell further
            # behind with every one
            progress.probe_sent = False
            config = self.config
            if progress.state is ProgressState.REPLICATE and progress.is_paused(
                config.max_inflight_bytes, config.max_inflight_msgs
            ):
                progress.free_first()
            if progress.match_index < self.log.last_index:
                self._send_append(sender)

    def _self_durable(self, index: int) -> None:
        progress = self._progress.get(self.id)
        if progress is not None and progress.maybe_update(index) and self._maybe_commit():
            self._broadcast_new_entries()

    def _maybe_commit(self) -> bool:
        """Advances the commit index to what a quorum of voters holds durably — only through
        an entry of the current term (Raft §5.4.2); True if it moved."""
        progress = self._progress
        index = committed_index(
            self._voters, lambda v: progress[v].match_index if v in progress else 0
        )
        if index <= self.commit:
            return False
        if self.log.term(index) != self.term and not self._faults.commit_previous_term:
            return False
        before, self.commit = self.commit, index
        if self._configs[-1][0] > before:
            self._tell_removed_members(before, index)
        uncommitted = self._uncommitted
        done = 0
        while done < len(uncommitted) and uncommitted[done][0] <= index:
            self._uncommitted_bytes -= uncommitted[done][1]
            done += 1
        del uncommitted[:done]
        return True

    def _tell_removed_members(self, low: int, high: int) -> None:
        """Configurations set by entries in (low, high] just committed: each member one of them
        removed hears so, and may delete its copy of the group (see `Removed`). A member that
        misses this hears it again when it next campaigns (`RaftNode.step`)."""
        configs = self._configs
        for i in range(len(configs) - 1, 0, -1):
            at, config = configs[i]
            if at <= low:
                break
            if at <= high:
                for node_id in sorted(configs[i - 1][1].members - config.members):
                    if node_id != self.id:
                        self._send(Removed(self.term, self.id, node_id, at))

    def _changed_configuration(self, change: ConfigChange) -> Configuration:
        config = self._configuration
        node = change.node_id
        voters, learners = config.voters, config.learners
        if change.op is ConfigChangeOp.ADD_LEARNER:
            if node in config.members:
                raise ConfigChangeRejected(f"cannot add {node} as a learner: already a member")
            return Configuration(voters, learners | {node})
        if change.op is ConfigChangeOp.PROMOTE:
            if node not in learners:
                raise ConfigChangeRejected(
                    f"cannot promote {node}: not a learner (learners: {sorted(learners)})"
                )
            if not self.is_caught_up(node):
                raise ProposalDropped(
                    f"learner {node} is not caught up (match {self.match_index(node)}, "
                    f"commit {self.commit}); promote it once it is"
                )
            return Configuration(voters | {node}, learners - {node})
        if node not in config.members:
            raise ConfigChangeRejected(f"cannot remove {node}: not a member")
        if voters == {node}:
            raise ConfigChangeRejected(f"cannot remove {node}: it is the only voter")
        if node == self.id:
            target = self._best_transferee()
            if target is None:
                raise ConfigChangeRejected(f"leader {node} cannot remove itself: no other voter")
            self.transfer_leader(target)
            raise ProposalDropped(
                f"leader {node} is handing leadership to {target} before its removal; "
                "retry the removal on the new leader"
            )
        return Configuration(voters - {node}, learners - {node})

    def _best_transferee(self) -> NodeId | None:
        candidates = [v for v in self._voters if v != self.id]
        if not candidates:
            return None
        return max(candidates, key=lambda v: (self._progress[v].match_index, v))
