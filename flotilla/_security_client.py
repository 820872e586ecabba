"""The security calls of both clients (`flotilla.Client` and `flotilla.aio.Client` take them
from these two classes): ACLs (`add_acl`, `list_acls`, `remove_acl`), tokens (`create_token`,
`list_tokens`, `revoke_token`) and `whoami`. Each is a plan of `flotilla._security_plans`, run
by the client's own driver (`_run`)."""

from __future__ import annotations

from typing import TypeVar

from flotilla._core import ClientCore, Plan
from flotilla._security_plans import SecurityCalls
from flotilla.types import AclBinding, Token, TokenInfo, WhoAmI

__all__ = ["AsyncSecurityAdmin", "SecurityAdmin"]

T = TypeVar("T")


class SecurityAdmin:
    """The sync client's security calls (a base of `flotilla.Client`). Changing or listing
    ACLs and tokens needs admin on "*" (or a superuser); `whoami` any caller."""

    _core: ClientCore

    def _run(self, plan: Plan[T]) -> T:  # the client's driver
        raise NotImplementedError

    def add_acl(
        self, principal: str, operation: str, resource: str, permission: str = "allow"
    ) -> AclBinding:
        """Lets (`permission="allow"`) or forbids ("deny") `principal` ("*": every
        authenticated one) `operation` ("produce", "consume", "admin" or "all") on `resource`
        (a topic, a prefix ending in "*" such as "orders.*", or "*"). Deny wins over allow.
        Adding a binding that exists changes nothing. The binding as stored."""
        return self._run(
            SecurityCalls(self._core).add_acl(principal, operation, resource, permission)
        )

    def list_acls(self, principal: str | None = None) -> list[AclBinding]:
        """Every ACL binding (of `principal` only, if given), sorted."""
        return self._run(SecurityCalls(self._core).list_acls(principal))

    def remove_acl(
        self, principal: str, operation: str, resource: str, permission: str = "allow"
    ) -> int:
        """Removes the binding equal to the one given; how many were removed (0: none was)."""
        return self._run(
            SecurityCalls(self._core).remove_acl(principal, operation, resource, permission)
        )

    def create_token(self, principal: str) -> Token:
        """Makes a bearer token for `principal`: `.token` is the secret, shown only here (the
        cluster keeps its hash); `.token_id` names it. Give it to the client as `token=` or
        $FLOTILLA_TOKEN."""
        return self._run(SecurityCalls(self._core).create_token(principal))

    def list_tokens(self, principal: str | None = None) -> list[TokenInfo]:
        """The tokens the cluster knows (of `principal` only, if given): ids, never secrets."""
        return self._run(SecurityCalls(self._core).list_tokens(principal))

    def revoke_token(self, token_id: str) -> int:
        """Revokes a token by its id (or by the token itself); how many were (0: none)."""
        return self._run(SecurityCalls(self._core).revoke_token(token_id))

    def whoami(self) -> WhoAmI:
        """Who the node asked takes this client for, and whether it enforces ACLs."""
        return self._run(SecurityCalls(self._core).whoami())


class AsyncSecurityAdmin:
    """The asyncio client's security calls (a base of `flotilla.aio.Client`), as
    `SecurityAdmin`'s."""

    _core: ClientCore

    async def _run(self, plan: Plan[T]) -> T:  # the client's driver
        raise NotImplementedError

    async def add_acl(
        self, principal: str, operation: str, resource: str, permission: str = "allow"
    ) -> AclBinding:
        """Lets or forbids `principal` `operation` on `resource`, as `flotilla.Client.add_acl`."""
        return await self._run(
            SecurityCalls(self._core).add_acl(principal, operation, resource, permission)
        )

    async def list_acls(self, principal: str | None = None) -> list[AclBinding]:
        """Every ACL binding (of `principal` only, if given), as `flotilla.Client.list_acls`."""
        return await self._run(SecurityCalls(self._core).list_acls(principal))

    async def remove_acl(
        self, principal: str, operation: str, resource: str, permission: str = "allow"
    ) -> int:
        """Removes the binding equal to the one given, as `flotilla.Client.remove_acl`."""
        return await self._run(
            SecurityCalls(self._core).remove_acl(principal, operation, resource, permission)
        )

    async def create_token(self, principal: str) -> Token:
        """Makes a bearer token for `principal`, as `flotilla.Client.create_token`."""
        return await self._run(SecurityCalls(self._core).create_token(principal))

    async def list_tokens(self, principal: str | None = None) -> list[TokenInfo]:
        """The tokens the cluster knows, as `flotilla.Client.list_tokens`."""
        return await self._run(SecurityCalls(self._core).list_tokens(principal))

    async def revoke_token(self, token_id: str) -> int:
        """Revokes a token by its id (or the token), as `flotilla.Client.revoke_token`."""
        return await self._run(SecurityCalls(self._core).revoke_token(token_id))

    async def whoami(self) -> WhoAmI:
        """Who the node asked takes this client for, as `flotilla.Client.whoami`."""
        return await self._run(SecurityCalls(self._core).whoami())
