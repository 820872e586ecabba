"""Who may do what: ACL bindings, their validation and the evaluator (pure: no I/O, no clock).

An ACL binding grants (`allow`) or refuses (`deny`) one operation on a resource to a principal:

- principal: a client name (`[A-Za-z0-9._-]{1,64}`: a token's principal or a client
  certificate's CN), or `*`, every authenticated principal;
- operation: `produce` | `consume` (Fetch, Subscribe, groups and queues) | `admin` (create,
  alter and delete topics; reset and delete group offsets; on `*` also ACLs and tokens) | `all`;
- resource: a topic name, or a prefix ending in `*` (`orders.*`; `*` alone is every topic and,
  for admin, the cluster itself).

`AclTable.check(principal, operation, topic)` decides: superusers (`NodeConfig.superusers`) and
the cluster's own nodes (`node:<id>`) may do everything; otherwise a matching deny refuses
whatever any allow says (deny wins, as in Kafka), a matching allow permits, and no match refuses.
The `Decision`'s reason is the PERMISSION_DENIED message of the client API (DESIGN-27).

The replicated control plane keeps bindings and token hashes as plain dicts
(`apply_security_change` is its state transition, run on every controller alike).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cluster.errors import Invalid
from cluster.validation import TOPIC_NAME

__all__ = [
    "ANY_PRINCIPAL",
    "NODE_PRINCIPAL_PREFIX",
    "Acl",
    "AclTable",
    "Decision",
    "InvalidAcl",
    "Operation",
    "Permission",
    "apply_security_change",
    "check_principal",
    "parse_acl",
]

ANY_PRINCIPAL = "*"
NODE_PRINCIPAL_PREFIX = "node:"
PRINCIPAL_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class InvalidAcl(Invalid):
    """A binding (or a principal) that cannot be: nothing was changed."""


class Operation(enum.Enum):
    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"
    ALL = "all"


class Permission(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"


# how a refusal names what was asked: "may not <verb> <resource>"
_VERBS = {
    Operation.PRODUCE: "produce to",
    Operation.CONSUME: "consume from",
    Operation.ADMIN: "administer",
    Operation.ALL: "use",
}


@dataclass(frozen=True, slots=True)
class Acl:
    principal: str
    operation: Operation
    resource: str
    permission: Permission = Permission.ALLOW

    def matches(self, principal: str, operation: Operation, topic: str) -> bool:
        return (
            self.principal in (principal, ANY_PRINCIPAL)
            and (self.operation is operation or self.operation is Operation.ALL)
            and resource_matches(self.resource, topic)
        )

    def describe(self) -> str:
        """`deny consume on 'orders.*'`: how a refusal names the binding that refused."""
        return f"{self.permission.value} {self.operation.value} on {self.resource!r}"

    def to_wire(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "operation": self.operation.value,
            "resource": self.resource,
            "permission": self.permission.value,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Acl:
        return parse_acl(
            str(data["principal"]),
            str(data["operation"]),
            str(data["resource"]),
            str(data.get("permission", "allow")),
        )


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str  # why: the PERMISSION_DENIED message when refused


def resource_matches(resource: str, topic: str) -> bool:
    """An exact name matches itself; `prefix*` every name starting with the prefix (`*` every
    name, and `*` itself: admin on the cluster)."""
    if resource.endswith("*"):
        return topic.startswith(resource[:-1])
    return resource == topic


def check_principal(principal: str, *, wildcard: bool = True) -> str:
    if (wildcard and principal == ANY_PRINCIPAL) or PRINCIPAL_NAME.match(principal):
        return principal
    shown = principal if len(principal) <= 40 else principal[:40] + "..."
    also = ", or '*' for every authenticated principal" if wildcard else ""
    raise InvalidAcl(
        f"principal {shown!r} is invalid: use 1 to 64 characters from [A-Za-z0-9._-]{also}"
    )


def _check_resource(resource: str) -> str:
    name = resource[:-1] if resource.endswith("*") else resource
    if resource == "*" or (TOPIC_NAME.match(name) and name not in {".", ".."}):
        return resource
    shown = resource if len(resource) <= 40 else resource[:40] + "..."
    raise InvalidAcl(
        f"resource {shown!r} is invalid: use a topic name ([A-Za-z0-9._-]{{1,200}}), a prefix "
        "ending in '*' ('orders.*'), or '*' for every topic"
    )


def _enum(kind: type[enum.Enum], field: str, value: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        valid = " | ".join(member.value for member in kind)
        raise InvalidAcl(f"{field} {value!r} is invalid: use {valid}") from None


def parse_acl(principal: str, operation: str, resource: str, permission: str = "allow") -> Acl:
    """A binding from its four strings (the wire's), or `InvalidAcl` naming the bad one.
    An empty permission is "allow"."""
    return Acl(
        check_principal(principal),
        _enum(Operation, "operation", operation),
        _check_resource(resource),
        _enum(Permission, "permission", permission or Permission.ALLOW.value),
    )


class AclTable:
    """The bindings, indexed by principal; `check` reads no more than the caller's bindings and
    the wildcard's."""

    def __init__(self, acls: Iterable[Acl] = (), superusers: Iterable[str] = ()) -> None:
        self.acls = tuple(dict.fromkeys(acls))  # in order, without repeats
        self.superusers = frozenset(superusers)
        self._by_principal: dict[str, list[Acl]] = {}
        for acl in self.acls:
            self._by_principal.setdefault(acl.principal, []).append(acl)

    def is_superuser(self, principal: str) -> bool:
        return principal in self.superusers or principal.startswith(NODE_PRINCIPAL_PREFIX)

    def check(self, principal: str, operation: Operation, topic: str) -> Decision:
        """May `principal` do `operation` on `topic` (`*`: on the cluster itself)?"""
        if principal in self.superusers:
            return Decision(True, f"principal {principal!r} is a superuser")
        if principal.startswith(NODE_PRINCIPAL_PREFIX):
            return Decision(True, f"principal {principal!r} is a cluster node")
        candidates = [
            *self._by_principal.get(principal, ()),
            *self._by_principal.get(ANY_PRINCIPAL, ()),
        ]
        matching = [acl for acl in candidates if acl.matches(principal, operation, topic)]
        refused = f"principal {principal!r} may not {_VERBS[operation]} {_resource(topic)}"
        for acl in matching:
            if acl.permission is Permission.DENY:
                return Decision(False, f"{refused}: denied by ACL {acl.describe()}")
        if matching:
            return Decision(True, f"allowed by ACL {matching[0].describe()}")
        return Decision(False, f"{refused}: no ACL allows it")


def _resource(topic: str) -> str:
    return "the cluster ('*': ACLs, tokens, groups)" if topic == "*" else f"topic {topic!r}"


def apply_security_change(
    acls: list[dict[str, str]], tokens: dict[str, list[Any]], change: Mapping[str, Any]
) -> int:
    """The control plane's state transition for ACLs and tokens (run alike on every
    controller, so it must be deterministic): `change["op"]` is
    - "add_acl" (`acl`: a binding's wire form): 1 if added, 0 if it was there already;
    - "remove_acl" (`acl`): how many were removed (0 or 1: bindings are kept without repeats);
    - "add_token" (`hash`, `principal`, `token_id`, `created_ms`): 1 (0 if the hash is known);
    - "revoke_token" (`token_id`): how many tokens had that id (or the full hash).
    Returns the count; an unknown op changes nothing and returns -1."""
    op = change.get("op")
    if op == "add_acl":
        if change["acl"] in acls:
            return 0
        acls.append(dict(change["acl"]))
        return 1
    if op == "remove_acl":
        before = len(acls)
        acls[:] = [acl for acl in acls if acl != change["acl"]]
        return before - len(acls)
    if op == "add_token":
        if change["hash"] in tokens:
            return 0
        tokens[change["hash"]] = [change["principal"], change["token_id"], change["created_ms"]]
        return 1
    if op == "revoke_token":
        wanted = change["token_id"]
        gone = [h for h, (_, token_id, _) in tokens.items() if wanted in (token_id, h)]
        for token_hash in gone:
            del tokens[token_hash]
        return len(gone)
    return -1
