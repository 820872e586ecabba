"""`Ready`: one batch of work the core hands its host. The order to carry it out in, and what
must be durable before its messages are sent, is the persistence contract in `raft.core`."""

from __future__ import annotations

from dataclasses import dataclass

from raft.types import Entry, HardState, LogBoundary, Message

__all__ = ["Ready"]


@dataclass(frozen=True, slots=True)
class Ready:
    """Fields, in the order the host handles them:

    boundary:       if set, reset the log to start after it (`RaftLogStorage.reset`); every
                    entry up to `boundary.index` is committed and the host's applied state
                    jumps there.
    truncate_from:  if set, drop the host's entries from this index on (a conflict), first.
    entries:        then append these (`entries[0].index` follows the log's last index).
    hard_state:     then save this (term, vote, commit), if it changed.
    messages:       then send these. Unless `send_before_persist`, only once the three fields
                    above are durable.
    send_before_persist: True only for a leader whose term and vote are unchanged: its
                    messages may go out while its own entries are still being made durable
                    (Raft thesis §10.2.1); the host reports durability later with
                    `advance(durable=False)` and `report_durable`.
    committed:      (first, last) inclusive: entries now committed, to apply; they are in the
                    host's log already (written by an earlier Ready).
    boundary_state: with `boundary`: the host state as of it, as the leader's host sent it
                    (`LogReset.state`; empty if none): the host restores it with the reset,
                    durably, before the messages go out.
    """

    hard_state: HardState | None
    boundary: LogBoundary | None
    truncate_from: int | None
    entries: tuple[Entry, ...]
    messages: tuple[Message, ...]
    committed: tuple[int, int] | None
    send_before_persist: bool
    boundary_state: bytes = b""

    @property
    def must_sync(self) -> bool:
        """Whether anything here needs an fsync before the messages go out."""
        return bool(self.entries) or self.boundary is not None or self.hard_state is not None
