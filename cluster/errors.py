"""The errors of the cluster layer's API, rooted in one class.

`ClusterError` is the root: an error the node means to report to its caller, whose message names
the bad value and what is valid. The gRPC service maps each topic-admin subclass to one status
(`cluster.statuses`); anything else that escapes a topic change is a bug, reported as INTERNAL
and logged, never as one of these (a stray `KeyError` from a bug must not read "topic not
found").

    ClusterError
    ├── Invalid               (also a ValueError)  INVALID_ARGUMENT   bad input, nothing changed
    ├── TopicNotFound                              NOT_FOUND
    ├── TopicExists                                ALREADY_EXISTS     another spec under that name
    ├── ControlPlaneUnavailable                    UNAVAILABLE        no controller decided it
    │   defined where they are raised (each keeps its older builtin base, so callers that catch
    │   that still do):
    ├── ConfigError           (ValueError)   cluster.config       a configuration value
    ├── LogConfigError        (ValueError)   cluster.logs         a logging setting
    ├── StartRefused          (OSError)      cluster.ownership    DataDirLocked, AddressInUse
    ├── ControlPlaneError     (RuntimeError) cluster.controller   the control plane refused
    ├── JournalCorrupt        (RuntimeError) cluster.controller_journal
    ├── FrameError            (ValueError)   cluster.frames       a malformed peer frame
    ├── OutOfOrderSequence                   cluster.idempotence  UnknownProducer
    └── NotCommitted                         cluster.replica      a produce's outcome

Not under the root: `cluster.failstop.NodeFailStopped`, the process exiting on a storage
failure, which no handler of API errors may catch.
"""

from __future__ import annotations

__all__ = [
    "ClusterError",
    "ControlPlaneUnavailable",
    "Invalid",
    "TopicExists",
    "TopicNotFound",
]


class ClusterError(Exception):
    """The root of the cluster layer's API errors."""


class Invalid(ClusterError, ValueError):
    """Bad input from a client or peer; nothing was changed (`cluster.validation` checks it)."""


class TopicNotFound(ClusterError):
    """The topic named does not exist."""


class TopicExists(ClusterError):
    """A topic of that name exists with another spec (a create of the same spec is idempotent)."""


class ControlPlaneUnavailable(ClusterError):
    """No controller decided the change (none reachable, or the control plane timed out or
    refused); the change may or may not have been made."""
