"""The ACL evaluator and binding validation (`cluster.authz`), table-driven; a deliberately broken
evaluator (allow wins over deny, prefixes matched as exact names, wildcard principal ignored)
is run against the same table to show the table catches it."""

from __future__ import annotations

import pytest

from cluster.authz import (
    Acl,
    AclTable,
    Decision,
    InvalidAcl,
    Operation,
    Permission,
    apply_security_change,
    parse_acl,
)
from cluster.errors import Invalid

P, C, A, ALL = Operation.PRODUCE, Operation.CONSUME, Operation.ADMIN, Operation.ALL

BINDINGS = (
    parse_acl("bob", "produce", "orders.*"),
    parse_acl("carol", "all", "orders.*"),
    parse_acl("carol", "consume", "orders.secret", "deny"),
    parse_acl("*", "consume", "public"),
    parse_acl("*", "produce", "orders.eu", "deny"),
    parse_acl("dave", "produce", "orders.eu"),
    parse_acl("erin", "admin", "*"),
    parse_acl("frank", "admin", "logs.*"),
)

# (principal, operation, topic, allowed, a fragment of the reason)
CASES = (
    ("bob", P, "orders.us", True, "allowed by ACL allow produce on 'orders.*'"),
    ("bob", P, "payments", False, "principal 'bob' may not produce to topic 'payments': no ACL"),
    ("bob", C, "orders.us", False, "may not consume from topic 'orders.us': no ACL allows it"),
    ("bob", A, "orders.us", False, "may not administer topic 'orders.us'"),
    ("bob", P, "orders", False, "no ACL allows it"),  # "orders.*" is not "orders"
    ("carol", C, "orders.us", True, "allow all on 'orders.*'"),
    ("carol", A, "orders.us", True, "allow all"),
    ("carol", C, "orders.secret", False, "denied by ACL deny consume on 'orders.secret'"),
    ("carol", P, "orders.secret", True, ""),  # the deny is of consume only
    ("bob", C, "public", True, "allow consume on 'public'"),  # "*": every principal
    ("zed", C, "public", True, ""),
    ("zed", C, "publicity", False, "no ACL allows it"),
    ("bob", P, "orders.eu", False, "denied by ACL deny produce on 'orders.eu'"),  # deny wins
    (
        "dave",
        P,
        "orders.eu",
        False,
        "denied by ACL deny produce on 'orders.eu'",
    ),  # over an exact allow
    ("erin", A, "*", True, "allow admin on '*'"),
    ("erin", A, "anything", True, ""),
    ("erin", P, "anything", False, "no ACL"),
    ("frank", A, "logs.app", True, ""),
    ("frank", A, "*", False, "may not administer the cluster ('*'"),  # a prefix is not '*'
    ("admin", A, "*", True, "superuser"),
    ("admin", P, "orders.eu", True, "superuser"),  # a superuser ignores even a deny
    ("node:n1", C, "orders.eu", True, "cluster node"),
    ("nobody", P, "x", False, "principal 'nobody' may not produce to topic 'x': no ACL allows it"),
)


class AllowWins(AclTable):
    """Broken on purpose: the first matching binding decides, so an allow listed before a deny
    wins; and prefixes are compared as exact names."""

    def check(self, principal: str, operation: Operation, topic: str) -> Decision:
        if self.is_superuser(principal):
            return Decision(True, "superuser")
        for acl in self.acls:
            same = acl.principal in (principal, "*") and acl.operation in (operation, ALL)
            if same and acl.resource == topic:
                return Decision(acl.permission is Permission.ALLOW, acl.describe())
        return Decision(False, "no ACL allows it")


def wrong_answers(table: AclTable) -> list[str]:
    wrong = []
    for principal, operation, topic, allowed, reason in CASES:
        decision = table.check(principal, operation, topic)
        if decision.allowed != allowed or reason not in decision.reason:
            wrong.append(f"{principal} {operation.value} {topic}: {decision}")
    return wrong


def test_the_evaluator_answers_every_case() -> None:
    assert wrong_answers(AclTable(BINDINGS, superusers=("admin",))) == []


def test_a_broken_evaluator_is_caught() -> None:
    wrong = wrong_answers(AllowWins(BINDINGS, superusers=("admin",)))
    assert any("dave produce orders.eu" in line for line in wrong)  # allow won over deny
    assert any("bob produce orders.us" in line for line in wrong)  # prefix not matched


def test_the_order_of_bindings_does_not_matter() -> None:
    assert wrong_answers(AclTable(reversed(BINDINGS), superusers=("admin",))) == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (("bo b", "produce", "t", "allow"), "principal 'bo b' is invalid: use 1 to 64"),
        (("", "produce", "t", "allow"), "principal '' is invalid"),
        (("node:n1", "produce", "t", "allow"), "principal 'node:n1' is invalid"),
        (("bob", "write", "t", "allow"), "operation 'write' is invalid: use produce | consume"),
        (("bob", "produce", "t", "maybe"), "permission 'maybe' is invalid: use allow | deny"),
        (("bob", "produce", "a/b", "allow"), "resource 'a/b' is invalid: use a topic name"),
        (("bob", "produce", "", "allow"), "resource '' is invalid"),
        (("bob", "produce", "or*ders", "allow"), "resource 'or*ders' is invalid"),
        (("bob", "produce", "..", "allow"), "resource '..' is invalid"),
    ],
)
def test_bad_bindings_are_refused_naming_the_bad_value(
    fields: tuple[str, str, str, str], message: str
) -> None:
    with pytest.raises(InvalidAcl) as caught:
        parse_acl(*fields)
    assert message in str(caught.value)
    assert isinstance(caught.value, Invalid)  # the service answers INVALID_ARGUMENT


def test_valid_bindings_round_trip() -> None:
    acl = parse_acl("bob", "consume", "orders.*", "")
    assert acl == Acl("bob", C, "orders.*", Permission.ALLOW)
    assert Acl.from_wire(acl.to_wire()) == acl
    assert parse_acl("*", "all", "*", "deny").permission is Permission.DENY


def test_the_state_transition_adds_removes_and_revokes() -> None:
    acls: list[dict[str, str]] = []
    tokens: dict[str, list[object]] = {}
    wire = parse_acl("bob", "produce", "orders.*").to_wire()
    assert apply_security_change(acls, tokens, {"op": "add_acl", "acl": wire}) == 1
    assert apply_security_change(acls, tokens, {"op": "add_acl", "acl": wire}) == 0
    assert acls == [wire]
    assert apply_security_change(acls, tokens, {"op": "remove_acl", "acl": wire}) == 1
    assert apply_security_change(acls, tokens, {"op": "remove_acl", "acl": wire}) == 0
    token = {"op": "add_token", "hash": "ab" * 32, "principal": "bob", "token_id": "ababab"}
    assert apply_security_change(acls, tokens, {**token, "created_ms": 5}) == 1
    assert apply_security_change(acls, tokens, {**token, "created_ms": 6}) == 0
    assert tokens == {"ab" * 32: ["bob", "ababab", 5]}
    assert apply_security_change(acls, tokens, {"op": "revoke_token", "token_id": "zz"}) == 0
    assert apply_security_change(acls, tokens, {"op": "revoke_token", "token_id": "ababab"}) == 1
    assert tokens == {}
    assert apply_security_change(acls, tokens, {"op": "bogus"}) == -1
