"""The node's copy of the ACLs and tokens, and the authorizer every client call goes through.

The bindings and token hashes live in the replicated control plane (`cluster.controller`). A
controller reads them from its own store whenever its version moved (so a change it made is in
force for its next call); any other node asks a controller every `POLL_S` (ListAcls, and
ListTokens with `TOKEN_HASHES_KEY`, which a controller answers with full hashes to a node only)
and at once after a change it forwarded. Every node evaluates locally: no call waits on the
control plane to be authorized. A revoked token thus stops working on the node that revoked it
at once, on the others within a poll.

Changes go to the control plane on a controller; another node forwards them to one, as topic
changes are forwarded (`cluster.topics`), after authorizing the caller itself.

`Authorizer.authorize(context, operation, topic)` is the one check: off (`NodeConfig.
authorization` "off", or "auto" without TLS) it lets everything through without looking;
on, it names the caller (`cluster.identity.identify`) and asks the table (`cluster.authz`).
The bootstrap token (`NodeConfig.bootstrap_token`) is known to every node from its own config
(hashed at start, never stored), as `superusers[0]`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from cluster.authz import Acl, AclTable, Decision, InvalidAcl, Operation
from cluster.config import ConfigError, NodeConfig
from cluster.controller import ControlPlaneError, MetadataStore
from cluster.errors import ClusterError, ControlPlaneUnavailable
from cluster.identity import (
    NO_CREDENTIALS,
    CallerCertificate,
    Identity,
    PeerRefused,
    TokenEntry,
    Unauthenticated,
    UnknownToken,
    identify,
    token_hash,
    token_id,
)
from cluster.transport import PeerTransport
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

__all__ = [
    "POLL_S",
    "TOKEN_HASHES_KEY",
    "Authorizer",
    "PermissionDenied",
    "TableNotLoaded",
    "authorization_enabled",
    "check_bootstrap_token",
]

log = logging.getLogger("flotilla.acl")

POLL_S = 1.0
# ListTokens from a node with this metadata key answers full SHA-256 hashes in `token_id`
TOKEN_HASHES_KEY = "flotilla-token-hashes"
# A controller's refusal of a forwarded change, as this node reports it in turn.
_ANSWERS: dict[grpc.StatusCode, type[ClusterError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidAcl,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
}


class PermissionDenied(ClusterError):
    """The caller is known but no ACL lets it do this: PERMISSION_DENIED, nothing changed."""


class TableNotLoaded(ControlPlaneUnavailable):
    """The node has not loaded the ACL table yet (it is starting): a refusal it would make now
    may be wrong, so it says UNAVAILABLE (retried) instead."""

    def __init__(self, node_id: str) -> None:
        super().__init__(
            f"node {node_id} is starting: it has not loaded the ACL and token table from the "
            "control plane yet; retry"
        )


MIN_BOOTSTRAP_TOKEN_CHARS = 16


def check_bootstrap_token(config: NodeConfig) -> None:
    """A bootstrap token is a superuser's password: refuse one anyone could guess, and one with
    no superuser to be (`ConfigError`: the node does not start)."""
    if not config.superusers:
        raise ConfigError(
            "bootstrap_token (FLOTILLA_BOOTSTRAP_TOKEN) authenticates as superusers[0], but "
            "superusers is empty: name one (--superusers admin) or drop the token"
        )
    if len(config.bootstrap_token) < MIN_BOOTSTRAP_TOKEN_CHARS:
        raise ConfigError(
            f"bootstrap_token (FLOTILLA_BOOTSTRAP_TOKEN) has {len(config.bootstrap_token)} "
            f"characters: use at least {MIN_BOOTSTRAP_TOKEN_CHARS} random ones (e.g. python -c "
            "'import secrets; print(secrets.token_urlsafe(32))')"
        )


def authorization_enabled(config: NodeConfig) -> bool:
    mode = config.authorization
    return mode == "on" or (mode == "auto" and bool(config.tls_cert))


class Authorizer:
    def __init__(
        self,
        config: NodeConfig,
        transport: PeerTransport,
        controller: Callable[[], MetadataStore | None],
    ) -> None:
        self.config = config
        self.enabled = authorization_enabled(config)
        self.transport = transport
        self._controller = controller
        # set by the node once its peer proof and TLS are up (`cluster.peer_auth`, `cluster.tls`)
        self.peer_check: Callable[[str], str] | None = None
        self.certificate: Callable[[Any], CallerCertificate | None] | None = None
        # counts and logs a refused peer proof (`PeerAuth.reject(kind, source, reason)`)
        self.peer_rejected: Callable[[str, str, str], None] | None = None
        # a client's call refused: (operation or "any", "unauthenticated" or "denied")
        self.refused: Callable[[str, str], None] | None = None
        self.table = AclTable((), config.superusers)
        self.tokens: dict[str, TokenEntry] = {}  # the control plane's
        self._bootstrap: dict[str, TokenEntry] = {}
        if config.bootstrap_token:
            check_bootstrap_token(config)
            hashed = token_hash(config.bootstrap_token)
            self._bootstrap[hashed] = TokenEntry(config.superusers[0], token_id(hashed), 0)
        self._known: dict[str, TokenEntry] = dict(self._bootstrap)
        self.version: object = None  # what the table was built from
        self.loaded = False
        self._polled_at = 0.0
        self._lock = asyncio.Lock()

    @property
    def controller(self) -> MetadataStore | None:
        return self._controller()

    # -- checks ---------------------------------------------------------------------------------
    def identify(self, context: Any) -> Identity:
        self._sync_from_controller()
        try:
            if self.certificate is None:
                return identify(context, self.peer_check, self._known)
            return identify(context, self.peer_check, self._known, self.certificate)
        except PeerRefused as error:
            if self.peer_rejected is not None:
                self.peer_rejected("call", context.peer(), str(error))
            raise
        except UnknownToken:
            if not self.loaded:
                raise TableNotLoaded(self.config.node_id) from None
            raise

    def authorize(self, context: Any, operation: Operation | None, topic: str = "*") -> Identity:
        """The caller, if it may do `operation` on `topic` (None: anything an authenticated
        caller may, such as reading metadata); else `Unauthenticated` or `PermissionDenied`.
        With authorization off: everyone may, unexamined."""
        if not self.enabled:
            return Identity("", "", False)
        who = self.identify(context)
        if not who.authenticated:
            raise Unauthenticated(NO_CREDENTIALS)
        if operation is not None:
            decision = self.check(who.principal, operation, topic)
            if not decision.allowed:
                raise PermissionDenied(decision.reason)
        return who

    def check(self, principal: str, operation: Operation, topic: str) -> Decision:
        decision = self.table.check(principal, operation, topic)
        if not decision.allowed and not self.loaded:
            raise TableNotLoaded(self.config.node_id)
        return decision

    # -- the table ------------------------------------------------------------------------------
    def _sync_from_controller(self) -> None:
        """On a controller: take in a change of the control plane's table (cheap when none)."""
        controller = self.controller
        if controller is None or not controller.ready:
            return
        if controller.security_version == self.version and self.loaded:
            return
        version, acls, tokens = controller.security()
        self._install(version, [Acl.from_wire(acl) for acl in acls], tokens)

    def _install(self, version: object, acls: list[Acl], tokens: dict[str, list[Any]]) -> None:
        self.table = AclTable(acls, self.config.superusers)
        self.tokens = {
            hashed: TokenEntry(str(principal), str(tid), int(created))
            for hashed, (principal, tid, created) in tokens.items()
        }
        self._known = {**self.tokens, **self._bootstrap}
        self.version = version
        self.loaded = True

    async def run(self) -> None:
        """Keeps the table current on a node that is not a controller (while enforcing)."""
        while True:
            try:
                await self.refresh()
            except Exception:  # a poll that failed is retried at the next
                log.debug("ACL poll failed", exc_info=True)
            await asyncio.sleep(POLL_S)

    async def refresh(self, *, now: bool = False) -> None:
        async with self._lock:
            if self.controller is not None and self.controller.ready:
                self._sync_from_controller()
                return
            if not now and self.loaded and time.monotonic() - self._polled_at < POLL_S:
                return
            self._polled_at = time.monotonic()
            for controller_id in sorted(self.config.controllers):
                address = self.transport.address_of(controller_id)
                if not address or controller_id == self.config.node_id:
                    continue
                stub = flotilla_pb2_grpc.FlotillaStub(self.transport.channel(address))
                try:
                    acls = await stub.ListAcls(pb.ListAclsRequest(), timeout=2)
                    tokens = await stub.ListTokens(
                        pb.ListTokensRequest(), timeout=2, metadata=((TOKEN_HASHES_KEY, "1"),)
                    )
                except grpc.aio.AioRpcError:
                    continue
                bindings = [
                    Acl.from_wire(
                        {
                            "principal": a.principal,
                            "operation": a.operation,
                            "resource": a.resource,
                            "permission": a.permission,
                        }
                    )
                    for a in acls.acls
                ]
                table = {
                    t.token_id: [t.principal, token_id(t.token_id), t.created_ms]
                    for t in tokens.tokens
                }
                self._install((tuple(bindings), tuple(sorted(table))), bindings, table)
                return

    # -- changes --------------------------------------------------------------------------------
    async def change(
        self, change: dict[str, Any], forward: Callable[[Any], Awaitable[Any]]
    ) -> int | Any:
        """Makes a change on the control plane: here on a controller (its count), else by
        `forward(stub of a controller)` (its answer), then takes in the new table."""
        controller = self.controller
        if controller is not None:
            try:
                future = asyncio.wrap_future(controller.change_security(change))
                count = await asyncio.wait_for(future, 15)
            except (ControlPlaneError, TimeoutError) as error:
                raise ControlPlaneUnavailable(
                    f"the control plane could not make the change: {error or 'timed out'}"
                ) from None
            self._sync_from_controller()
            return count
        errors = []
        for controller_id in sorted(self.config.controllers):
            address = self.transport.address_of(controller_id)
            if not address:
                continue
            stub = flotilla_pb2_grpc.FlotillaStub(self.transport.channel(address))
            try:
                answer = await forward(stub)
            except grpc.aio.AioRpcError as error:
                answered = _ANSWERS.get(error.code())
                if answered is not None:
                    raise answered(error.details()) from None
                errors.append(f"{controller_id}: {error.details()}")
                continue
            await self.refresh(now=True)
            return answer
        raise ControlPlaneUnavailable(
            f"no controller reachable ({'; '.join(errors) or 'none known yet'})"
        )
