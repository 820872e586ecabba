"""Rebuilding a replica whose log is damaged (issue 21, item 2).

Recovery refuses a log with a bad entry followed by a valid one (`storage.DamagedLog`: that is
corruption, not a torn tail, and cutting there would drop entries that were fsynced and perhaps
acknowledged). Such a replica is in the place of a retired one (`cluster.opener`): it lost
entries it may have acknowledged, so it must vote as if it still held them. Its vote floor
(`RaftNode.vote_floor`) becomes the end of the damaged log, valid entries after the damage
included, or the journal's (term, commit) if that commit lies beyond it (the damage hid entries
it knew committed: their terms are unknown, but no later than its term). The floor is written
first, durably, in a `REBUILT` marker (kept from then on, like `REJOINED`'s); then the log
directory is moved aside to `damaged-<n>` for the operator (only the newest is kept: a log may
be large; the replica's deletion takes it too) and the replica opens with an empty log, its term
and vote, and the configuration it opened with before.

Why not an empty configuration, as for a replica added back after retiring: the floor alone
keeps it from voting for a log less up to date than the one it held, and from campaigning before
its log reaches it; its log, rebuilt from index 1 (or reset to a leader's boundary, which
carries the configuration), then holds the configurations of a replica that never lost
anything. An empty one would keep it from ever campaigning again in a group whose log holds no
configuration entry (one that never changed membership).

Its group's leader still counts the entries it acknowledged: a heartbeat whose commit its log
does not reach makes it say so, and the leader probes it from its log's end
(`Progress.maybe_decrease_to`). A crash at any point leaves the marker, the damaged log, or
both, and the next open finishes the work. Reported by a WARNING line naming the replica, the
damaged file and position, and by `flotilla_replicas_rebuilt_total`.
"""

from __future__ import annotations

import logging
import os
import shutil

from raft.types import LogPosition
from storage import DamagedLog, FileHandles, HardState
from storage.atomic import fsync_directory, write_atomic
from storage.timer_index import INDEX_DIRECTORY

__all__ = ["DAMAGED_KEPT", "DAMAGED_PREFIX", "REBUILT", "rebuilt_floor", "set_aside"]

log = logging.getLogger("flotilla.rebuild")

# The marker holding the vote floor of a replica whose damaged log was moved aside.
REBUILT = "REBUILT"
# A damaged log moved aside (`damaged-<n>`, n counting up), and how many of them are kept.
DAMAGED_PREFIX = "damaged-"
DAMAGED_KEPT = 1


def set_aside(
    directory: str,
    group: str,
    damage: DamagedLog,
    hard_state: HardState,
    floor: LogPosition,
    handles: FileHandles,
) -> LogPosition:
    """Storage thread: `group`'s log, in `directory`/log, is damaged. Saves the vote floor in
    the `REBUILT` marker (first, durably), moves the log aside and returns the floor; the
    replica then opens with an empty log. `floor`: the one it held already."""
    floor = max(floor, LogPosition(damage.last_term, damage.last_index))
    if hard_state.commit > damage.last_index:
        floor = max(floor, LogPosition(hard_state.term, hard_state.commit))
    write_atomic(os.path.join(directory, REBUILT), f"{floor.term} {floor.index}\n".encode())
    # a timer log's index was derived from the damaged log: it goes before the log moves aside
    # (a crash between the two sets the log aside again), and the replica's follower rebuilds
    # it from the log its leader sends
    shutil.rmtree(os.path.join(directory, INDEX_DIRECTORY), ignore_errors=True)
    log_dir = os.path.join(directory, "log")
    for name in os.listdir(log_dir):  # the failed open left them in the shared cache
        handles.discard(os.path.join(log_dir, name))
    kept = sorted(
        (int(name[len(DAMAGED_PREFIX) :]), name)
        for name in os.listdir(directory)
        if name.startswith(DAMAGED_PREFIX) and name[len(DAMAGED_PREFIX) :].isdigit()
    )
    for _, name in kept[: max(0, len(kept) - DAMAGED_KEPT + 1)]:
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    aside = os.path.join(directory, f"{DAMAGED_PREFIX}{kept[-1][0] + 1 if kept else 1}")
    os.rename(log_dir, aside)
    fsync_directory(directory)
    log.warning(
        "rebuilding replica %s from its peers: %s. Its log is kept in %s; it starts empty, "
        "voting only for logs at least as up to date as (term %d, index %d)",
        group, damage, aside, floor.term, floor.index,
    )  # fmt: skip
    return floor


def rebuilt_floor(directory: str) -> LogPosition:
    """The vote floor a `REBUILT` marker holds; (0, 0) without one."""
    path = os.path.join(directory, REBUILT)
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read().strip()
    except FileNotFoundError:
        return LogPosition()
    parts = text.split()
    if len(parts) != 2 or not all(part.isdigit() for part in parts):
        raise ValueError(f"{path} holds {text!r}; a vote floor is '<term> <index>'")
    return LogPosition(int(parts[0]), int(parts[1]))
