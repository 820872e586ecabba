"""Node configuration: one dataclass with documented defaults and units.

Sources, later ones winning: the defaults below < a TOML file (`--config FILE`, keys named as the
fields) < environment variables `FLOTILLA_<FIELD>` (upper case) < command-line flags. Every value
is validated on load; an error names the field, the bad value and what is valid.

The cluster secret (`cluster_secret`, usually from `FLOTILLA_CLUSTER_SECRET`) authenticates and
encrypts the control plane: pysyncobj unpickles what it receives, so a controller refuses to start
without one.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from cluster.errors import ClusterError
from cluster.validation import MAX_PARTITIONS, check_member_id
from storage import FsyncPolicy, InvalidArgument

__all__ = ["ConfigError", "NodeConfig", "parse_address", "parse_controllers"]

AUTHORIZATION_MODES = ("auto", "on", "off")
PRINCIPAL = re.compile(r"[A-Za-z0-9._-]{1,64}")  # a client principal's name


class ConfigError(ClusterError, ValueError):
    """A configuration value is invalid; the message names the field and what is valid."""


def parse_address(value: str, name: str = "address") -> tuple[str, int]:
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"{name}={value!r} is not HOST:PORT with a port in 1..65535")
    return host, int(port_text)


def parse_controllers(value: str) -> dict[str, str]:
    """`ID=HOST:PORT,...` -> {id: host:port} (each the controller's control-plane address)."""
    controllers: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        node_id, sep, address = item.partition("=")
        if not sep or not node_id:
            raise ConfigError(f"controllers entry {item!r} is not ID=HOST:PORT")
        parse_address(address, f"controllers[{node_id}]")
        controllers[node_id] = address
    return controllers


@dataclass(frozen=True, slots=True)
class NodeConfig:
    # identity and addresses
    node_id: str = ""  # required: unique member id, [A-Za-z0-9._-]{1,64}
    listen: str = "127.0.0.1:7001"  # HOST:PORT of the gRPC server (client, Raft and SWIM)
    advertise: str = ""  # HOST:PORT others dial; default: `listen`
    data_dir: str = ""  # required: where partition logs and Raft state live
    join: tuple[str, ...] = ()  # seed HOST:PORTs; none: this node bootstraps the cluster
    controllers: Mapping[str, str] = field(default_factory=dict)  # id -> control-plane HOST:PORT
    weight: float = 1.0  # placement weight (relative capacity), > 0
    rack: str = ""  # failure domain for rack-aware placement
    dial_map: str = ""  # JSON file {member id: HOST:PORT to dial}, re-read when it changes
    # HOST:PORT of the raw TCP listener for peers' Raft frames (cluster/raft_link.py), a second
    # port beside `listen`; empty: none, peers send this node Raft over the gRPC port as before
    raft_listen: str = ""
    # HOST:PORT peers dial for Raft frames, advertised in gossip; default: `raft_listen`, or
    # when that binds every interface (0.0.0.0, ::), the host of `advertise` with its port
    raft_advertise: str = ""
    metrics: str = ""  # HOST:PORT of the Prometheus text endpoint; empty: off
    # serve metrics on a non-loopback host (plain HTTP, read-only, no authentication: what a
    # Prometheus scrape expects); refused otherwise, unless `insecure`
    metrics_public: bool = False
    cluster_secret: str = ""  # control-plane password (env FLOTILLA_CLUSTER_SECRET)
    # the secret before a rotation, still accepted from peers (their gossip and calls) until
    # every node has the new one; never used to sign (security: cluster/peer_auth.py)
    cluster_secret_previous: str = ""
    # PEM file of the cluster CA, which every peer and client certificate chains to. TLS
    # (cluster/tls.py): tls_ca, tls_cert and tls_key all or none; with them every connection
    # to and from this node is TLS, the files re-read when they change or on SIGHUP
    tls_ca: str = ""
    tls_cert: str = ""  # PEM file: this node's certificate (chain); `flotilla certs issue NODE`
    tls_key: str = ""  # PEM file: this node's private key (unencrypted; mode 0600)
    # with TLS: every connection must present a certificate the CA signed (mutual TLS): a node
    # certificate for a peer, a client certificate for a client. False: clients connect with
    # TLS alone and prove themselves with a token; peers with the cluster secret only
    tls_client_auth: bool = True
    # listen on a non-loopback address without TLS (refused otherwise; warned at every start)
    insecure: bool = False
    # ACL enforcement: "auto" (on with TLS, off without), "on", "off". Off: every caller may do
    # everything (today's behaviour on loopback)
    authorization: str = "auto"
    # principals allowed everything, whatever the ACLs say (Kafka's super.users)
    superusers: tuple[str, ...] = ("admin",)
    # a bearer token that authenticates as superusers[0] (env FLOTILLA_BOOTSTRAP_TOKEN): how the
    # first ACLs and tokens are made where there are no client certificates; kept hashed in memory
    bootstrap_token: str = ""
    # Raft
    tick_ms: int = 50  # one Raft tick
    election_ticks: int = 10  # election timeout = election_ticks * tick_ms (randomized up to 2x)
    heartbeat_ticks: int = 2  # leader heartbeat interval in ticks
    # SWIM
    swim_tick_ms: int = 100  # one SWIM tick; probe interval etc. are in the membership config
    # storage and limits
    # Only "always" (the default, kept so existing config files load): every replicated write
    # is fsynced, by the MultiRaft round's group commit, before the node acknowledges it or
    # answers for it (Raft's persist-before-send). "never" and "interval:<ms>" (which the
    # storage library offers for its own use) are refused on load: a follower that acknowledges
    # an entry a power cut then takes from it can elect, with one slow peer, a leader lacking
    # a committed entry, so a single failure would lose acknowledged data; and the group commit
    # already makes one fsync per dirty file per round serve every group, which leaves little
    # for skipping it to win. The option had no effect on replication writes before (they were
    # always fsynced): it is refused rather than ignored.
    fsync: str = "always"
    segment_bytes: int = 64 * 1024 * 1024
    max_batch_bytes: int = 4 * 1024 * 1024  # largest accepted produce batch
    max_message_bytes: int = 16 * 1024 * 1024  # gRPC message limit, both directions
    max_open_files: int = 4096  # bound on open segment files in this process
    # produce admission (cluster.ingress): calls admitted at once, and their bytes, each call
    # counting as max_message_bytes until its message has arrived; beyond: RESOURCE_EXHAUSTED
    max_inflight_produce: int = 1024
    max_inflight_request_bytes: int = 256 * 1024 * 1024
    # HTTP/2 streams one client connection may have open at once (more wait in the client)
    max_streams_per_connection: int = 256
    # the longest produce `timeout_ms` a client may ask for; above it: INVALID_ARGUMENT
    max_produce_timeout_ms: int = 120_000
    # how often topics' retention (retention_bytes, retention_ms) is applied to local logs
    retention_check_s: float = 60.0
    # a timer log's sealed segment older than this goes, its pending timers rolled forward
    # first (delayed delivery); bounds the timer log's disk to about this long of delayed
    # produce, plus the pending timers
    timer_log_retention_ms: int = 3_600_000
    # behaviour
    produce_timeout_ms: int = 10_000  # default wait for commit of an acks=all produce
    # an idempotent producer is forgotten by a partition this long after its latest batch,
    # measured on the entries' (leader) timestamps; its next batch then starts a new producer id
    producer_expiration_ms: int = 24 * 3600 * 1000
    replace_after_s: float = 30.0  # a dead member's replicas are replaced after this long
    # a member that left gracefully (SIGTERM: a restart, as a Kafka or Redpanda broker's
    # controlled shutdown is) has its replicas replaced only after this long, so that a rolling
    # restart moves nothing however long a node of many partitions takes to stop and start
    replace_left_after_s: float = 300.0
    # a partition's preferred leader takes it back once alive this long, caught up, and none of
    # its replicas asked for a vote of its own accord for this long (Kafka's auto leader
    # rebalance); 0: never
    leader_balance_after_s: float = 10.0
    default_replication_factor: int = 3
    # partitions of `__groups`, the internal topic holding consumer groups' members and committed
    # offsets (each partition's leader coordinates the groups hashed to it). Read when a node
    # creates the topic, on the cluster's first group request; a topic that exists keeps its count.
    group_partitions: int = 8

    @property
    def advertised(self) -> str:
        return self.advertise or self.listen

    @property
    def raft_advertised(self) -> str:
        """Where peers send Raft frames over TCP ("": over the gRPC port)."""
        if not self.raft_listen or self.raft_advertise:
            return self.raft_advertise
        host, _, port = self.raft_listen.rpartition(":")
        if host in ("0.0.0.0", "::", "[::]"):
            return f"{self.advertised.rpartition(':')[0]}:{port}"
        return self.raft_listen

    @property
    def is_controller(self) -> bool:
        return self.node_id in self.controllers

    @property
    def election_timeout_ms(self) -> int:
        return self.tick_ms * self.election_ticks

    def validate(self) -> NodeConfig:
        if not self.node_id:
            raise ConfigError("node_id is required (--id)")
        check_member_id(self.node_id, ConfigError)
        if not self.data_dir:
            raise ConfigError("data_dir is required (--data-dir)")
        parse_address(self.listen, "listen")
        if self.advertise:
            parse_address(self.advertise, "advertise")
        for seed in self.join:
            parse_address(seed, "join")
        if self.raft_listen:
            parse_address(self.raft_listen, "raft_listen")
        if self.raft_advertise:
            if not self.raft_listen:
                raise ConfigError(
                    f"raft_advertise={self.raft_advertise!r} needs raft_listen: give the address "
                    "the raw Raft listener binds, or neither"
                )
            parse_address(self.raft_advertise, "raft_advertise")
        if self.metrics:
            parse_address(self.metrics, "metrics")
        if not self.weight > 0:
            raise ConfigError(f"weight={self.weight} must be > 0")
        positive = (
            "tick_ms", "election_ticks", "heartbeat_ticks", "swim_tick_ms", "segment_bytes",
            "max_batch_bytes", "max_message_bytes", "max_open_files", "produce_timeout_ms",
            "producer_expiration_ms", "default_replication_factor", "max_inflight_produce",
            "max_inflight_request_bytes", "max_streams_per_connection", "max_produce_timeout_ms",
            "group_partitions",
        )  # fmt: skip
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be > 0")
        if self.group_partitions > MAX_PARTITIONS:
            raise ConfigError(
                f"group_partitions={self.group_partitions} is invalid: use 1..{MAX_PARTITIONS}"
            )
        if self.heartbeat_ticks >= self.election_ticks:
            raise ConfigError(
                f"heartbeat_ticks={self.heartbeat_ticks} must be below "
                f"election_ticks={self.election_ticks}"
            )
        if self.max_batch_bytes + 4096 > self.max_message_bytes:
            raise ConfigError(
                f"max_batch_bytes={self.max_batch_bytes} must leave room within "
                f"max_message_bytes={self.max_message_bytes}"
            )
        if self.max_inflight_request_bytes < self.max_message_bytes:
            raise ConfigError(
                f"max_inflight_request_bytes={self.max_inflight_request_bytes} must be at least "
                f"max_message_bytes={self.max_message_bytes} (a call counts as that until it "
                "has arrived)"
            )
        if self.produce_timeout_ms > self.max_produce_timeout_ms:
            raise ConfigError(
                f"produce_timeout_ms={self.produce_timeout_ms} must be at most "
                f"max_produce_timeout_ms={self.max_produce_timeout_ms}"
            )
        if not self.retention_check_s > 0:
            raise ConfigError(f"retention_check_s={self.retention_check_s} must be > 0")
        if self.timer_log_retention_ms < 1000:
            raise ConfigError(
                f"timer_log_retention_ms={self.timer_log_retention_ms} must be >= 1000"
            )
        if self.replace_after_s < 0:
            raise ConfigError(f"replace_after_s={self.replace_after_s} must be >= 0")
        if self.replace_left_after_s < 0:
            raise ConfigError(f"replace_left_after_s={self.replace_left_after_s} must be >= 0")
        if self.leader_balance_after_s < 0:
            raise ConfigError(
                f"leader_balance_after_s={self.leader_balance_after_s} must be >= 0 (0: never)"
            )
        try:
            policy = FsyncPolicy.parse(self.fsync)
        except InvalidArgument as error:
            raise ConfigError(str(error)) from None
        if policy != FsyncPolicy():
            raise ConfigError(
                f"fsync={self.fsync!r} is not supported on a node; valid: 'always' (replicated "
                "writes are fsynced before they are acknowledged: see NodeConfig.fsync)"
            )
        if self.is_controller and not self.cluster_secret:
            raise ConfigError(
                "cluster_secret is required on a controller: set FLOTILLA_CLUSTER_SECRET "
                "(the control plane must never accept unauthenticated traffic)"
            )
        self._validate_security()
        return self

    def _validate_security(self) -> None:
        """Every node of a cluster has the secret (it signs Raft, SWIM and forwarded calls: a
        node without it would be refused by every peer); TLS files are all given or none, and
        readable; a non-loopback address needs TLS or `insecure`; metrics stay on loopback
        unless `metrics_public` (or `insecure`). A lone node (no controllers, no join) gets
        its secret from `cluster.startup.standalone`."""
        if (self.controllers or self.join) and not self.cluster_secret:
            raise ConfigError(
                f"cluster_secret is required on node {self.node_id!r}: set "
                "FLOTILLA_CLUSTER_SECRET, the same on every node (peers refuse Raft, SWIM and "
                "forwarded calls not signed with it)"
            )
        tls = {"tls_ca": self.tls_ca, "tls_cert": self.tls_cert, "tls_key": self.tls_key}
        given = sorted(name for name, path in tls.items() if path)
        if given and len(given) != len(tls):
            missing = sorted(set(tls) - set(given))
            raise ConfigError(
                f"{', '.join(given)} given without {', '.join(missing)}: give all three TLS "
                "files (flotilla certs init / issue NODE) or none"
            )
        for name in given:
            if not os.access(tls[name], os.R_OK) or not os.path.isfile(tls[name]):
                raise ConfigError(f"{name}={tls[name]!r} is not a readable file")
        if self.authorization not in AUTHORIZATION_MODES:
            raise ConfigError(
                f"authorization={self.authorization!r} is invalid; valid: "
                f"{', '.join(AUTHORIZATION_MODES)}"
            )
        for name in self.superusers:
            if not PRINCIPAL.fullmatch(name):
                raise ConfigError(
                    f"superusers entry {name!r} is invalid: use 1 to 64 characters from "
                    "[A-Za-z0-9._-]"
                )
        if not given and not self.insecure:
            addresses = [("listen", self.listen), ("advertise", self.advertised)]
            if self.raft_listen:
                addresses += [("raft_listen", self.raft_listen)]
                addresses += [("raft_advertise", self.raft_advertised)]
            for name, address in addresses:
                host = parse_address(address, name)[0]
                if not is_loopback(host):
                    raise ConfigError(
                        f"node {self.node_id!r} {name}s on {address} without TLS: give tls_ca, "
                        "tls_cert, tls_key (flotilla certs init / issue) or --insecure"
                    )
        if self.metrics and not (self.metrics_public or self.insecure):
            host = parse_address(self.metrics, "metrics")[0]
            if not is_loopback(host):
                raise ConfigError(
                    f"metrics={self.metrics!r} is not a loopback address: the endpoint is "
                    "plain HTTP without authentication; pass --metrics-public "
                    "(metrics_public = true) to serve it there, or bind it to 127.0.0.1"
                )

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca)

    # -- loading -------------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        *,
        file: str | None = None,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> NodeConfig:
        values: dict[str, Any] = {}
        if file:
            try:
                with open(file, "rb") as handle:
                    values.update(tomllib.load(handle))
            except OSError as error:
                raise ConfigError(f"config file {file!r} cannot be read: {error}") from None
            except tomllib.TOMLDecodeError as error:
                raise ConfigError(f"config file {file!r} is not valid TOML: {error}") from None
        environ = os.environ if environ is None else environ
        known = {f.name: f for f in fields(cls)}
        for name in known:
            text = environ.get(f"FLOTILLA_{name.upper()}")
            if text is not None:
                values[name] = text
        values.update({k: v for k, v in (overrides or {}).items() if v is not None})
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown setting(s) {unknown}; valid: {sorted(known)}")
        return replace(cls(), **{k: _coerce(k, v, cls) for k, v in values.items()}).validate()


def _coerce(name: str, value: Any, cls: type[NodeConfig]) -> Any:
    default = getattr(cls(), name)
    try:
        if name == "controllers":
            return parse_controllers(value) if isinstance(value, str) else dict(value)
        if name in ("join", "superusers"):
            if isinstance(value, str):
                return tuple(filter(None, (part.strip() for part in value.split(","))))
            return tuple(value)
        if isinstance(default, bool):
            return value if isinstance(value, bool) else str(value).lower() in {"1", "true", "yes"}
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        return str(value)
    except (TypeError, ValueError) as error:
        if isinstance(error, ConfigError):
            raise
        kind = type(default).__name__
        raise ConfigError(f"{name}={value!r} is not a valid {kind}") from None


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
