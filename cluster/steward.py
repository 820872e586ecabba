"""What a node does for the groups it leads: keep their members on their placement, and give
each group back to its preferred leader (leader balancing).

Placement: each led group takes one step at a time (add a learner, promote it, remove a member,
or hand leadership over) toward the members its partition's placement names
(`cluster.reconcile.next_step`).

A timer group (`__timers.<uid>/p`, placed as its source partition: `topic_spec.placement_key`)
is not balanced on its own: its leader hands it to whoever leads the source partition p, once
that member is caught up and answers, so that one node leads both (firing proposes locally, and
no cut between two nodes separates the timers from their partition); the source partition is
balanced as any other.

Leader balancing, as Kafka's auto leader rebalance: a group whose preferred leader (the first
replica of its balanced assignment, `placement.balance_leaders`) is another member hands it
leadership once that member has been alive `leader_balance_after_s`, is caught up and answers
this leader, and this node has led the group that long itself (so leadership a stopping node
has just handed over is not handed straight back), and that member's replicas have not asked
this node for votes of their own accord (pre-votes and campaigns, not those a transfer started)
at a busy rate (`multiraft.BUSY_CAMPAIGNS` a second: `MultiRaft.campaigned_at`) for as long:
a node back from a restart asks who leads as each of its replicas opens, and handing it
leaderships while it still opened them made it win thousands of elections in the middle of its
opening (100,000 partitions on 5 nodes: a node of 60,000 replicas back in 78-79 s, in 58-62 s
with the hand-back held until after). One replica that keeps asking does not hold it. At most `BALANCE_TRANSFERS_PER_PASS`
transfers start per pass, and at most `BALANCE_IN_FLIGHT_PER_MEMBER` to one member are unfinished
at once (a node back from a restart takes its leaderships back as fast as it completes their
elections); one that did not happen is retried after `BALANCE_RETRY_ELECTIONS`
election timeouts. No balancing transfer (nor a timer group's move to its source's leader)
starts while the node's rounds are behind their inputs (`MultiRaft.behind`): each is an
election's work, and a node whose messages wait may lose the very leaderships it hands over,
to be balanced again (a 30,000-partition creation once moved leaderships some 30,000 times so,
without end); nor, for balancing only, while the node is still opening many replicas
(`opening`, `ReplicaOpener.busy`: `BUSY_REPLICAS` or more queued, opening or settling): while
thousands of partitions are created, a group whose preferred replica opened late on a busy node
was led by another, and handing it over then cost an election in the middle of the storm
(20,000 partitions on 5 nodes: 6,000 to 14,000 such transfers); afterwards it costs the same
election on an idle cluster, as Kafka's periodic preferred-leader election does.

Incremental: only groups in `unsettled` are looked at. A group enters it when this node becomes
its leader (`note_roles`), and every led group does when the candidates or the topics change,
and every `RECHECK_ALL_S` as a safety net; it leaves once its voters are exactly its placement
and it is led by its preferred leader (or that one is not available). So an idle node costs
nothing here. Bounded: a pass looks at `GROUPS_PER_PASS` (512) of them at most, the longest
unvisited first (a node electing 20,000 leaderships, each waiting `leader_balance_after_s` to be
balanced, looked at every one of them five times a second, most of its CPU); and each group's
placement is computed once while the candidates and the topics stay the same. Everything runs
on the event loop; Raft nodes are touched only through `MultiRaft.call`, in the driver.

Time: every wait above is measured on the injected `clock` (the node's ticker's clock,
`cluster.clock`; a test's `FakeTicker`), the one `alive_since` is stamped on; never the wall clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from itertools import islice

from cluster.controller import TopicSpec
from cluster.logs import EventBudget
from cluster.multiraft import MultiRaft
from cluster.placement import Candidate, place
from cluster.reconcile import StepKind, next_step
from cluster.replica import Replica
from cluster.topic_spec import placement_key, timer_source
from raft.errors import RaftError
from raft.types import ConfigChange, ConfigChangeOp, Role

__all__ = ["GroupSteward"]

log = logging.getLogger("flotilla.steward")

# How often every led group is compared with its placement even if nothing seems to have changed.
RECHECK_ALL_S = 30.0
# Leadership transfers a node starts per pass (every 0.2 s) to give partitions back to their
# preferred leaders: a returning node takes its share back gradually.
BALANCE_TRANSFERS_PER_PASS = 32
# Balancing transfers from this node to one member unfinished at once (begun within an election
# timeout, the group still led here): a returning node takes its leaderships back as fast as it
# completes their elections, not as fast as its peers start them (a node restarted with 60,000
# replicas was handed ~100 a second by each peer while it was still opening them).
BALANCE_IN_FLIGHT_PER_MEMBER = 16
# Unsettled groups looked at in one pass, at most (the rest in the next passes, in turn): at 5
# passes a second, 2,560 a second, each visit 10-20 us (2,048 a pass was still a fifth of a
# node's loop while 20,000 led groups waited to be balanced)
GROUPS_PER_PASS = 512
# A balancing transfer that did not happen (it is abandoned after an election timeout) is tried
# again only after this many election timeouts, so a flaky link costs little availability.
BALANCE_RETRY_ELECTIONS = 5


class GroupSteward:
    def __init__(
        self,
        multiraft: MultiRaft,
        *,
        balance_after_s: float,
        election_timeout_s: float,
        is_live: Callable[[str], bool],
        alive_since: Callable[[str], float | None],
        on_leader_changed: Callable[[Replica, bool], None] = lambda replica, leads: None,
        clock: Callable[[], float],
        opening: Callable[[], bool] = lambda: False,
        campaigned_at: Callable[[str], float | None] = lambda member: None,
    ) -> None:
        """`clock`: seconds now on the clock `alive_since` is on (a ticker's `now`).
        `opening`: is the node still opening many replicas (`ReplicaOpener.busy`)?
        `campaigned_at`: when a member's replicas last asked this node for votes of their own
        accord at a busy rate, on `clock` (`MultiRaft.campaigned_at`; None: never)."""
        self.multiraft = multiraft
        self.opening = opening
        self.campaigned_at = campaigned_at
        self.clock = clock
        self.balance_after_s = balance_after_s  # 0: no leader balancing
        self.election_timeout_s = election_timeout_s
        self.is_live = is_live
        self.alive_since = alive_since  # member id -> when this node last saw it come alive
        self.on_leader_changed = on_leader_changed  # (replica, leads now)
        # one line per replica change, up to a budget a second (a dead node's partitions all
        # add a learner at once), then a summary
        self.change_log = EventBudget(log, "replica_changes_summary")
        self.leaders: set[str] = set()  # groups this node leads
        # led groups that may still need a step, the longest unvisited first (a dict: ordered)
        self.unsettled: dict[str, None] = {}
        self._placement_key: object = None  # the candidates and topics `unsettled` assumes
        self._desired: dict[str, list[str]] = {}  # group -> its placement, under that key
        self._all_checked_at = 0.0
        self._led_since: dict[str, float] = {}  # led group -> since when
        self._balance_tried: dict[str, float] = {}  # group -> when a balancing transfer began
        # group -> (member, when): balancing transfers begun and perhaps unfinished
        self._handing: dict[str, tuple[str, float]] = {}
        # source group -> the timer group led here that follows its leader (`_follow_source`)
        self._timer_sources: dict[str, str] = {}

    # -- inputs ----------------------------------------------------------------------------------
    def note_roles(self, touched: Iterable[Replica]) -> None:
        """After a MultiRaft round: `touched` are the groups whose role may have changed."""
        leaders, replicas = self.leaders, self.multiraft.replicas
        followers = self._timer_sources
        for replica in touched:
            group = replica.group
            leads = replica.node.role is Role.LEADER and replicas.get(group) is replica
            if followers:
                timers = followers.get(group)
                if timers is not None:  # its leader may have moved: the timer group follows
                    self.unsettled[timers] = None
            if leads != (group in leaders):
                self.on_leader_changed(replica, leads)
                if leads:
                    leaders.add(group)
                    self.unsettled[group] = None
                    self._led_since[group] = self.clock()
                else:
                    leaders.discard(group)
                    self._desired.pop(group, None)
                    self._led_since.pop(group, None)
                    self._balance_tried.pop(group, None)
                    self._handing.pop(group, None)
                    if followers and group in followers.values():
                        self._timer_sources = followers = {
                            k: v for k, v in followers.items() if v != group
                        }

    def forget(self, group: str) -> None:
        """The group's replica is gone (its topic was deleted)."""
        self.leaders.discard(group)
        self.unsettled.pop(group, None)
        self._desired.pop(group, None)
        self._led_since.pop(group, None)
        self._balance_tried.pop(group, None)
        self._handing.pop(group, None)
        self._timer_sources = {k: v for k, v in self._timer_sources.items() if v != group}

    # -- one pass ----------------------------------------------------------------------------------
    def reconcile(
        self,
        candidates: list[Candidate],
        topics: Mapping[str, TopicSpec],
        topics_version: object,
    ) -> None:
        """Unsettled led groups (`GROUPS_PER_PASS` at most, the longest unvisited first) each
        take one step toward their placement, then their balance."""
        transfers = 0
        behind = self.multiraft.behind()  # balancing is work that can wait
        # and while this node is still opening many replicas (a topic of thousands of
        # partitions being created: a leadership handed over then is an election among
        # thousands more); a timer group still follows its source's leader meanwhile
        opening = self.opening()
        key = (tuple(sorted((c.node_id, c.weight, c.rack) for c in candidates)), topics_version)
        now = self.clock()
        if key != self._placement_key:
            self._desired = {}
        if key != self._placement_key or now - self._all_checked_at > RECHECK_ALL_S:
            self._placement_key, self._all_checked_at = key, now
            self.unsettled = dict.fromkeys(self.leaders)
        unsettled, placements = self.unsettled, self._desired
        in_flight = self._in_flight(now)
        for group in list(islice(unsettled, GROUPS_PER_PASS)):
            del unsettled[group]
            unsettled[group] = None  # to the back of the line: the others' turn first
            replica = self.multiraft.replicas.get(group)
            spec = topics.get(replica.topic) if replica is not None else None
            if replica is None or spec is None or replica.node.role is not Role.LEADER:
                del unsettled[group]  # `note_roles` adds it back if it leads again
                continue
            node = replica.node
            if node.transferee is not None:
                continue
            desired = placements.get(group)
            if desired is None:
                placed_as = placement_key(replica.topic, replica.partition, topics)
                desired = placements[group] = place(placed_as, candidates, spec.replication_factor)
            config = node.configuration
            step = next_step(node.id, config.voters, config.learners, desired, node.is_caught_up)
            if step is not None:
                apply = partial(_apply_step, replica, step.kind, step.node_id, self.change_log)
                self.multiraft.call(apply, replica)
            elif behind:
                continue  # its leadership stays where it is for now (still unsettled)
            elif not config.learners and config.voters == frozenset(desired):
                source = timer_source(replica.topic, topics)
                if source is None and opening:
                    continue  # its balance waits (still unsettled)
                preferred = (
                    self._follow_source(replica, source)
                    if source is not None
                    else self._preferred_leader(replica, spec.assignment, now)
                )
                if preferred is None:
                    del unsettled[group]
                elif (
                    preferred
                    and transfers < BALANCE_TRANSFERS_PER_PASS
                    and in_flight.get(preferred, 0) < BALANCE_IN_FLIGHT_PER_MEMBER
                ):
                    transfers += 1
                    in_flight[preferred] = in_flight.get(preferred, 0) + 1
                    self._balance_tried[group] = now
                    self._handing[group] = (preferred, now)
                    transfer = partial(
                        _apply_step, replica, StepKind.TRANSFER, preferred, self.change_log
                    )
                    self.multiraft.call(transfer, replica)

    def _follow_source(self, replica: Replica, source: TopicSpec) -> str | None:
        """For a timer group led here: the leader of its source partition, which it follows
        (so that one node leads both, `topic_spec.placement_key`), once that one is caught up
        and answers; "" to wait; None when this node leads the source too, or no other voter
        does (then it waits here until the source's leader moves: `note_roles`)."""
        source_group = f"{source.name}/{replica.partition}"
        self._timer_sources[source_group] = replica.group
        local = self.multiraft.replicas.get(source_group)
        node = replica.node
        target = local.node.leader_id if local is not None else None
        if target is None or target == node.id or target not in node.configuration.voters:
            return None
        tried = self._balance_tried.get(replica.group)
        if (
            not self.is_live(target)
            or (tried is not None and self.clock() - tried < self.election_timeout_s)
            or not node.is_caught_up(target)
            or not node.recently_active(target)
        ):
            return ""
        return target

    def _preferred_leader(
        self, replica: Replica, assignment: tuple[tuple[str, ...], ...], now: float
    ) -> str | None:
        """The member to hand the group to; "" to wait (see the module docstring for what it
        waits for); None when there is nothing to do (this node is the preferred one, or that
        one is no voter, is down, or balancing is off)."""
        node = replica.node
        index = replica.partition
        after_s = self.balance_after_s
        if not after_s or index >= len(assignment) or not assignment[index]:
            return None
        preferred = assignment[index][0]
        if preferred == node.id or preferred not in node.configuration.voters:
            return None
        since = self.alive_since(preferred)
        if since is None or not self.is_live(preferred):
            return None  # down: whoever leads now keeps it; its return re-checks every group
        tried = self._balance_tried.get(replica.group)
        campaigned = self.campaigned_at(preferred)
        if (
            now - since < after_s
            or (campaigned is not None and now - campaigned < after_s)
            or now - self._led_since.get(replica.group, now) < after_s
            or (
                tried is not None
                and now - tried < BALANCE_RETRY_ELECTIONS * self.election_timeout_s
            )
            or not node.is_caught_up(preferred)
            or not node.recently_active(preferred)  # SWIM-alive, yet cut off from this leader
        ):
            return ""
        return preferred

    def _in_flight(self, now: float) -> dict[str, int]:
        """Balancing transfers begun within an election timeout whose group is still led here,
        per member they hand it to (the others are forgotten: done, or abandoned by Raft)."""
        counts: dict[str, int] = {}
        for group, (member, began) in list(self._handing.items()):
            if now - began >= self.election_timeout_s:
                del self._handing[group]
            else:
                counts[member] = counts.get(member, 0) + 1
        return counts


_EVENTS = {
    StepKind.ADD_LEARNER: "replica_added",
    StepKind.PROMOTE: "replica_promoted",
    StepKind.REMOVE: "replica_removed",
    StepKind.TRANSFER: "leader_transfer",
}


def _apply_step(
    replica: Replica, kind: StepKind, node_id: str, change_log: EventBudget | None = None
) -> None:
    """In the driver: one reconciliation step (refused quietly if the core says not now)."""
    node = replica.node
    try:
        if kind is StepKind.TRANSFER:
            node.transfer_leader(node_id)
            if change_log is not None:
                change_log(
                    _EVENTS[kind], topic=replica.topic, partition=replica.partition,
                    to=node_id, term=node.term,
                )  # fmt: skip
            return
        op = {
            StepKind.ADD_LEARNER: ConfigChangeOp.ADD_LEARNER,
            StepKind.PROMOTE: ConfigChangeOp.PROMOTE,
            StepKind.REMOVE: ConfigChangeOp.REMOVE,
        }[kind]
        node.change_config(ConfigChange(op, node_id))
        if change_log is not None:
            change_log(
                _EVENTS[kind], topic=replica.topic, partition=replica.partition, replica=node_id,
                term=node.term, voters=sorted(node.configuration.voters),
                learners=sorted(node.configuration.learners),
            )  # fmt: skip
    except RaftError as error:
        log.debug("%s: %s %s deferred: %s", replica.group, kind.value, node_id, error)
