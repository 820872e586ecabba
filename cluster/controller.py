"""The control plane: topic metadata replicated with pysyncobj on the controller nodes.

Like Kafka's KRaft quorum, the control plane is apart from the data plane: it holds topic specs
(name, partitions, replication factor, retention, the initial replica assignment) and never
record data. Controllers run `MetadataStore` on their control-plane address (`--controllers
ID=HOST:PORT`); the other nodes read topic metadata from a controller over gRPC.

Security: pysyncobj unpickles what it receives, so the store refuses to start without the cluster
secret; with it, pysyncobj authenticates and encrypts every message (Fernet: an HMAC is checked
before anything is unpickled), so unauthenticated traffic is dropped unread.

Durability: pysyncobj's journal is replaced by `DurableJournal`, which fsyncs every append, the
term/vote record and the full dumps before pysyncobj sends the vote or acknowledgement they back,
and stops the process (exit 75) on a failed write or fsync.

Threading: pysyncobj runs its own thread. `create_topic`/`delete_topic`/`update_topic` return
`concurrent.futures.Future`s completed from that thread; the asyncio node wraps them with
`asyncio.wrap_future`. Reads (`topics()`) are local and may lag the leader by a heartbeat.
"""

from __future__ import annotations

import concurrent.futures
import copy
import errno
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjException, replicated
from pysyncobj.version import VERSION as pysyncobj_version

from cluster.authz import apply_security_change
from cluster.controller_journal import (
    DurableDumps,
    DurableJournal,
    durable_journal_installed,
    fsync_directory,
)
from cluster.errors import ClusterError
from cluster.ownership import AddressInUse
from cluster.topic_spec import CreateOutcome, TopicSpec, UpdateOutcome

__all__ = [
    "ControlPlaneError",
    "ControlPlaneView",
    "CreateOutcome",
    "MetadataStore",
    "TopicSpec",
    "UpdateOutcome",
]

T = TypeVar("T")
_TRANSIENT = {
    FAIL_REASON.MISSING_LEADER,
    FAIL_REASON.DISCARDED,
    FAIL_REASON.NOT_LEADER,
    FAIL_REASON.LEADER_CHANGED,
    FAIL_REASON.QUEUE_FULL,
}


class ControlPlaneError(ClusterError, RuntimeError):
    """The control plane could not carry out a change (no quorum, not started, ...)."""


@dataclass(frozen=True, slots=True)
class ControlPlaneView:
    """The control plane as one controller sees it (pysyncobj's view: it may lag a heartbeat)."""

    leader: str  # the leader's controller id; "": no leader known
    connected: tuple[str, ...]  # controllers with a live link to this one, itself included


def _quiet_bind_failure(record: logging.LogRecord) -> bool:
    """pysyncobj logs a failed bind with its traceback; `MetadataStore` raises `AddressInUse`
    for it instead, which says more."""
    return record.getMessage() != "failed to perform initialization"


logging.getLogger("pysyncobj.syncobj").addFilter(_quiet_bind_failure)


