"""The security calls as plans (no I/O; a driver runs them, as `flotilla._core`'s): ACLs,
tokens and who the caller is.

Each goes to any node (`ClientCore.any_node`: the next one while a node is unreachable); a node
forwards a change to the control plane's leader, like a topic change, so an acknowledged change
is replicated. Arguments are checked here first (InvalidArgument naming the bad one, nothing
sent); the node checks them again and decides who may make the call (changing ACLs or tokens
is admin on "*"). An AuthenticationError or AuthorizationError is never retried.

`create_token` is not idempotent: if its answer is lost (a timeout), the token made may exist
without the caller knowing it; `list_tokens` shows it and `revoke_token` removes it.
"""

from __future__ import annotations

import hashlib
import re

from flotilla._core import ClientCore, Plan
from flotilla.errors import InvalidArgument
from flotilla.types import AclBinding, Token, TokenInfo, WhoAmI
from proto import flotilla_pb2 as pb

__all__ = [
    "OPERATIONS",
    "PERMISSIONS",
    "SecurityCalls",
    "check_binding",
    "check_principal",
    "token_id_of",
]

OPERATIONS = ("produce", "consume", "admin", "all")
PERMISSIONS = ("allow", "deny")
TOKEN_PREFIX = "flt_"
TOKEN_ID_DIGITS = 12  # a token's id: the first 12 hex digits of its SHA-256
MAX_RESOURCE_CHARS = 249  # a topic name's longest
_PRINCIPAL = re.compile(r"[A-Za-z0-9._-]{1,64}")
_TOKEN_ID = re.compile(f"[0-9a-f]{{{TOKEN_ID_DIGITS}}}")
_CALL_S = 20.0  # a change waits for the control plane to commit it


def check_principal(principal: str, *, wildcard: bool = True) -> str:
    """A principal's name: [A-Za-z0-9._-]{1,64}, or "*" (every authenticated principal) where
    `wildcard`."""
    if wildcard and principal == "*":
        return principal
    if not isinstance(principal, str) or not _PRINCIPAL.fullmatch(principal):
        also = ', or "*" for every authenticated principal' if wildcard else ""
        raise InvalidArgument(
            f"principal {principal!r} is not valid: give a client name of 1 to 64 letters, "
            f"digits, '.', '_' or '-'{also}"
        )
    return principal


def _check_resource(resource: str) -> str:
    if not isinstance(resource, str) or not resource:
        raise InvalidArgument(
            f"resource {resource!r} is not valid: give a topic name, a prefix ending in '*' "
            "(e.g. 'orders.*') or '*' for every topic"
        )
    if "*" in resource[:-1] or len(resource) > MAX_RESOURCE_CHARS or resource.strip() != resource:
        raise InvalidArgument(
            f"resource {resource!r} is not valid: a topic name (at most {MAX_RESOURCE_CHARS} "
            "characters, no spaces around it) or a prefix with one '*' at its end "
            "(e.g. 'orders.*'; '*' is every topic)"
        )
    return resource


def check_binding(
    principal: str, operation: str, resource: str, permission: str = "allow"
) -> AclBinding:
    """The binding, checked (operation and permission case-insensitive, stored lower case)."""
    op = operation.lower() if isinstance(operation, str) else operation
    if op not in OPERATIONS:
        raise InvalidArgument(f"operation {operation!r} is not valid: use one of {OPERATIONS}")
    allow = permission.lower() if isinstance(permission, str) else permission
    if allow not in PERMISSIONS:
        raise InvalidArgument(f"permission {permission!r} is not valid: use one of {PERMISSIONS}")
    return AclBinding(check_principal(principal), op, _check_resource(resource), allow)


def token_id_of(token_or_id: str) -> str:
    """A token's id: as given (12 hex digits), or computed from the token itself ("flt_...":
    the first 12 hex digits of its SHA-256, as the cluster names it)."""
    text = token_or_id.strip() if isinstance(token_or_id, str) else ""
    if text.startswith(TOKEN_PREFIX):
        return hashlib.sha256(text.encode()).hexdigest()[:TOKEN_ID_DIGITS]
    if not _TOKEN_ID.fullmatch(text.lower()):
        raise InvalidArgument(
            f"token id {token_or_id!r} is not valid: give the {TOKEN_ID_DIGITS} hex digits "
            "`flotilla token list` shows (or the token itself, flt_...)"
        )
    return text.lower()


def _binding(message: pb.AclBinding) -> AclBinding:
    return AclBinding(message.principal, message.operation, message.resource, message.permission)


def _request(binding: AclBinding) -> pb.AclBinding:
    return pb.AclBinding(
        principal=binding.principal,
        operation=binding.operation,
        resource=binding.resource,
        permission=binding.permission,
    )


class SecurityCalls:
    """The security calls over a client's core, as plans."""

    def __init__(self, core: ClientCore) -> None:
        self.core = core

    def add_acl(
        self, principal: str, operation: str, resource: str, permission: str
    ) -> Plan[AclBinding]:
        binding = check_binding(principal, operation, resource, permission)
        response = yield from self.core.any_node("AddAcl", _request(binding), _CALL_S)
        return _binding(response)

    def list_acls(self, principal: str | None) -> Plan[list[AclBinding]]:
        wanted = "" if principal is None else check_principal(principal)
        response = yield from self.core.any_node(
            "ListAcls", pb.ListAclsRequest(principal=wanted), 5
        )
        found = [_binding(acl) for acl in response.acls]
        return sorted(found, key=lambda b: (b.principal, b.resource, b.operation, b.permission))

    def remove_acl(
        self, principal: str, operation: str, resource: str, permission: str
    ) -> Plan[int]:
        binding = check_binding(principal, operation, resource, permission)
        response = yield from self.core.any_node("RemoveAcl", _request(binding), _CALL_S)
        return int(response.removed)

    def create_token(self, principal: str) -> Plan[Token]:
        request = pb.CreateTokenRequest(principal=check_principal(principal, wildcard=False))
        response = yield from self.core.any_node("CreateToken", request, _CALL_S)
        return Token(response.principal, response.token, response.token_id)

    def list_tokens(self, principal: str | None) -> Plan[list[TokenInfo]]:
        wanted = "" if principal is None else check_principal(principal, wildcard=False)
        response = yield from self.core.any_node(
            "ListTokens", pb.ListTokensRequest(principal=wanted), 5
        )
        found = [TokenInfo(t.principal, t.token_id, int(t.created_ms)) for t in response.tokens]
        return sorted(found, key=lambda t: (t.principal, t.created_ms, t.token_id))

    def revoke_token(self, token_id: str) -> Plan[int]:
        request = pb.RevokeTokenRequest(token_id=token_id_of(token_id))
        response = yield from self.core.any_node("RevokeToken", request, _CALL_S)
        return int(response.revoked)

    def whoami(self) -> Plan[WhoAmI]:
        response = yield from self.core.any_node("WhoAmI", pb.WhoAmIRequest(), 5)
        return WhoAmI(
            response.principal,
            response.authenticated,
            response.superuser,
            response.via,
            response.authorization,
        )
