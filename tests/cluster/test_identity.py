"""Who a call is (`cluster.identity.identify`), in the design's order, with a real `PeerAuth` and
stand-ins only for the gRPC context (metadata and the verified certificate)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from cluster.identity import (
    Identity,
    PeerRefused,
    TokenEntry,
    Unauthenticated,
    UnknownToken,
    identify,
    new_token,
    token_hash,
    token_id,
)
from cluster.peer_auth import PEER_KEY, PeerAuth

TOKEN = new_token()
TOKENS = {token_hash(TOKEN): TokenEntry("bob", token_id(token_hash(TOKEN)), 1)}
CLUSTER = PeerAuth("n1", "secret")
OTHER = PeerAuth("n1", "another secret")


@dataclass(frozen=True)
class Cert:
    kind: str
    name: str


class Context:
    def __init__(self, *metadata: tuple[str, str]) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata


def who(*metadata: tuple[str, str], cert: Cert | None = None) -> Identity:
    def certificate(context: Any) -> Cert | None:
        return cert

    return identify(Context(*metadata), CLUSTER.verify_call, TOKENS, certificate)


def test_each_kind_of_proof_names_its_principal() -> None:
    assert who((PEER_KEY, CLUSTER.sign_call())) == Identity("node:n1", "peer", True)
    node_cert = Cert("node", "n1")
    assert who((PEER_KEY, CLUSTER.sign_call()), cert=node_cert).principal == "node:n1"
    assert who(("authorization", f"Bearer {TOKEN}")) == Identity("bob", "token", True)
    assert who(("authorization", f"bearer  {TOKEN} ")).principal == "bob"
    assert who(cert=Cert("client", "carol")) == Identity("carol", "certificate", True)
    assert who() == Identity("anonymous", "", False)
    # a node certificate without the peer proof is no node, and no client either
    assert who(cert=node_cert) == Identity("anonymous", "", False)
    # nor may a client certificate (of a CA the operator runs) name a node
    with pytest.raises(Unauthenticated, match="names 'node:n1': names starting with 'node:'"):
        who(cert=Cert("client", "node:n1"))


def test_a_token_wins_over_a_certificate_and_an_unknown_one_is_refused_even_with_one() -> None:
    carol = Cert("client", "carol")
    assert who(("authorization", f"Bearer {TOKEN}"), cert=carol).principal == "bob"
    with pytest.raises(UnknownToken, match=r"token flt_… \(id [0-9a-f]{12}\) is not known"):
        who(("authorization", "Bearer flt_revoked"), cert=carol)
    with pytest.raises(Unauthenticated, match="expected 'Bearer <token>'"):
        who(("authorization", f"Basic {TOKEN}"))
    with pytest.raises(Unauthenticated, match="expected 'Bearer <token>'"):
        who(("authorization", "Bearer "))


def test_a_forged_or_mismatched_peer_proof_is_refused_not_passed_over() -> None:
    bearer = ("authorization", f"Bearer {TOKEN}")
    with pytest.raises(PeerRefused, match="not signed with this cluster's secret"):
        who((PEER_KEY, OTHER.sign_call()), bearer)  # the token does not rescue it
    with pytest.raises(PeerRefused, match="malformed"):
        who((PEER_KEY, "n1.1.abc"))
    with pytest.raises(PeerRefused, match="outside the"):
        who((PEER_KEY, CLUSTER.sign_call(now_ms=1000)))
    with pytest.raises(PeerRefused, match="client certificate of 'mallory'"):
        who((PEER_KEY, CLUSTER.sign_call()), cert=Cert("client", "mallory"))
    with pytest.raises(PeerRefused, match="node certificate of 'n2'"):
        who((PEER_KEY, CLUSTER.sign_call()), cert=Cert("node", "n2"))
    with pytest.raises(PeerRefused, match="no cluster secret"):
        identify(Context((PEER_KEY, CLUSTER.sign_call())), None, TOKENS)


def test_tokens_are_long_random_and_named_by_their_hash() -> None:
    a, b = new_token(), new_token()
    assert a != b and a.startswith("flt_") and len(a) == 47
    assert token_id(token_hash(a)) == token_hash(a)[:12]
