"""`RaftNode`: one member of one Raft group, as a pure state machine.

The node does no I/O, starts no thread and reads no clock. Its inputs are `tick()` (one unit of
logical time), `step(message)`, `propose(...)`, `change_config(...)` and `transfer_leader(...)`;
its output is a `Ready` (what to persist, what to send, what became committed), which the host
carries out and acknowledges with `advance(ready)`. Randomness (election jitter) comes from the
`random.Random` it is given, so a seed fixes its behaviour.

Persistence contract (what the host must do with each `Ready`, in this order):

1. `boundary`: reset the log to start after it, durably.
2. `truncate_from`, then `entries`: truncate, then append.
3. Make the log writes durable (fsync) — unless `send_before_persist`, see below.
4. `hard_state`: save it atomically and durably. Its term and vote must be durable before any
   message of this Ready is sent (a vote is a promise; a term must never go back). A hard state
   whose commit alone changed may be written lazily or not at all (a restart re-learns commit).
   A restarted node takes `min(commit, last_index)`, so a hard state may be saved before the
   entries it covers are durable *if the log's truncations are durable on return* (as
   `storage.SegmentedLog.truncate_from` is): the log a crash leaves is then a prefix of the one
   written. With a log whose truncation could come undone, save the hard state after step 3.
5. Send `messages`.
6. Apply `committed` (for a log store: advance the high watermark), then `advance(ready)`.

Every acknowledgement a node sends (AppendResponse, a granted vote) speaks for state that steps
1–4 made durable: a follower must never acknowledge an entry before it is on disk.

The leader's own writes are the one exception (Raft thesis §10.2.1). When
`ready.send_before_persist` is True (a leader whose term and vote did not change), the host may
send the messages at once and fsync the entries in parallel: it calls
`advance(ready, durable=False)` after the writes are issued, and `report_durable(index, term)`
when the fsync completes. The leader counts itself towards a commit quorum only up to the index
it was told is durable, so an entry is committed only once a quorum holds it on disk, with or
without the leader. Such a leader may save a hard state whose commit is ahead of its own durable
log; on restart `RaftNode` takes `min(commit, last_index)`: the entries are durable on a quorum.

Removal: a member that a committed configuration leaves out is told so with `Removed` — by the
leader when the change commits, and by any member when it campaigns later (it may have missed
the first). It sets `removed_at` only if its own configuration is older than that one (a node
added back holds the newer configuration); the host may then delete its log, keeping its term,
its vote and its `vote_floor` (and must re-join with an empty configuration, never a bootstrap
one, and give the floor back with `restore_vote_floor` before the node steps or ticks).

Why the floor: `raft.election` (a replica votes as if it still held the logs it deleted).

Safety rules enforced here: one vote per term (persisted before it is sent); a candidate wins only
with a log at least as up to date as a majority's; entries are committed by counting replicas
only for entries of the leader's current term (earlier ones commit with them); a leader never
overwrites its own log; one configuration change at a time, and only after the leader has
committed an entry of its own term; the latest configuration in the log (committed or not) is
the one in force, so a truncated configuration entry reverts.

Why one module of ~560 lines: `RaftNode` is the one object that owns the term, the role and the
log, and every message handler must check and change them together; elections, replication and
the follower's side already live in `election.py`, `leader.py` and `follower.py`, and what stays
here is the dispatch and the state those share.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from raft.codec import decode_config_entry
from raft.config import RaftConfig
from raft.election import Campaign, ElectionMixin
from raft.errors import (
    InvalidProposal,
    InvariantViolation,
    NotLeader,
    ProposalDropped,
    RaftConfigError,
)
from raft.faults import NO_FAULTS, RaftFaults
from raft.follower import FollowerMixin
from raft.leader import LeaderMixin
from raft.log import LogReader
from raft.log_view import LogView
from raft.progress import Progress
from raft.ready import Ready
from raft.types import (
    AppendRequest,
    AppendResponse,
    Configuration,
    EntryKind,
    HardState,
    Heartbeat,
    HeartbeatResponse,
    LogPosition,
    LogReset,
    Message,
    NodeId,
    Removed,
    Role,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

__all__ = ["LEASE_MARGIN_TICKS", "RaftNode"]

# Ticks a lease gives up for timer phase and drift between nodes (see `lease_read_index`).
LEASE_MARGIN_TICKS = 2


class RaftNode(ElectionMixin, FollowerMixin, LeaderMixin):
    """A Raft group member. See the module docstring for the host's obligations."""

    # A host holds tens of thousands of nodes (issue 28: 60,000 replicas per node): slots
    # take a quarter of the memory of an instance dict of this many fields (over 30, Python's
    # shared-key dicts give up). The mixins have no slots, so an instance `__dict__` is still
    # there, made only if something sets another attribute (a test's spy); none of the node's
    # own state goes there.
    __slots__ = (
        "_applied",
        "_boundary_state",
        "_clock",
        "_configs",
        "_configuration",
        "_deferred_ticks",
        "_deleted_log_end",
        "_durable_index",
        "_election_elapsed",
        "_faults",
        "_heartbeat_elapsed",
        "_leader_contact",
        "_lease_acks",
        "_lease_floor",
        "_lease_void",
        "_members",
        "_messages",
        "_pending_conf_index",
        "_persisted",
        "_progress",
        "_randomized_timeout",
        "_rng",
        "_transfer_elapsed",
        "_transferee",
        "_uncommitted",
        "_uncommitted_bytes",
        "_voters",
        "_votes",
        "commit",
        "config",
        "id",
        "leader_id",
        "log",
        "quiesced",
        "removed_at",
        "role",
        "term",
        "vote",
    )

    def __init__(
        self,
        node_id: NodeId,
        configuration: Configuration,
        log: LogReader,
        hard_state: HardState,
        config: RaftConfig,
        rng: random.Random,
        *,
        faults: RaftFaults = NO_FAULTS,
    ) -> None:
        """`configuration` is the bootstrap configuration, in force until the log holds one (a
        node joining an existing group passes an empty `Configuration()`). `hard_state` and
        `log` are what the host recovered from disk."""
        self.id = node_id
        self.config = config
        self._rng = rng
        self._faults = faults
        self.log = LogView(log)
        boundary = log.boundary()
        base = boundary.config if boundary.config is not None else configuration
        self._configs: list[tuple[int, Configuration]] = [(boundary.index, base)]
        for entry in log.config_entries():
            self._configs.append((entry.index, decode_config_entry(entry.data)[1]))
        self.term = hard_state.term
        self.vote = hard_state.vote
        # The commit index may be ahead of a log whose unsynced tail a crash took (a leader that
        # sent before its fsync); entries up to the boundary are committed by definition.
        self.commit = max(min(hard_state.commit, log.last_index), boundary.index)
        self._persisted = hard_state
        self._applied = self.commit
        self._durable_index = log.last_index
        self.role = Role.FOLLOWER
        self.leader_id: NodeId | None = None
        self.quiesced = False
        # Set when a member of a committed configuration that leaves this node out says so
        # (`Removed`): the index of that configuration's entry. The host then retires this
        # replica (deletes its log, keeps its term and vote); the node sends nothing more.
        self.removed_at = 0
        self._messages: list[Message] = []
        self._boundary_state = b""  # the `LogReset.state` that came with the pending boundary
        self._votes: dict[NodeId, bool] = {}
        self._progress: dict[NodeId, Progress] = {}
        self._transferee: NodeId | None = None
        self._transfer_elapsed = 0
        self._pending_conf_index = 0
        # (index, bytes) this term, > commit: a list (56 bytes empty, a deque 600: most of a
        # host's nodes are idle followers)
        self._uncommitted: list[tuple[int, int]] = []
        self._uncommitted_bytes = 0
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        # A restarted node may have promised a leader, just before its crash, not to vote for
        # an election timeout: it keeps that promise (see `_in_lease`). A node whose durable term
        # is 0 has never answered a leader (a term is durable before any message of it is sent).
        self._clock = 0
        self._leader_contact = 0 if hard_state.term > 0 else -config.election_ticks
        self._lease_acks: dict[NodeId, int] = {}
        self._lease_void = False
        # heartbeats sent before this tick grant no lease (`void_lease`: the host was paused)
        self._lease_floor = 0
        self._randomized_timeout = config.election_ticks
        self._deferred_ticks = 0  # `defer_campaign`: added to this election timeout only
        self._configuration = base
        self._deleted_log_end = LogPosition()
        self._voters: tuple[NodeId, ...] = ()
        self._members: tuple[NodeId, ...] = ()
        self._use_configuration(self._configs[-1][1])
        self._become_follower(self.term, None)

    # -- read-only state -------------------------------------------------------------------------
    @property
    def configuration(self) -> Configuration:
        return self._configuration

    @property
    def configuration_index(self) -> int:
        """The index of the entry that set the configuration in force (or the log boundary)."""
        return self._configs[-1][0]

    @property
    def applied_index(self) -> int:
        return self._applied

    @property
    def durable_index(self) -> int:
        return self._durable_index

    @property
    def transferee(self) -> NodeId | None:
        return self._transferee

    @property
    def ticks_without_leader(self) -> int:
        """Ticks of this node's clock since it last heard from a leader (0 while it leads). A
        follower past an election timeout of them (cut off, or its leader gone) cannot know
        what was committed since. A quiesced node's clock stands still: its host wakes it on
        news that its leader failed. A member of a new group counts from its start (it may vote
        at once, `_in_lease`, but it is not out of touch before an election timeout)."""
        return 0 if self.role is Role.LEADER else self._clock - max(self._leader_contact, 0)

    @property
    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.commit)

    @property
    def vote_floor(self) -> LogPosition:
        """The most up-to-date end of this replica's log, or of any log it deleted: a candidate
        must be at least as up to date to get its vote, and it campaigns only with a log that
        reaches it. A host retiring the replica saves it with the term and vote (see the module
        docstring)."""
        last = LogPosition(self.log.last_term, self.log.last_index)
        return max(last, self._deleted_log_end)

    def restore_vote_floor(self, floor: LogPosition) -> None:
        """The host gives back the `vote_floor` it saved when this replica retired (its log
        deleted). Call it before the node steps or ticks; it only ever raises the floor."""
        self._deleted_log_end = max(self._deleted_log_end, floor)

    def lease_read_index(self) -> int | None:
        """The index a linearizable read may be served at without a round trip, or None.

        The lease: with check_quorum, a follower refuses to vote for an election timeout after
        hearing from a leader (`_in_lease`). Heartbeats carry the leader's clock and responses
        echo it, so when a quorum of voters has answered a heartbeat sent at tick s, none of
        them can help elect another leader before s + election_ticks (by their own ticks). The
        lease holds while `now < s + election_ticks - LEASE_MARGIN_TICKS`, and only for a leader
        that has committed an entry of its term, is not quiesced, and has not begun a transfer
        this term (TimeoutNow overrides followers' leases). It assumes tick rates differ by less
        than LEASE_MARGIN_TICKS per election timeout; a host whose ticks stop for a while (a
        paused process) calls `void_lease` when they resume, and serves no lease read meanwhile.
        """
        if (
            self.role is not Role.LEADER
            or not self.config.check_quorum
            or self.quiesced
            or self._lease_void
            or self.log.term(self.commit) != self.term
        ):
            return None
        if self._faults.stale_lease:
            return self.commit
        acks = self._lease_acks
        floor, never = self._lease_floor, -(1 << 62)
        sent = sorted(
            (
                tick if tick >= floor else never
                for tick in (
                    self._clock if v == self.id else acks.get(v, never) for v in self._voters
                )
            ),
            reverse=True,
        )
        quorum_sent = sent[len(sent) // 2]
        if self._clock >= quorum_sent + self.config.election_ticks - LEASE_MARGIN_TICKS:
            return None
        return self.commit

    def void_lease(self) -> None:
        """The host's ticks stopped for a while (the process was paused, e.g. SIGSTOP or a VM
        freeze): the followers' clocks ran on while this node's did not, so a lease counted in
        its ticks may have ended long ago, and another leader may have been elected and have
        committed since. No lease until a quorum answers a heartbeat sent from the next tick on."""
        self._lease_floor = self._clock + 1

    # -- inputs ------------------------------------------------------------------------------------
    def tick(self) -> None:
        """One unit of logical time. A quiesced node woken by a tick resumes normally."""
        if self.quiesced:
            self.wake()
        self._clock += 1
        if self.role is Role.LEADER:
            self._tick_leader()
            return
        self._election_elapsed += 1
        timeout = self._randomized_timeout + self._deferred_ticks
        # the cheap test first: every tick of every follower (thousands of groups) comes here,
        # and `_promotable` reads the log's last term
        if self._election_elapsed >= timeout and self._promotable():
            self._election_elapsed = self._deferred_ticks = 0
            # At term 0 a pre-vote protects nothing: every leader's term is at least 1, so an
            # election for term 1 can unseat none (a member at term 1 or more refuses it, or
            # ignores it as stale); it would only cost a round trip and four messages in each
            # new group. A node raises its term to 1 at most once this way.
            pre_vote = self.config.pre_vote and self.term > 0
            self._campaign(Campaign.PRE_VOTE if pre_vote else Campaign.ELECTION)

    def propose(self, data: bytes, record_count: int, timestamp_ms: int = 0) -> int:
        """Appends a record batch and returns its Raft index; committed once a later Ready's
        `committed` range covers it. Raises `NotLeader` (with the leader hint) or
        `ProposalDropped` (a leadership transfer is under way)."""
        if record_count < 1:
            raise InvalidProposal(
                f"record_count={record_count}: a batch holds at least one record "
                "(zero-record entries are Raft's own)"
            )
        self._require_leader()
        if self._transferee is not None:
            raise ProposalDropped(
                f"leader {self.id} is transferring leadership to {self._transferee}; retry there"
            )
        if self._uncommitted_bytes >= self.config.max_uncommitted_bytes:
            raise ProposalDropped(
                f"leader {self.id} holds {self._uncommitted_bytes} uncommitted bytes "
                f"(max_uncommitted_bytes={self.config.max_uncommitted_bytes}); retry later"
            )
        self.wake()
        index = self._append(EntryKind.NORMAL, data, record_count, timestamp_ms)
        self._broadcast_append()
        return index

    def step(self, message: Message) -> None:
        """Handles one message from a peer. A message for another node is ignored."""
        m = message
        if m.recipient != self.id:
            return
        kind = type(m)
        if kind is Removed:
            assert isinstance(m, Removed)
            if m.config_index > self.configuration_index:
                self.removed_at = max(self.removed_at, m.config_index)
            return
        if kind is VoteRequest and m.sender not in self._members:
            # a campaign by a node this committed configuration left out: it was removed and
            # missed the leader's word (or was down); tell it, so it can delete its copy
            config_index = self._configs[-1][0]
            if 0 < config_index <= self.commit:
                self._send(Removed(self.term, self.id, m.sender, config_index))
        if self.quiesced and not (
            (kind is Heartbeat and m.quiesce) or kind is HeartbeatResponse  # type: ignore[union-attr]
        ):
            if kind is VoteRequest and m.pre_vote and m.term <= self.term:  # type: ignore[union-attr]
                # not a campaign (a pre-vote is for a term past this one): a member asking who
                # leads (`probe_membership`). The leader tells it, asleep if its log is whole;
                # a follower answers it as ever, and sleeps on (only the leader can tell)
                assert isinstance(m, VoteRequest)
                if self.role is not Role.LEADER:
                    pass
                elif self._answer_probe_asleep(m):
                    return
                else:
                    self.wake()
            elif not (kind is VoteResponse and m.pre_vote and m.term <= self.term):  # type: ignore[union-attr]
                self.wake()  # anything but the quiescing exchange (or a probe's answer) is news
        if m.term > self.term:
            if kind is VoteRequest:
                assert isinstance(m, VoteRequest)
                if self._in_lease() and not m.transfer:
                    return  # heard from a live leader recently: do not let this node disrupt it
                if not m.pre_vote:
                    # The election timer restarts on granting the vote (`_on_vote_request`),
                    # not on the term alone (Raft, Figure 2): else candidates with stale logs,
                    # without pre-vote, keep the electable members from ever timing out first.
                    timer = self._election_elapsed, self._randomized_timeout, self._deferred_ticks
                    was_leader = self.role is Role.LEADER
                    self._become_follower(m.term, None)
                    if not was_leader:
                        elapsed, timeout, deferred = timer
                        self._election_elapsed, self._randomized_timeout = elapsed, timeout
                        self._deferred_ticks = deferred
            elif kind is VoteResponse and m.pre_vote and m.granted:  # type: ignore[union-attr]
                pass  # a granted pre-vote carries the term of the election it would start
            else:
                from_leader = kind is AppendRequest or kind is Heartbeat or kind is LogReset
                self._become_follower(m.term, m.sender if from_leader else None)
        elif m.term < self.term:
            if kind is AppendRequest or kind is Heartbeat:
                # A stale leader: tell it the newer term so it steps down (with check_quorum or
                # pre_vote, it might otherwise never hear of it).
                self._send(AppendResponse(self.term, self.id, m.sender, 0))
            elif kind is VoteRequest and m.pre_vote:  # type: ignore[union-attr]
                self._send(VoteResponse(self.term, self.id, m.sender, False, pre_vote=True))
            return
        if kind is VoteRequest:
            assert isinstance(m, VoteRequest)
            self._on_vote_request(m)
        elif self.role is Role.LEADER:
            self._step_leader(m)
        elif self.role is Role.FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    # -- Ready ------------------------------------------------------------------------------------
    def has_ready(self) -> bool:
        """O(1): is there anything for `ready()` to return?"""
        persisted = self._persisted
        log = self.log
        return bool(
            self._messages
            or log.unstable
            or log.pending_boundary is not None
            or self.term != persisted.term
            or self.vote != persisted.vote
            or self.commit != persisted.commit
            # applied < min(commit, stable_last_index), the log asked only when it matters
            or (self._applied < self.commit and self._applied < log.stable_last_index)
        )

    def ready(self) -> Ready:
        """What the host must do now; call `advance(ready)` when done, before the next one."""
        log = self.log
        persisted = self._persisted
        same_term_vote = self.term == persisted.term and self.vote == persisted.vote
        hard_state = None
        if not same_term_vote or self.commit != persisted.commit:
            hard_state = HardState(self.term, self.vote, self.commit)
        entries = tuple(log.unstable) if log.unstable else ()
        boundary = log.pending_boundary
        truncate_from = None
        if entries and boundary is None and log.offset <= log.storage.last_index:
            truncate_from = log.offset
        committed = None
        if self.commit > self._applied:
            high = min(self.commit, log.stable_last_index)
            committed = (self._applied + 1, high) if high > self._applied else None
        messages = tuple(self._messages)
        self._messages = []
        send_early = (
            self.role is Role.LEADER and boundary is None and same_term_vote
        ) or self._faults.ack_before_persist
        return Ready(
            hard_state=hard_state,
            boundary=boundary,
            truncate_from=truncate_from,
            entries=entries,
            messages=messages,
            committed=committed,
            send_before_persist=send_early,
            boundary_state=self._boundary_state if boundary is not None else b"",
        )

    def advance(self, ready: Ready, *, durable: bool = True) -> None:
        """The host has carried out `ready`. `durable=False` (only when
        `ready.send_before_persist`): the entries are written but their fsync is still under
        way; call `report_durable` when it completes."""
        if ready.hard_state is not None:
            self._persisted = ready.hard_state
        if ready.boundary is not None:
            self.log.boundary_written(ready.boundary)
            if self.log.pending_boundary is None:
                self._boundary_state = b""
        if ready.entries:
            last = ready.entries[-1]
            self.log.stable_to(last.index, last.term)
        if ready.committed is not None:
            self._applied = max(self._applied, ready.committed[1])
        if durable:
            self._mark_durable(self.log.stable_last_index)

    def report_durable(self, index: int, term: int) -> None:
        """The host's fsync has made every entry up to (index, term) durable."""
        if index <= self.log.stable_last_index and self.log.term(index) == term:
            self._mark_durable(index)

    def defer_campaign(self, ticks: int) -> None:
        """Waits `ticks` more before this node's next campaign (this election timeout only;
        the next one is drawn as usual). A host's hint that another member should campaign
        first — e.g. every member of a new group but its preferred leader, so that thousands
        of new groups elect without split votes. Timing only: no safety property depends on it."""
        if ticks < 0:
            raise RaftConfigError(f"defer_campaign(ticks={ticks}): ticks must be >= 0")
        if self.role is not Role.LEADER:
            self._deferred_ticks += ticks

    def hasten_campaign(self) -> None:
        """The election timer runs out at the next tick (and any deferral ends): a host's hint
        that this node should lead, e.g. the preferred replica of a new group, which then
        campaigns at once instead of after a whole election timeout. Timing only: the
        campaign is an ordinary one (no safety property depends on when it starts)."""
        if self.role is not Role.LEADER:
            self._deferred_ticks = 0
            self._election_elapsed = max(self._election_elapsed, self._randomized_timeout - 1)

    def probe_membership(self, members: Iterable[NodeId] = ()) -> None:
        """Asks the voters of this follower's configuration whether they still count it in: a
        pre-vote at its own term, which changes nothing on either side, but which a member whose
        committed configuration leaves this node out answers with `Removed`. For a quiesced
        follower that missed the leader's word of its removal (the message was lost): it never
        campaigns, so nothing else would tell it. The host calls this for quiesced followers
        that placement no longer names; a member that gets it wakes (as for any message).
        `members`: ask these too (a replica rebuilt with an empty configuration after its log
        was found damaged wakes its group's quiesced leader so, which then sends it the log)."""
        if self.role is not Role.FOLLOWER:
            return
        last_index, last_term = self.log.last_index, self.log.last_term
        for voter in sorted(self.configuration.voters | set(members)):
            if voter != self.id:
                self._send(VoteRequest(self.term, self.id, voter, last_index, last_term, True))

    # -- quiescence ---------------------------------------------------------------------------------
    def wake(self) -> None:
        """Leaves quiescence: the host resumes ticking. Timers restart from zero."""
        if not self.quiesced:
            return
        self.quiesced = False
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._leader_contact = self._clock  # the lease window restarts with the timers
        self._lease_acks = {}
        for node_id, progress in self._progress.items():
            progress.recent_active = node_id == self.id
            progress.was_active = True  # each gets a window to answer anew

    def _in_lease(self) -> bool:
        """Does this node refuse votes, having heard from a leader within an election timeout
        (or being one)? Measured on the node's own clock, so neither a change of term nor a
        restart shortens it."""
        if not self.config.check_quorum:
            return False
        if self.role is Role.LEADER:
            return True
        return self._clock - self._leader_contact < self.config.election_ticks

    # -- roles ----------------------------------------------------------------------------------------
    def _promotable(self) -> bool:
        """A voter, with a log that reaches its vote floor (its vote for itself is a vote)."""
        if self.id not in self._configuration.voters:
            return False
        return not self._below_vote_floor(LogPosition(self.log.last_term, self.log.last_index))

    def _reset(self, term: int) -> None:
        if term != self.term:
            if term < self.term:
                raise InvariantViolation(f"term would go back from {self.term} to {term}")
            self.term = term
            self.vote = None
        self.leader_id = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        timeout = self.config.election_ticks
        self._randomized_timeout = timeout + self._rng.randrange(timeout)
        self._deferred_ticks = 0
        self._votes = {}
        self._progress = {}
        self._transferee = None
        self._transfer_elapsed = 0
        self._uncommitted.clear()
        self._uncommitted_bytes = 0
        self._lease_acks = {}
        self._lease_void = False

    def _become_follower(self, term: int, leader: NodeId | None) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.leader_id = leader

    def _step_follower(self, m: Message) -> None:
        kind = type(m)
        if kind is AppendRequest:
            assert isinstance(m, AppendRequest)
            self._heard_from_leader(m.sender)
            self._on_append(m)
        elif kind is Heartbeat:
            assert isinstance(m, Heartbeat)
            self._heard_from_leader(m.sender)
            if m.commit > self.commit:
                self.commit = min(m.commit, self.log.last_index)
            self._send(HeartbeatResponse(self.term, self.id, m.sender, m.lease_tick))
            last = self.log.last_index
            if m.commit > last:
                # The leader counts entries this replica acknowledged and no longer holds (its
                # log was found damaged: it is rebuilt from its peers, keeping its vote floor).
                # A rejection at index 0, which no append gets, with its log's end makes the
                # leader probe from there (`Progress.maybe_decrease_to`).
                self._send(
                    AppendResponse(self.term, self.id, m.sender, 0, True, last, self.log.last_term)
                )
            elif m.quiesce:
                self.quiesced = True
        elif kind is LogReset:
            assert isinstance(m, LogReset)
            self._heard_from_leader(m.sender)
            self._on_reset(m)
        elif kind is TimeoutNow and self._promotable():
            self._campaign(Campaign.TRANSFER)

    def _heard_from_leader(self, leader: NodeId) -> None:
        self._election_elapsed = self._deferred_ticks = 0
        self._leader_contact = self._clock
        self.leader_id = leader

    def _require_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeader(self.id, self.leader_id)

    def _send(self, message: Message) -> None:
        self._messages.append(message)

    def _mark_durable(self, index: int) -> None:
        self._durable_index = max(self._durable_index, index)
        if self.role is Role.LEADER:
            self._self_durable(self._durable_index)

    def _use_configuration(self, config: Configuration) -> None:
        self._configuration = config
        self._voters = tuple(sorted(config.voters))
        self._members = tuple(sorted(config.members))
        if self.role is Role.LEADER:
            self._sync_progress()

    # The leader side lives in `raft.leader`: it needs these hooks from here.
    def _become_leader_hook(self) -> None:
        self.role = Role.LEADER
        self.leader_id = self.id

    def _step_leader(self, m: Message) -> None:
        kind = type(m)
        if kind is AppendResponse:
            assert isinstance(m, AppendResponse)
            self._on_append_response(m)
        elif kind is HeartbeatResponse:
            assert isinstance(m, HeartbeatResponse)
            self._on_heartbeat_response(m.sender, m.lease_tick)
