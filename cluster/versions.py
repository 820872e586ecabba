"""The software version a node advertises in gossip (`membership.Member.version`), and what a
feature that writes a new kind of replicated entry needs of the replicas that will read it.

In a rolling upgrade old and new nodes run side by side. A node that leads a partition writes
a new kind of entry only when every replica of that partition advertises a version that reads
it (`reads_group_entries`, `reads_queue_entries`); a replica whose version is not known (never heard of, e.g. down
since before this node started) does not hold it up. An old node that is handed an entry it
cannot read refuses it rather than guess (`consumers.coordinator.UnknownEntry`).
"""

from __future__ import annotations

__all__ = [
    "GROUP_ENTRIES_SINCE",
    "QUEUE_ENTRIES_SINCE",
    "TIMERS_SINCE",
    "VERSION",
    "parse_version",
    "reads_group_entries",
    "reads_queue_entries",
    "reads_timers",
]

VERSION = "0.4.0"
# consumer-group entries in `__groups` partitions (`consumers.entries`), from this version on
GROUP_ENTRIES_SINCE = (0, 2)
# queue entries (leases, acks, dead letters: groups of kind "queue") in `__groups` partitions
QUEUE_ENTRIES_SINCE = (0, 3)
# delayed delivery: timer logs (`__timers.<uid>` partitions) and their plan records
TIMERS_SINCE = (0, 4)


def parse_version(version: str) -> tuple[int, ...] | None:
    """(major, minor, ...) of a dotted version ("0.2.0", "1.4"); None if it is not one."""
    parts = version.split(".")
    if not version or not all(part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts)


def reads_group_entries(version: str | None) -> bool | None:
    """Does a node of `version` read consumer-group entries? None when unknown."""
    return _reads(version, GROUP_ENTRIES_SINCE)


def reads_queue_entries(version: str | None) -> bool | None:
    """Does a node of `version` read queue entries? None when unknown."""
    return _reads(version, QUEUE_ENTRIES_SINCE)


def reads_timers(version: str | None) -> bool | None:
    """Does a node of `version` keep timer logs (delayed delivery)? None when unknown."""
    return _reads(version, TIMERS_SINCE)


def _reads(version: str | None, since: tuple[int, ...]) -> bool | None:
    parsed = parse_version(version) if version else None
    if parsed is None:
        return None
    return parsed[: len(since)] >= since
