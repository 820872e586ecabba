"""Peers prove they belong: the cluster secret signs every node-to-node call and every SWIM packet.

Calls. Every call a node makes on a peer channel (`cluster.transport`: Raft streams, SWIM, and
the client-API calls it makes for itself: forwards, copies, source reads) carries metadata
`flotilla-peer` = "<node id>.<epoch ms>.<hex mac>", the mac HMAC-SHA256 over
"flotilla-peer|<node id>|<epoch ms>". The receiver accepts it when the mac matches the current
or the previous secret's key (rotation: every node is given the new secret with the old one as
`cluster_secret_previous`, then the old one is dropped) and the time is within `window_ms` of
its own clock. The method is not covered (a servicer cannot see its method); replay within the
window is what TLS stops (an eavesdropper sees nothing; without TLS, a cluster is on loopback or
`insecure`). With mutual TLS the receiver also requires the caller's certificate to be the node
certificate of the same id (`cluster.tls.caller_certificate`).

SWIM packets additionally MAC their whole body (sender, address, time, payload): a packet is a
unary call that could be relayed, and a forged body would declare members dead.

Keys: HMAC-SHA256(secret, "flotilla peer v1") (an HKDF-Extract with a fixed label), so the
secret itself never keys a MAC and the control plane's use of it stays separate. Compares are
constant-time (`hmac.compare_digest`). Cost: one HMAC per signed call (the signature is reused
for a second, `sign_call`) and one or two per verified one; Raft verifies once per stream.

Rejections (`reject`): counted in `flotilla_peer_auth_rejected_total{kind}` and logged once per
source address (a port scan or a misconfigured node must not flood the log).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import struct
import time
from collections.abc import Callable

import grpc

from cluster.errors import ClusterError
from cluster.logs import event
from cluster.tls import CertIdentity, caller_certificate
from proto import peer_pb2

__all__ = ["PEER_KEY", "PeerAuth", "PeerAuthError", "source_host"]

log = logging.getLogger("flotilla.peer_auth")

PEER_KEY = "flotilla-peer"
_LABEL = b"flotilla peer v1"
_SWIM_LABEL = b"flotilla-swim"
KINDS = ("raft", "swim", "call")
# "<node id>.<epoch ms>.<hex mac>" (node ids: cluster.validation.MEMBER_ID)
_CALL_VALUE = re.compile(r"([A-Za-z0-9._-]{1,64})\.([0-9]{1,15})\.([0-9a-f]{64})")
MAX_LOGGED_SOURCES = 10_000  # remembered sources; beyond, the memory starts over


class PeerAuthError(ClusterError):
    """A peer's proof was missing or wrong; the message says why (never the expected mac)."""


def _key(secret: str) -> bytes:
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).digest()


