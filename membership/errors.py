"""The errors of the membership package: one hierarchy rooted in `MembershipError`.

Every message names the bad value and what would have been valid. A call that raises one of these
has changed nothing in the node's state.
"""

from __future__ import annotations

__all__ = ["CodecError", "ConfigError", "InvalidMember", "MembershipError", "NotRunning"]


class MembershipError(Exception):
    """Base class of every error raised by `membership`."""


class ConfigError(MembershipError, ValueError):
    """A `SwimConfig` field is outside its valid range (the message names field and range)."""


class InvalidMember(MembershipError, ValueError):
    """Member metadata is malformed (empty id or address, weight not positive and finite, ...)."""


class CodecError(MembershipError, ValueError):
    """Bytes that are not a well-formed membership message; nothing was delivered to the core."""


class NotRunning(MembershipError, RuntimeError):
    """An operation that needs a running member was called after `leave()`."""
