"""Quarantine: one replica's unexpected error stops that replica, not its neighbours.

An exception in one group's step, tick, Ready or apply (a bug, a corrupt entry met in a sealed
segment), or in opening one replica (an unreadable or damaged directory), is that replica's
alone: the MultiRaft host removes it from the rounds (it is not stepped, ticked, or voting; its
produce waiters settle; its files are closed) and the opener never opens it again in this
process, while every other group's inputs of the round and every other replica of an opening
batch go on. A quarantined replica is reported, with its reason, in `Health`
(`HealthResponse.quarantined`), the `flotilla_replicas_quarantined` gauge and `flotilla status`.
A restart tries it again (the error may have been transient; if not, it is quarantined again).
A log that recovery finds damaged (`storage.DamagedLog`) is not quarantined but rebuilt from the
replica's peers (`cluster.rebuild`), unless its topic has a single replica.

Errors of the disk itself are not quarantined but fail-stop the node (`cluster.failstop`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from cluster.logs import event

__all__ = ["Quarantine", "Quarantined"]

log = logging.getLogger("flotilla.quarantine")


@dataclass(frozen=True, slots=True)
class Quarantined:
    group: str
    reason: str  # what the replica was doing, and the error
    topic_uid: str  # the topic incarnation it belongs to ("" unknown)
    since_unix_s: float


class Quarantine:
    """The replicas quarantined on this node (event loop only)."""

    def __init__(self) -> None:
        self._entries: dict[str, Quarantined] = {}

    def add(self, group: str, doing: str, error: BaseException, topic_uid: str = "") -> Quarantined:
        reason = f"{doing} {group} failed: {type(error).__name__}: {error}"
        entry = Quarantined(group, reason, topic_uid, time.time())
        self._entries[group] = entry
        topic, _, partition = group.rpartition("/")
        event(
            log, "quarantine", level=logging.ERROR, topic=topic, partition=partition,
            doing=doing, error=f"{type(error).__name__}: {error}",
            note="this replica stopped; its neighbours go on", exc_info=error,
        )  # fmt: skip
        return entry

    def __contains__(self, group: object) -> bool:
        return group in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[Quarantined]:
        return sorted(self._entries.values(), key=lambda entry: entry.group)

    def forget_if(self, gone: Callable[[Quarantined], bool]) -> None:
        """Drops the entries `gone` says are obsolete (their topic was deleted)."""
        for group in [g for g, entry in self._entries.items() if gone(entry)]:
            del self._entries[group]