def source_host(peer: str) -> str:
    """gRPC's `context.peer()` ("ipv4:10.0.0.5:41234", "ipv6:[::1]:5000") without the port:
    a source address, so that one misbehaving host logs once, whatever ports it uses."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        host, _, _port = rest.rpartition(":")
        return host or rest
    return peer


class PeerAuth:
    def __init__(
        self,
        node_id: str,
        secret: str,
        previous: str = "",
        window_ms: int = 120_000,
        clock: Callable[[], float] = time.time,
        on_rejected: Callable[[str], None] = lambda kind: None,
        require_node_certificate: bool = False,
    ) -> None:
        """`secret`: the cluster secret (signs and verifies); `previous`: the one before a
        rotation (verifies only). `on_rejected(kind)`: counts a rejection (the node's metric).
        `require_node_certificate`: mutual TLS is on, so a peer must also present the node
        certificate of the id it claims (`authenticate`)."""
        if not secret:
            raise PeerAuthError(
                "a cluster secret is required to sign peer calls: set FLOTILLA_CLUSTER_SECRET"
            )
        self.node_id = node_id
        self.window_ms = window_ms
        self.clock = clock
        self.on_rejected = on_rejected
        self.require_node_certificate = require_node_certificate
        self._key = _key(secret)
        self._keys = (
            (self._key, _key(previous)) if previous and previous != secret else (self._key,)
        )
        self._signed: tuple[int, str] = (-1, "")  # (second, value): reused within a second
        self._logged: set[str] = set()
        self.rejected = dict.fromkeys(KINDS, 0)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- calls ----------------------------------------------------------------------------------
    def _call_mac(self, key: bytes, node_id: str, at_ms: int) -> str:
        message = f"{PEER_KEY}|{node_id}|{at_ms}".encode()
        return hmac.new(key, message, hashlib.sha256).hexdigest()

    def sign_call(self, now_ms: int | None = None) -> str:
        """The `flotilla-peer` metadata value for a call made now (reused within one second)."""
        at_ms = self._now_ms() if now_ms is None else now_ms
        second, value = self._signed
        if now_ms is None and at_ms // 1000 == second:
            return value
        value = f"{self.node_id}.{at_ms}.{self._call_mac(self._key, self.node_id, at_ms)}"
        if now_ms is None:
            self._signed = (at_ms // 1000, value)
        return value

    def verify_call(self, value: str | bytes | None, now_ms: int | None = None) -> str:
        """The node id `value` proves, or PeerAuthError naming why not."""
        if not value:
            raise PeerAuthError(f"no {PEER_KEY} metadata: not a call from a cluster node")
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        match = _CALL_VALUE.fullmatch(value)
        if match is None:
            raise PeerAuthError(
                f"{PEER_KEY} metadata is malformed: expected '<node id>.<epoch ms>.<64 hex>'"
            )
        node_id, at_text, mac = match.groups()
        self._check_time(int(at_text), now_ms, f"call from {node_id!r}")
        if not any(
            hmac.compare_digest(mac, self._call_mac(key, node_id, int(at_text)))
            for key in self._keys
        ):
            raise PeerAuthError(
                f"{PEER_KEY} metadata of {node_id!r} is not signed with this cluster's secret"
            )
        return node_id

    def _check_time(self, at_ms: int, now_ms: int | None, what: str) -> None:
        now = self._now_ms() if now_ms is None else now_ms
        if abs(now - at_ms) > self.window_ms:
            raise PeerAuthError(
                f"{what} is dated {at_ms} ms, {(at_ms - now) / 1000:+.1f} s from this node's "
                f"clock: outside the ±{self.window_ms / 1000:g} s window (clocks out of sync, "
                "or a replay)"
            )

    # -- SWIM -----------------------------------------------------------------------------------
    @staticmethod
    def _swim_body(packet: peer_pb2.SwimPacket) -> bytes:
        node = packet.from_node.encode()
        address = packet.from_address.encode()
        return b"".join(
            (
                _SWIM_LABEL,
                struct.pack(">IIQ", len(node), len(address), packet.sent_at_ms),
                node,
                address,
                packet.payload,
            )
        )

    def sign_swim(self, packet: peer_pb2.SwimPacket, now_ms: int | None = None) -> None:
        """Dates and MACs `packet` in place."""
        packet.sent_at_ms = self._now_ms() if now_ms is None else now_ms
        packet.mac = hmac.new(self._key, self._swim_body(packet), hashlib.sha256).digest()

    def verify_swim(self, packet: peer_pb2.SwimPacket, now_ms: int | None = None) -> None:
        if not packet.mac:
            raise PeerAuthError(f"SWIM packet from {packet.from_node!r} carries no mac")
        self._check_time(packet.sent_at_ms, now_ms, f"SWIM packet from {packet.from_node!r}")
        body = self._swim_body(packet)
        if not any(
            hmac.compare_digest(packet.mac, hmac.new(key, body, hashlib.sha256).digest())
            for key in self._keys
        ):
            raise PeerAuthError(
                f"SWIM packet from {packet.from_node!r} is not signed with this cluster's secret"
            )

    # -- a received call -------------------------------------------------------------------------
    def authenticate(self, context: grpc.aio.ServicerContext, kind: str = "call") -> str:
        """The node id a received call proves (its metadata, and with mutual TLS its
        certificate); else the rejection is counted and logged (`reject`) and PeerAuthError
        raised, for the caller to answer UNAUTHENTICATED."""
        value = None
        for key, item in context.invocation_metadata() or ():
            if key == PEER_KEY:
                value = item
                break
        try:
            node_id = self.verify_call(value)
            self._check_certificate(context, node_id)
        except PeerAuthError as error:
            self.reject(kind, context.peer(), str(error))
            raise
        return node_id

    def authenticate_swim(
        self, packet: peer_pb2.SwimPacket, context: grpc.aio.ServicerContext
    ) -> None:
        """`packet`'s mac and date, and with mutual TLS the sender's certificate naming
        `packet.from_node`; else as `authenticate`."""
        try:
            self.verify_swim(packet)
            self._check_certificate(context, packet.from_node)
        except PeerAuthError as error:
            self.reject("swim", context.peer(), str(error))
            raise

    def _check_certificate(self, context: grpc.aio.ServicerContext, node_id: str) -> None:
        if self.require_node_certificate:
            self.check_identity(caller_certificate(context), node_id)

    def check_identity(self, identity: CertIdentity | None, node_id: str) -> None:
        """With mutual TLS: PeerAuthError unless `identity` (the certificate the caller
        presented) is node `node_id`'s."""
        if not self.require_node_certificate:
            return
        if identity is None:
            raise PeerAuthError(f"a call claiming node {node_id!r} presented no certificate")
        if identity.kind != "node" or identity.name != node_id:
            raise PeerAuthError(
                f"a call claiming node {node_id!r} presented the {identity.kind} certificate "
                f"of {identity.name!r}: only node {node_id!r}'s certificate may speak for it"
            )

    # -- rejections -----------------------------------------------------------------------------
    def reject(self, kind: str, source: str, reason: str) -> None:
        """Counts a rejected peer message of `kind` ("raft", "swim", "call") and logs it, once
        per source address (`source`: `context.peer()` or an address)."""
        self.rejected[kind] = self.rejected.get(kind, 0) + 1
        self.on_rejected(kind)
        host = source_host(source)
        if host in self._logged:
            return
        if len(self._logged) >= MAX_LOGGED_SOURCES:
            self._logged.clear()
        self._logged.add(host)
        event(
            log, "peer_auth_rejected", logging.WARNING, kind=kind, source=host, reason=reason,
            further="counted in flotilla_peer_auth_rejected_total, not logged",
        )  # fmt: skip
