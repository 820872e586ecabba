"""The security calls of the client service (AddAcl, ListAcls, RemoveAcl, CreateToken,
ListTokens, RevokeToken, WhoAmI) and `_allow`, the check at the top of every client call.

`_allow(context, operation, topic)` runs before a call reads or changes anything: with
authorization on it ends the call UNAUTHENTICATED (no or unknown credentials) or
PERMISSION_DENIED (the principal, the operation and the resource named: `cluster.authz`); off,
it returns at once. What each call needs is written at the call (DESIGN-27's table).

ACL and token changes are admin on "*"; a node that is not a controller authorizes the caller,
then forwards the same request to a controller (as its peer, `node:<id>`), which makes it in the
replicated control plane (`cluster.acl_state`). Tokens are made on the controller: the answer is
the only place a token appears; the cluster keeps its SHA-256.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc

from cluster.acl_state import TOKEN_HASHES_KEY, Authorizer, PermissionDenied, TableNotLoaded
from cluster.authz import Acl, Operation, check_principal, parse_acl
from cluster.errors import ClusterError, ControlPlaneUnavailable, Invalid
from cluster.identity import Identity, Unauthenticated, new_token, token_hash, token_id
from cluster.logs import event
from cluster.node_api import NodeApi
from cluster.statuses import abort
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.groups import INTERNAL_PREFIX, is_internal

__all__ = ["SecurityCalls"]

log = logging.getLogger("flotilla.acl")

_STATUS: tuple[tuple[type[ClusterError], grpc.StatusCode], ...] = (
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (Invalid, grpc.StatusCode.INVALID_ARGUMENT),
    (ControlPlaneUnavailable, grpc.StatusCode.UNAVAILABLE),
)
_TOKEN_ID = re.compile(r"^[0-9a-f]{6,64}$")

PRODUCE, CONSUME, ADMIN = Operation.PRODUCE, Operation.CONSUME, Operation.ADMIN


async def refuse(context: grpc.aio.ServicerContext, error: ClusterError) -> NoReturn:
    for kind, code in _STATUS:
        if isinstance(error, kind):
            await abort(context, code, str(error))
    await abort(context, grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}")


def _audit(name: str, who: Identity, context: grpc.aio.ServicerContext, **fields: Any) -> None:
    """One log line per change, on the node the client called (a controller making a change a
    node forwarded does not log it again): who asked, from where, and what changed."""
    if who.via != "peer":
        event(log, name, **fields, by=who.principal or "-", client=context.peer())


async def _not_forwarded(stub: flotilla_pb2_grpc.FlotillaStub) -> None:
    raise AssertionError("a change made on this controller is not forwarded")


def _binding(acl: Acl) -> pb.AclBinding:
    return pb.AclBinding(**acl.to_wire())


class SecurityCalls:
    """The security RPCs of `flotilla.v1.Flotilla` (proto/flotilla.proto states them)."""

    node: NodeApi

    @property
    def _authorizer(self) -> Authorizer:
        return self.node.authorizer

    async def _allow(
        self,
        context: grpc.aio.ServicerContext,
        operation: Operation | None = None,
        *topics: str,
    ) -> Identity:
        """The caller, if it may do `operation` on every one of `topics` (none: on "*"; no
        operation: anything an authenticated caller may); else the call ends refused."""
        authorizer = self._authorizer
        if not authorizer.enabled:
            return Identity("", "", False)
        try:
            who = authorizer.authorize(context, None)
            if operation in (PRODUCE, ADMIN) and who.via != "peer":
                # the cluster's own topics: a client's marker (`TIMER_FORWARD_KEY`,
                # `INTERNAL_TOPIC_KEY`) is no credential, whatever ACL it holds
                for topic in topics:
                    if is_internal(topic):
                        raise PermissionDenied(
                            f"principal {who.principal!r} may not "
                            f"{'produce to' if operation is PRODUCE else 'administer'} "
                            f"topic {topic!r}: it is the cluster's own (names starting with "
                            f"{INTERNAL_PREFIX!r}); only its nodes may"
                        )
            if operation is not None:
                for topic in topics or ("*",):
                    decision = authorizer.check(who.principal, operation, topic)
                    if not decision.allowed:
                        raise PermissionDenied(decision.reason)
        except ClusterError as error:
            outcome = (
                "denied" if isinstance(error, PermissionDenied)
                else "unauthenticated" if isinstance(error, Unauthenticated)
                else ""
            )  # fmt: skip
            if outcome and authorizer.refused is not None:
                authorizer.refused(operation.value if operation else "any", outcome)
            await refuse(context, error)
        return who

    async def _change(
        self,
        context: grpc.aio.ServicerContext,
        change: dict[str, Any],
        forward: Callable[[flotilla_pb2_grpc.FlotillaStub], Awaitable[Any]],
    ) -> Any:
        """Makes `change` here on a controller, else `forward`s the call to one."""
        try:
            return await self._authorizer.change(change, forward)
        except ClusterError as error:
            await refuse(context, error)

    # -- ACLs -----------------------------------------------------------------------------------
    async def AddAcl(
        self, request: pb.AclBinding, context: grpc.aio.ServicerContext
    ) -> pb.AclBinding:
        who = await self._allow(context, ADMIN)
        acl = await self._parsed(request, context)
        await self._change(
            context,
            {"op": "add_acl", "acl": acl.to_wire()},
            lambda stub: stub.AddAcl(request, timeout=15),
        )
        _audit("acl_added", who, context, **acl.to_wire())
        return _binding(acl)

    async def RemoveAcl(
        self, request: pb.AclBinding, context: grpc.aio.ServicerContext
    ) -> pb.RemoveAclResponse:
        who = await self._allow(context, ADMIN)
        acl = await self._parsed(request, context)
        answer = await self._change(
            context,
            {"op": "remove_acl", "acl": acl.to_wire()},
            lambda stub: stub.RemoveAcl(request, timeout=15),
        )
        removed = answer.removed if isinstance(answer, pb.RemoveAclResponse) else int(answer)
        _audit("acl_removed", who, context, removed=removed, **acl.to_wire())
        return pb.RemoveAclResponse(removed=removed)

    async def ListAcls(
        self, request: pb.ListAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAclsResponse:
        await self._allow(context, ADMIN)
        await self._loaded(context)
        acls = [
            _binding(acl)
            for acl in self._authorizer.table.acls
            if not request.principal or acl.principal == request.principal
        ]
        return pb.ListAclsResponse(acls=acls)

    async def _loaded(self, context: grpc.aio.ServicerContext) -> None:
        """Refreshes the table (at once where authorization is off: nothing polls it), or ends
        the call UNAVAILABLE if this node has none yet."""
        authorizer = self._authorizer
        await authorizer.refresh(now=not authorizer.enabled)
        if not authorizer.loaded:
            await refuse(context, TableNotLoaded(self.node.config.node_id))

    async def _parsed(self, request: pb.AclBinding, context: grpc.aio.ServicerContext) -> Acl:
        try:
            return parse_acl(
                request.principal, request.operation, request.resource, request.permission
            )
        except Invalid as error:
            await refuse(context, error)

    # -- tokens ---------------------------------------------------------------------------------
    async def CreateToken(
        self, request: pb.CreateTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTokenResponse:
        who = await self._allow(context, ADMIN)
        try:
            check_principal(request.principal, wildcard=False)
        except Invalid as error:
            await refuse(context, error)
        if self._authorizer.controller is None:  # a controller makes it
            answer = await self._change(
                context, {}, lambda stub: stub.CreateToken(request, timeout=15)
            )
            assert isinstance(answer, pb.CreateTokenResponse)
            _audit("token_created", who, context, principal=answer.principal, id=answer.token_id)
            return answer
        token = new_token()
        hashed = token_hash(token)
        change = {
            "op": "add_token",
            "hash": hashed,
            "principal": request.principal,
            "token_id": token_id(hashed),
            "created_ms": int(time.time() * 1000),
        }
        await self._change(context, change, _not_forwarded)
        _audit("token_created", who, context, principal=request.principal, id=token_id(hashed))
        return pb.CreateTokenResponse(
            principal=request.principal, token=token, token_id=token_id(hashed)
        )

    async def ListTokens(
        self, request: pb.ListTokensRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTokensResponse:
        await self._allow(context, ADMIN)
        await self._loaded(context)
        authorizer = self._authorizer
        hashes = False
        if any(key == TOKEN_HASHES_KEY for key, _ in context.invocation_metadata() or ()):
            try:  # full hashes go to the cluster's own nodes only
                hashes = authorizer.identify(context).via == "peer"
            except ClusterError:
                hashes = False
        return pb.ListTokensResponse(
            tokens=[
                pb.TokenInfo(
                    principal=entry.principal,
                    token_id=hashed if hashes else entry.token_id,
                    created_ms=entry.created_ms,
                )
                for hashed, entry in sorted(
                    authorizer.tokens.items(), key=lambda item: item[1].created_ms
                )
                if not request.principal or entry.principal == request.principal
            ]
        )

    async def RevokeToken(
        self, request: pb.RevokeTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeTokenResponse:
        who = await self._allow(context, ADMIN)
        if not _TOKEN_ID.match(request.token_id):
            await refuse(
                context,
                Invalid(
                    f"token_id {request.token_id[:70]!r} is invalid: use the 12 hex digits "
                    "ListTokens / flotilla token list shows"
                ),
            )
        answer = await self._change(
            context,
            {"op": "revoke_token", "token_id": request.token_id},
            lambda stub: stub.RevokeToken(request, timeout=15),
        )
        revoked = answer.revoked if isinstance(answer, pb.RevokeTokenResponse) else int(answer)
        _audit("token_revoked", who, context, id=request.token_id, revoked=revoked)
        return pb.RevokeTokenResponse(revoked=revoked)

    # -- who -----------------------------------------------------------------------------------
    async def WhoAmI(
        self, request: pb.WhoAmIRequest, context: grpc.aio.ServicerContext
    ) -> pb.WhoAmIResponse:
        authorizer = self._authorizer
        if not authorizer.loaded:  # where authorization is off, nothing polls the table
            await authorizer.refresh(now=True)
        try:
            who = authorizer.identify(context)
        except Unauthenticated:
            who = Identity("", "", False)
        except ClusterError as error:  # the table not loaded yet: UNAVAILABLE
            await refuse(context, error)
        principal = who.principal if who.authenticated else ""
        return pb.WhoAmIResponse(
            principal=principal,
            authenticated=who.authenticated,
            superuser=bool(principal) and authorizer.table.is_superuser(principal),
            via=who.via,
            authorization=authorizer.enabled,
        )
