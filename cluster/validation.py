"""Validation at the edge (DESIGN §9): names, ranges and sizes, with messages that name the bad
value and what is valid. Pure functions; the service turns `Invalid` (`cluster.errors`) into
gRPC statuses."""

from __future__ import annotations

import re

from cluster.errors import Invalid

__all__ = [
    "MAX_PARTITIONS",
    "MAX_REPLICATION_FACTOR",
    "Invalid",
    "check_member_id",
    "check_partition_count",
    "check_replication_factor",
    "check_topic_name",
]

TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
MEMBER_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MAX_PARTITIONS = 10_000
MAX_REPLICATION_FACTOR = 7


def check_topic_name(name: str) -> str:
    if not TOPIC_NAME.match(name) or name in {".", ".."}:
        shown = name if len(name) <= 40 else name[:40] + f"... ({len(name)} characters)"
        raise Invalid(
            f"topic name {shown!r} is invalid: use 1 to 200 characters from [A-Za-z0-9._-], "
            "not '.' or '..'"
        )
    return name


def check_member_id(member_id: str, error: type[ValueError] = Invalid) -> str:
    if not MEMBER_ID.match(member_id):
        raise error(
            f"member id {member_id!r} is invalid: use 1 to 64 characters from [A-Za-z0-9._-]"
        )
    return member_id


def check_partition_count(count: int) -> int:
    if not 1 <= count <= MAX_PARTITIONS:
        raise Invalid(f"partitions={count} is invalid: use 1..{MAX_PARTITIONS}")
    return count


def check_replication_factor(factor: int, live_members: int) -> int:
    if not 1 <= factor <= MAX_REPLICATION_FACTOR:
        raise Invalid(f"replication_factor={factor} is invalid: use 1..{MAX_REPLICATION_FACTOR}")
    if factor > live_members:
        raise Invalid(
            f"replication_factor={factor} exceeds the {live_members} live member(s): "
            f"use at most {live_members}"
        )
    return factor