class _Replicated(SyncObj):  # type: ignore[misc]
    """The replicated state: plain dicts only, so pysyncobj's snapshots stay simple."""

    def __init__(
        self, self_address: str, peers: list[str], conf: SyncObjConf, dumps: DurableDumps
    ) -> None:
        # set before pysyncobj's thread starts (in SyncObj.__init__), which may load a dump
        self.topics: dict[str, dict[str, Any]] = {}
        self.version = 0
        # ACL bindings (wire dicts) and token hashes {sha256 hex: [principal, token id,
        # created ms]} (`cluster.authz.apply_security_change`), with their own version
        self.acls: list[dict[str, str]] = []
        self.tokens: dict[str, list[Any]] = {}
        self.security_version = 0
        dumps.bind(self._dump_state, self._load_state)
        super().__init__(self_address, peers, conf)

    def _dump_state(self) -> dict[str, Any]:
        return {
            "topics": self.topics,
            "version": self.version,
            "acls": self.acls,
            "tokens": self.tokens,
            "security_version": self.security_version,
        }

    def _load_state(self, state: dict[str, Any]) -> None:
        self.topics = dict(state["topics"])
        self.version = int(state["version"])
        # a dump written before ACLs has none
        self.acls = list(state.get("acls", []))
        self.tokens = dict(state.get("tokens", {}))
        self.security_version = int(state.get("security_version", 0))

    @replicated  # type: ignore[untyped-decorator]
    def create_topic(self, spec: dict[str, Any]) -> str:
        existing = self.topics.get(spec["name"])
        if existing is not None:
            same = TopicSpec.from_wire(existing).same_shape(TopicSpec.from_wire(spec))
            return CreateOutcome.EXISTS.value if same else CreateOutcome.CONFLICT.value
        self.topics[spec["name"]] = dict(spec)
        self.version += 1
        return CreateOutcome.CREATED.value

    @replicated  # type: ignore[untyped-decorator]
    def delete_topic(self, name: str) -> bool:
        if self.topics.pop(name, None) is None:
            return False
        self.version += 1
        return True

    # pysyncobj numbers replicated methods in name order and its journal stores the numbers: a
    # new method must sort after the existing ones, or a journal written before it would replay
    # as calls of the wrong methods (tests/cluster/test_cluster_controller.py pins the order).
    @replicated  # type: ignore[untyped-decorator]
    def update_topic(self, change: dict[str, Any]) -> str:
        """Changes a topic (`change`: name, and each optional: retention_bytes, retention_ms,
        max_delay_ms, partitions with the assignment of every partition up to it, of which only those of the
        partitions added are taken)."""
        existing = self.topics.get(change["name"])
        if existing is None:
            return UpdateOutcome.MISSING.value
        partitions = change.get("partitions")
        if partitions is not None and partitions < existing["partitions"]:
            return UpdateOutcome.FEWER.value
        for field in ("retention_bytes", "retention_ms", "max_delay_ms"):
            if change.get(field) is not None:
                existing[field] = int(change[field])
        if partitions is not None and partitions > existing["partitions"]:
            added = change["assignment"][existing["partitions"] : partitions]
            existing["assignment"] = list(existing["assignment"]) + [list(a) for a in added]
            existing["partitions"] = partitions
        self.version += 1
        return UpdateOutcome.UPDATED.value

    @replicated  # type: ignore[untyped-decorator]
    def write_security(self, change: dict[str, Any]) -> int:
        """An ACL or token change (`cluster.authz.apply_security_change`): the count it made."""
        count = apply_security_change(self.acls, self.tokens, change)
        if count > 0:
            self.security_version += 1
        return count


