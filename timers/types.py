"""The timer core's vocabulary (delayed delivery, issue 26): timer batches, fire plans, settings.

A delayed batch is accepted into its partition's *timer log* (partition p of the internal topic
`timer_topic(uid)`, uid the source topic's incarnation) exactly as the producer encoded it; every
record of it carries the header DELIVER_AT_HEADER (the due time, epoch ms, ASCII decimal). The
leader of the timer partition fires due batches into source partition p in (due, offset) order:
first it appends a *plan* record (PLAN_HEADER; value = `encode_plan`) to the timer log, then it
appends each planned batch, unchanged but for its producer id and sequence (`with_producer`), to
the source partition as the idempotent producer `fire_producer_id(uid, p)` at the plan's
sequences. A plan is written only once the previous plan's appends all succeeded, so after a
failover only the last plan's outcome is unknown: the new leader appends it again and the source
partition answers each repeat as a duplicate. Times are epoch ms passed in (`now_ms`).

The fire producer has epochs: `fire_producer_id(uid, p, epoch)` (epoch 0: the id plans had
before epochs). A source partition forgets a producer idle for a day; a plan continuing the
sequence of a producer it forgot would be refused (unknown producer, sequence > 0) batch by
batch, for ever. So a plan made more than `TimerConfig.fire_renew_ms` (half that day) after the
last plan that fired starts the next epoch at sequence 0: a new producer the source accepts at
once. The epoch is in the plan record, so a plan fired again after a failover goes under the
same producer at the same sequences as the first time (a duplicate there).

When every append of a plan succeeded and no plan follows at once, the leader appends a *done
marker*: an empty plan at the next sequence (`TimerBook.done_marker()`). A plan fired long ago
must not be fired again by a later leader: the source partition forgets an idle producer (a day
without a batch), and a repeat it no longer knows is not a duplicate but a second copy. With the
marker, the last plan is empty unless its outcome really is unknown (its leader died within
seconds of it), and `last_plan` of an empty plan fires nothing.

*Two plans outstanding*: so that a plan's record commits while the previous plan's batches are
still being fired (not on the due path of its first batch), the leader may append plan n+1
before plan n fired in full, never plan n+2 before plan n did. Plan n+1 then lists plan n's own
batches again first (`Plan.carried` of them; its `sequence` is theirs), so the last plan in the
log still names every batch whose outcome is unknown: a new leader fires the last plan again,
carried batches included (a duplicate where they landed), exactly as with one plan. A fold
marks only a plan's own batches fired and takes a plan whose own part starts below the last
plan's end as a repeat (`Plan.start`). A plan that starts a new fire-producer epoch carries
nothing: it is made only once the previous plan fired in full.

*Roll-forward* (retention never pins disk for long timers): a timer log's segment older than the
timer log's retention goes, but a pending timer in it must not. Its leader appends a *copy* of
each pending batch there (ROLLED_HEADER = the original's offset; DELIVER_AT_HEADER = its due
time; value = the producer's batch, as the original holds it), then a *floor* record
(FLOOR_HEADER = offset F: no pending timer lies below F any more), and the log may then go below
F. It never goes below the last plan's record (an index folding the log from its start learns
the next plan's sequence there): a round whose cut would pass it appends the done marker again. Identity: a timer is
fired by the plan that names it, at the plan's sequence; a copy is the same timer at a new
place. The supersede rule, applied by every fold in log order: a copy takes its original's
place at once (the original is no longer pending, the copy is, with the same due time and
record count), so at every point of the log exactly one of the two is pending and a plan can
only ever name that one. A leader rolls only a batch pending in its book, and rolls and plans
are decided one at a time (the next one after the last committed and folded): so a copy never
follows a plan naming its original, nor a plan a copy it has not folded. A copy whose
original is not pending where it stands (only a broken leader writes one) is dead: ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BUCKET_MS",
    "DEFAULT_MAX_DELAY_MS",
    "DELIVER_AT_HEADER",
    "FIRE_RENEW_MS",
    "FLOOR_HEADER",
    "MAX_MAX_DELAY_MS",
    "MIN_MAX_DELAY_MS",
    "PAST_TOLERANCE_MS",
    "PLAN_HEADER",
    "ROLLED_HEADER",
    "TIMER_TOPIC_PREFIX",
    "Floor",
    "Plan",
    "Rolled",
    "TimerBatch",
    "TimerConfig",
    "timer_topic",
]

DAY_MS = 86_400_000
DEFAULT_MAX_DELAY_MS = 40 * DAY_MS
MIN_MAX_DELAY_MS = 1_000
MAX_MAX_DELAY_MS = 365 * DAY_MS
PAST_TOLERANCE_MS = 1_000  # a due time in the past by less than this is due at once
BUCKET_MS = 3_600_000  # the on-disk index's buckets: one hour of due times each
DELIVER_AT_HEADER = "flotilla-deliver-at"
PLAN_HEADER = "flotilla-timer-plan"
ROLLED_HEADER = "flotilla-timer-rolled"  # a copy of the pending batch at this offset (ASCII)
FLOOR_HEADER = "flotilla-timer-floor"  # no pending timer lies below this offset (ASCII)
TIMER_TOPIC_PREFIX = "__timers."
# half of `cluster.producers.EXPIRATION_MS` (a day: a source partition forgets a producer idle
# that long, measured on its batches' timestamps): a plan this long after the last one fires as
# a new fire producer (the next epoch) at sequence 0, with half a day to spare for a slow fire,
# a failover or clock skew (tests/timers/test_timers_book.py checks the relation)
FIRE_RENEW_MS = 12 * 3_600_000


def timer_topic(topic_uid: str) -> str:
    """The internal topic holding the timer logs of the source topic incarnation `topic_uid`
    (same partition count and replication factor as the source)."""
    return TIMER_TOPIC_PREFIX + topic_uid


@dataclass(frozen=True, slots=True, order=True)
class TimerBatch:
    """A delayed batch in the timer log: due at `due_ms`, at `offset` (its base offset in the
    timer log), `record_count` records. Ordered by (due_ms, offset): the firing order."""

    due_ms: int
    offset: int
    record_count: int


@dataclass(frozen=True, slots=True)
class Plan:
    """Batches fired together, in order: batch i is appended to the source partition as the
    fire producer of `epoch` with sequence `sequence` + the record counts of the batches before
    it. `sequence` continues the previous plan's (0 for the first): the fire producer's
    sequences are contiguous within an epoch. A plan made more than `fire_renew_ms` after the
    last one (the source may have forgotten the idle fire producer) starts the next epoch at
    sequence 0 instead (module docstring). `made_ms`: when the fire producer last wrote as
    far as the log knows: the plan's making (one with batches), its predecessor's (a done
    marker fires nothing); 0 in records from before epochs (unknown: the next plan renews).
    Plans are ordered by (epoch, sequence): a plan at or below the last one is a repeat."""

    sequence: int
    batches: tuple[TimerBatch, ...]
    epoch: int = 0
    made_ms: int = 0
    # the first `carried` batches are the previous plan's own, listed again because they were
    # still being fired when this plan was made (two plans outstanding: module docstring);
    # `sequence` is then the first carried batch's
    carried: int = 0

    @property
    def record_count(self) -> int:
        return sum(b.record_count for b in self.batches)

    @property
    def own(self) -> tuple[TimerBatch, ...]:
        """The batches this plan planned (not carried from the previous one)."""
        return self.batches[self.carried :]

    @property
    def own_sequence(self) -> int:
        """The fire producer's sequence of the first batch this plan planned."""
        return self.sequence + sum(b.record_count for b in self.batches[: self.carried])

    def own_plan(self) -> Plan:
        """What firing this plan appends once the plan before it fired: its own batches at
        their sequences (itself when it carries none)."""
        if not self.carried:
            return self
        return Plan(self.own_sequence, self.own, self.epoch, self.made_ms)

    @property
    def start(self) -> tuple[int, int]:
        """(epoch, own sequence): a plan whose start is below the `after` of the last plan
        applied is a repeat of one applied."""
        return (self.epoch, self.own_sequence)

    @property
    def after(self) -> tuple[int, int]:
        """(epoch, the sequence after it): a plan below this is a repeat of one applied."""
        return (self.epoch, self.sequence + self.record_count)


@dataclass(frozen=True, slots=True)
class Rolled:
    """A copy of the pending batch at `from_offset`, rolled forward: `batch` is the copy, at its
    own offset in the timer log, with the original's due time and record count. It supersedes
    the original (module docstring)."""

    batch: TimerBatch
    from_offset: int


@dataclass(frozen=True, slots=True)
class Floor:
    """No pending timer lies below `offset` in the timer log from here on (every one there was
    rolled forward): the log may go below it."""

    offset: int


@dataclass(frozen=True, slots=True)
class TimerConfig:
    bucket_ms: int = BUCKET_MS
    # buckets kept in memory ahead of now: the near window (the rest waits on disk)
    window_buckets: int = 2
    max_plan_records: int = 10_000  # a plan fires at most this many records
    max_plan_batches: int = 256
    max_roll_batches: int = 256  # a roll round copies at most this many batches
    max_roll_buckets: int = 16  # and reads at most this many buckets not loaded
    # a plan this long after the last one starts a new fire-producer epoch (FIRE_RENEW_MS)
    fire_renew_ms: int = FIRE_RENEW_MS
