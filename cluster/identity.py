"""Who is calling: the principal of a client-API call, and bearer tokens.

`identify` looks at one call's metadata and TLS context, first match wins (DESIGN-27):

1. `flotilla-peer` metadata (`cluster.peer_auth`) → `node:<id>`, via "peer". The value must
   verify (a forged or stale one is UNAUTHENTICATED, never a fall-through to weaker proof); with
   mutual TLS the caller's certificate must also be the node certificate of that same id.
2. `authorization: Bearer <token>` → the token's principal, via "token". An unknown token is
   UNAUTHENTICATED even if a certificate is present (a revoked token must not quietly become
   the certificate's principal).
3. a client certificate (mutual TLS) → its name, via "certificate". A node certificate without
   the peer metadata is no node: it counts as nothing here.
4. none → not authenticated (`Identity.authenticated` False, principal "anonymous").

Cost per call: a scan of the call's few metadata pairs; a token is one SHA-256 and a dict
lookup; the peer proof one HMAC (`PeerAuth.verify_call`); certificates are parsed once per
distinct certificate (`cluster.tls` caches them).

Tokens are `"flt_" + secrets.token_urlsafe(32)`; the cluster keeps only their SHA-256 (hex), and
names a token by the first 12 hex digits of it (`token_id`).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cluster.authz import NODE_PRINCIPAL_PREFIX
from cluster.errors import ClusterError

__all__ = [
    "ANONYMOUS",
    "AUTHORIZATION_KEY",
    "NO_CREDENTIALS",
    "PEER_KEY",
    "Identity",
    "PeerRefused",
    "TokenEntry",
    "Unauthenticated",
    "UnknownToken",
    "identify",
    "new_token",
    "token_hash",
    "token_id",
]

PEER_KEY = "flotilla-peer"  # = cluster.peer_auth.PEER_KEY
AUTHORIZATION_KEY = "authorization"
TOKEN_PREFIX = "flt_"
TOKEN_ID_DIGITS = 12
ANONYMOUS = "anonymous"
NO_CREDENTIALS = (
    "no credentials: present a client certificate signed by the cluster's CA or a token "
    "(Client(..., token=) / FLOTILLA_TOKEN)"
)


class Unauthenticated(ClusterError):
    """The call proves no principal, or a wrong one: UNAUTHENTICATED, nothing changed."""


class UnknownToken(Unauthenticated):
    """A bearer token whose hash the table does not hold."""


class PeerRefused(Unauthenticated):
    """A call's `flotilla-peer` proof failed (counted and logged as a rejected peer call)."""


@dataclass(frozen=True, slots=True)
class Identity:
    principal: str  # "node:<id>", a client name, or ANONYMOUS
    via: str  # "peer" | "token" | "certificate" | "" (not authenticated)
    authenticated: bool


@dataclass(frozen=True, slots=True)
class TokenEntry:
    principal: str
    token_id: str
    created_ms: int


class CallerCertificate(Protocol):
    """`cluster.tls.CertIdentity`: what a verified client certificate names."""

    @property
    def kind(self) -> str: ...  # "node" | "client"

    @property
    def name(self) -> str: ...


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_id(hashed: str) -> str:
    return hashed[:TOKEN_ID_DIGITS]


def _no_certificate(context: Any) -> CallerCertificate | None:
    return None


def identify(
    context: Any,
    peer_check: Callable[[str], str] | None,
    tokens: Mapping[str, TokenEntry],
    certificate: Callable[[Any], CallerCertificate | None] = _no_certificate,
) -> Identity:
    """The caller of `context` (a `grpc.aio.ServicerContext`), or `Unauthenticated` for a proof
    that fails. `peer_check(value) -> node id` raises a `ClusterError` naming why a
    `flotilla-peer` value does not verify (`PeerAuth.verify_call`; None: this node has no
    secret, so no caller is a node); `tokens`: {SHA-256 hex of a token: its entry};
    `certificate(context)`: the verified client certificate, if any (`tls.caller_certificate`)."""
    peer_value = bearer = None
    for key, value in context.invocation_metadata() or ():
        if key == PEER_KEY:
            peer_value = value
        elif key == AUTHORIZATION_KEY:
            bearer = value
    if peer_value is not None:
        return _peer(context, peer_value, peer_check, certificate)
    if bearer is not None:
        return _token(bearer, tokens)
    presented = certificate(context)
    if presented is None or presented.kind == "node":
        return Identity(ANONYMOUS, "", False)
    if presented.name.startswith(NODE_PRINCIPAL_PREFIX):  # a CA of the operator's may say so
        raise Unauthenticated(
            f"the client certificate names {presented.name!r}: names starting with "
            f"{NODE_PRINCIPAL_PREFIX!r} are the cluster's nodes, proven by a node certificate "
            "and the cluster secret, never by a client certificate"
        )
    return Identity(presented.name, "certificate", True)


def _peer(
    context: Any,
    value: str | bytes,
    peer_check: Callable[[str], str] | None,
    certificate: Callable[[Any], CallerCertificate | None],
) -> Identity:
    text = value.decode(errors="replace") if isinstance(value, bytes) else value
    if peer_check is None:
        raise PeerRefused(f"{PEER_KEY} metadata is refused: this node has no cluster secret")
    try:
        node_id = peer_check(text)
    except ClusterError as error:
        raise PeerRefused(str(error)) from None
    presented = certificate(context)
    if presented is not None and (presented.kind, presented.name) != ("node", node_id):
        raise PeerRefused(
            f"{PEER_KEY} metadata names node {node_id!r} but the caller's certificate is the "
            f"{presented.kind} certificate of {presented.name!r}: a node calls with its own "
            "node certificate"
        )
    return Identity(NODE_PRINCIPAL_PREFIX + node_id, "peer", True)


def _token(value: str | bytes, tokens: Mapping[str, TokenEntry]) -> Identity:
    text = value.decode(errors="replace") if isinstance(value, bytes) else value
    scheme, _, token = text.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated(
            "metadata 'authorization' is malformed: expected 'Bearer <token>' (a token made by "
            "CreateToken / flotilla token add)"
        )
    hashed = token_hash(token)
    entry = tokens.get(hashed)
    if entry is None:
        shown = token[: len(TOKEN_PREFIX)] if token.startswith(TOKEN_PREFIX) else ""
        raise UnknownToken(
            f"token {shown}… (id {token_id(hashed)}) is not known to the cluster: it was "
            "revoked, or never made by this cluster"
        )
    return Identity(entry.principal, "token", True)