class MetadataStore:
    def __init__(
        self,
        self_id: str,
        controllers: Mapping[str, str],
        secret: str,
        data_dir: str,
        *,
        election_timeout_s: float = 0.4,
    ) -> None:
        if not secret:
            raise ControlPlaneError(
                "the control plane needs the cluster secret (FLOTILLA_CLUSTER_SECRET)"
            )
        if self_id not in controllers:
            raise ControlPlaneError(
                f"{self_id!r} is not among the controllers {sorted(controllers)}"
            )
        if not os.path.isdir(data_dir):
            os.makedirs(data_dir, exist_ok=True)
            fsync_directory(os.path.dirname(os.path.abspath(data_dir)))
        self._self_id = self_id
        self._controllers = dict(controllers)
        dump_path = os.path.join(data_dir, "controller.dump")
        dumps = DurableDumps()
        conf = SyncObjConf(
            password=secret,
            journalFile=os.path.join(data_dir, "controller.journal"),
            fullDumpFile=dump_path,
            serializer=dumps.write,
            deserializer=dumps.read,
            raftMinTimeout=election_timeout_s,
            raftMaxTimeout=election_timeout_s * 3,
            appendEntriesPeriod=election_timeout_s / 10,
            connectionTimeout=max(3.5, election_timeout_s * 4),
            commandsWaitLeader=True,
            # containers get new addresses on restart: do not cache name lookups for long
            dnsCacheTime=5.0,
            dnsFailCacheTime=1.0,
            dynamicMembershipChange=False,
            # its own address, not pysyncobj's default 0.0.0.0:<port>: controllers on 127.0.0.1,
            # .2 and .3 (or on one host's several addresses) may share a port
            bindAddress=controllers[self_id],
            # one attempt: a control-plane port another process holds is a refusal to start,
            # not a retry every second behind a node that seems to serve (cluster.ownership)
            maxBindRetries=1,
        )
        _check_bindable(controllers[self_id])
        peers = [address for node, address in sorted(controllers.items()) if node != self_id]
        # pysyncobj's own journal fsyncs nothing: ours makes each append, term/vote and dump
        # durable before pysyncobj acts on it (cluster/controller_journal.py)
        with durable_journal_installed(dump_path):
            self._sync = _Replicated(controllers[self_id], peers, conf, dumps)
        journal = getattr(self._sync, "_SyncObj__raftLog", None)
        if not isinstance(journal, DurableJournal):  # a pysyncobj that makes its journal otherwise
            self._sync.destroy()
            raise ControlPlaneError(
                f"pysyncobj {pysyncobj_version} keeps its journal in a "
                f"{type(journal).__name__}, not our DurableJournal: the control plane would not "
                "be durable; use the pysyncobj version this build was tested with (0.3.17)"
            )
        try:
            self._sync.waitBinded()
        except SyncObjException:
            self._sync.destroy()
            raise AddressInUse("control-plane", controllers[self_id]) from None

    # -- changes --------------------------------------------------------------------------------
    def create_topic(self, spec: TopicSpec) -> concurrent.futures.Future[CreateOutcome]:
        """Idempotent: a retry after a lost answer finds the same spec and says EXISTS."""
        return self._submit("create_topic", spec.to_wire(), CreateOutcome)

    def delete_topic(self, name: str) -> concurrent.futures.Future[bool]:
        """True if this call deleted it. After a transient failure the change may have been
        applied; a retry that then finds nothing also counts as deleted."""
        return self._submit("delete_topic", name, bool, retried_means=True)

    def update_topic(
        self,
        name: str,
        *,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        max_delay_ms: int | None = None,
        partitions: int | None = None,
        assignment: tuple[tuple[str, ...], ...] = (),
    ) -> concurrent.futures.Future[UpdateOutcome]:
        """Changes a topic (None: unchanged). `partitions`: more than it has (FEWER if fewer),
        with `assignment` naming the initial voters of every partition up to that count; only
        those of the partitions added are taken, so a concurrent change cannot move existing
        ones. Idempotent."""
        change = {
            "name": name,
            "retention_bytes": retention_bytes,
            "retention_ms": retention_ms,
            "max_delay_ms": max_delay_ms,
            "partitions": partitions,
            "assignment": [list(voters) for voters in assignment],
        }
        return self._submit("update_topic", change, UpdateOutcome)

    def change_security(self, change: dict[str, Any]) -> concurrent.futures.Future[int]:
        """Adds or removes an ACL binding, adds or revokes a token (`change`: the wire form of
        `cluster.authz.apply_security_change`); the count of bindings or tokens it changed.
        Idempotent, so a retry after a lost answer is harmless (it then counts 0)."""
        return self._submit("write_security", change, int)

    def _submit(
        self,
        method: str,
        argument: Any,
        convert: Callable[[Any], T],
        *,
        retried_means: Any = None,
        attempts: int = 20,
    ) -> concurrent.futures.Future[T]:
        """Calls a replicated method, retrying the failures a leader change causes."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        tries = [0]

        def attempt() -> None:
            tries[0] += 1
            getattr(self._sync, method)(argument, callback=done)

        def done(result: Any, error: Any) -> None:
            if error == FAIL_REASON.SUCCESS:
                if tries[0] > 1 and retried_means is not None and not result:
                    result = retried_means
                future.set_result(convert(result))
            elif error in _TRANSIENT and tries[0] < attempts:
                threading.Timer(0.1 * tries[0], attempt).start()
            else:
                future.set_exception(ControlPlaneError(_reason(error)))

        attempt()
        return future

    # -- reads -----------------------------------------------------------------------------------
    def topics(self) -> dict[str, TopicSpec]:
        snapshot = copy.deepcopy(self._sync.topics)
        return {name: TopicSpec.from_wire(spec) for name, spec in snapshot.items()}

    @property
    def version(self) -> int:
        return int(self._sync.version)

    @property
    def security_version(self) -> int:
        """Moves with every ACL or token change (`security`)."""
        return int(self._sync.security_version)

    def security(self) -> tuple[int, list[dict[str, str]], dict[str, list[Any]]]:
        """(its version, the ACL bindings, the token hashes): copies, read on the caller's
        thread while pysyncobj's may apply a change (a copy of a dict being changed can fail:
        retried)."""
        for _ in range(10):
            try:
                version = int(self._sync.security_version)
                return version, copy.deepcopy(self._sync.acls), copy.deepcopy(self._sync.tokens)
            except RuntimeError:  # "changed size during iteration"
                continue
        version = int(self._sync.security_version)
        return version, copy.deepcopy(self._sync.acls), copy.deepcopy(self._sync.tokens)

    @property
    def ready(self) -> bool:
        return bool(self._sync.isReady())

    @property
    def has_leader(self) -> bool:
        return self._sync._getLeader() is not None

    def view(self) -> ControlPlaneView:
        ids = {address: node_id for node_id, address in self._controllers.items()}
        leader = self._sync._getLeader()
        connected = [self._self_id] + [
            ids.get(node.address, node.address)
            for node in self._sync.otherNodes
            if self._sync.isNodeConnected(node)
        ]
        return ControlPlaneView(
            ids.get(leader.address, leader.address) if leader is not None else "",
            tuple(sorted(connected)),
        )

    @property
    def is_leader(self) -> bool:
        """Whether this controller leads the control plane (a metric's 0/1 gauge)."""
        return bool(self._sync._isLeader())

    def close(self) -> None:
        """Stops the control plane and waits for its thread: on return its port is closed and
        its journal no longer written (a store opened next on the same address and directory,
        or the data-dir lock's release, must not race it)."""
        self._sync.destroy_synchronous()


def _check_bindable(address: str) -> None:
    """Raises `AddressInUse` (or `ControlPlaneError` for an address that is not this machine's
    or does not resolve) unless `address` can be bound now: pysyncobj's own bind swallows the
    error, which would leave only "failed" to say."""
    host, _, port = address.rpartition(":")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ControlPlaneError(
            f"the control-plane address {address}: host {host!r} does not resolve "
            f"({error.strerror})"
        ) from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as pysyncobj binds it
        try:
            sock.bind(sockaddr)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise AddressInUse("control-plane", address) from None
            raise ControlPlaneError(
                f"the control-plane address {address} cannot be bound here ({error.strerror}): "
                "a controller binds the address --controllers gives for its own id, which must "
                "be one of this machine's"
            ) from None


def _reason(error: Any) -> str:
    names = {
        FAIL_REASON.QUEUE_FULL: "the control plane's queue is full",
        FAIL_REASON.MISSING_LEADER: "the control plane has no leader (is a quorum of "
        "controllers up?)",
        FAIL_REASON.DISCARDED: "the change was discarded by a new control-plane leader; retry",
        FAIL_REASON.NOT_LEADER: "this controller lost leadership; retry",
        FAIL_REASON.LEADER_CHANGED: "the control-plane leader changed; retry",
        FAIL_REASON.REQUEST_DENIED: "the control plane denied the request",
    }
    return names.get(error, f"control-plane failure {error}")
