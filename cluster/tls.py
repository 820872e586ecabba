"""TLS for the node's one port: server credentials that reload, the node's own channel
credentials, and who a caller's certificate names.

Files (`TlsFiles`): the cluster CA, this node's certificate (chain) and its key, PEM. `TlsMaterial`
holds what was read and checked (the key matches the certificate, the CA parses); the node's
`TlsReloader` re-reads the files when their size or mtime changes (looked at, at most once a
second, when a connection arrives, and every few seconds by the node) and at once on `reload()`
(SIGHUP). Files that fail the check (half-written, a key of another certificate) are logged and
ignored: the node keeps serving its previous certificate.

Server side: `grpc.dynamic_ssl_server_credentials`, whose fetcher gRPC calls before each new
connection's handshake; it returns the new configuration once after a reload, else None (no
change), so existing connections keep theirs and new ones get the new certificate.

Client side (the node dialling its peers and itself): the node certificate is its client
certificate, the CA is the only root, and the name verified is `flotilla-node` (every node
certificate carries it: dial maps and chaos proxies change the address dialled, and who the
peer is gets checked on the receiving side, from its certificate and its signed metadata).

Callers (`caller_certificate`): the certificate gRPC verified on the connection, parsed once per
distinct certificate (cached by its bytes): a node certificate (URI SAN `urn:flotilla:node:<id>`)
or a client one (URI `urn:flotilla:client:<name>`, or, from a CA of the user's own without our
URIs, its common name).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from cluster.certs import CLIENT_URI_PREFIX, NODE_SERVER_NAME, NODE_URI_PREFIX
from cluster.config import ConfigError, NodeConfig
from cluster.logs import event

__all__ = [
    "CertIdentity",
    "TlsError",
    "TlsFiles",
    "TlsMaterial",
    "TlsReloader",
    "caller_certificate",
    "peer_channel_options",
]

log = logging.getLogger("flotilla.tls")

CHECK_INTERVAL_S = 1.0  # a connection's fetcher looks at the files at most this often
_CACHE_SIZE = 1024  # distinct caller certificates remembered


class TlsError(ConfigError):
    """TLS files missing, unreadable or not matching; the message names the file."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: str
    cert: str
    key: str

    @classmethod
    def from_config(cls, config: NodeConfig) -> TlsFiles | None:
        if not (config.tls_ca or config.tls_cert or config.tls_key):
            return None
        return cls(config.tls_ca, config.tls_cert, config.tls_key)

    def stamp(self) -> tuple[tuple[int, int], ...]:
        """(mtime ns, size) of each file: a change means a re-read ((-1, -1): missing)."""
        stamps = []
        for path in (self.ca, self.cert, self.key):
            try:
                status = os.stat(path)
            except OSError:
                stamps.append((-1, -1))
            else:
                stamps.append((status.st_mtime_ns, status.st_size))
        return tuple(stamps)


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    ca: bytes
    cert: bytes
    key: bytes
    serial: int  # the node certificate's, for logs and tests

    @classmethod
    def read(cls, files: TlsFiles) -> TlsMaterial:
        contents = []
        for name, path in (("tls_ca", files.ca), ("tls_cert", files.cert), ("tls_key", files.key)):
            try:
                with open(path, "rb") as handle:
                    contents.append(handle.read())
            except OSError as error:
                raise TlsError(f"{name}={path!r} cannot be read: {error.strerror}") from None
        ca, cert, key = contents
        try:
            x509.load_pem_x509_certificates(ca)
        except ValueError:
            raise TlsError(f"tls_ca={files.ca!r} holds no PEM certificate") from None
        try:
            certificate = x509.load_pem_x509_certificates(cert)[0]
        except ValueError:
            raise TlsError(f"tls_cert={files.cert!r} holds no PEM certificate") from None
        try:
            private_key = serialization.load_pem_private_key(key, password=None)
        except (ValueError, TypeError):
            raise TlsError(f"tls_key={files.key!r} holds no unencrypted PEM private key") from None
        public = serialization.PublicFormat.SubjectPublicKeyInfo
        encoding = serialization.Encoding.DER
        if private_key.public_key().public_bytes(encoding, public) != certificate.public_key(
        ).public_bytes(encoding, public):  # fmt: skip
            raise TlsError(f"tls_key={files.key!r} is not the key of tls_cert={files.cert!r}")
        return cls(ca, cert, key, certificate.serial_number)


def peer_channel_options() -> list[tuple[str, str]]:
    """Options of a node's TLS channels to its peers: verify the name every node certificate
    carries, whatever address was dialled."""
    return [("grpc.ssl_target_name_override", NODE_SERVER_NAME)]


class TlsReloader:
    """The node's TLS material, re-read when the files change or on `reload()`. Thread-safe:
    gRPC calls the fetcher from its own threads."""

    def __init__(
        self,
        files: TlsFiles,
        *,
        client_auth: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = files
        self.client_auth = client_auth
        self.clock = clock
        self._lock = threading.Lock()
        self._stamp = files.stamp()
        self.material = TlsMaterial.read(files)  # raises TlsError: the node does not start
        self.generation = 0  # + 1 per reload that took
        self._served = 0  # the generation the server's fetcher last handed to gRPC
        self._checked_at = clock()
        self._bad_stamp: tuple[tuple[int, int], ...] | None = None  # logged already

    # -- reloading --------------------------------------------------------------------------------
    def check(self, *, force: bool = False) -> bool:
        """Re-reads the files if they changed (or `force`); True when new material took."""
        with self._lock:
            self._checked_at = self.clock()
            stamp = self.files.stamp()
            if stamp == self._stamp and not force:
                return False
            try:
                material = TlsMaterial.read(self.files)
            except TlsError as error:
                if stamp != self._bad_stamp:
                    self._bad_stamp = stamp
                    event(
                        log, "tls_reload_failed", logging.WARNING, error=str(error),
                        serving="the previous certificate",
                    )  # fmt: skip
                return False
            self._stamp = stamp
            self._bad_stamp = None
            if material == self.material:
                return False
            previous = self.material.serial
            self.material = material
            self.generation += 1
        event(
            log, "tls_reloaded", cert=self.files.cert, serial=f"{material.serial:x}",
            previous=f"{previous:x}",
        )  # fmt: skip
        return True

    def reload(self) -> bool:
        """SIGHUP: re-read the files now."""
        return self.check(force=True)

    # -- server -----------------------------------------------------------------------------------
    def _configuration(self, material: TlsMaterial) -> object:
        return grpc.ssl_server_certificate_configuration(
            [(material.key, material.cert)], root_certificates=material.ca
        )

    def _fetch(self) -> object | None:
        """gRPC's fetcher, before each new connection's handshake: the new configuration once
        after a reload, else None (keep the current one)."""
        if self.clock() - self._checked_at >= CHECK_INTERVAL_S:
            self.check()
        with self._lock:
            if self._served == self.generation:
                return None
            self._served = self.generation
            material = self.material
        return self._configuration(material)

    def server_credentials(self) -> grpc.ServerCredentials:
        with self._lock:
            self._served = self.generation
            material = self.material
        return grpc.dynamic_ssl_server_credentials(
            self._configuration(material),
            self._fetch,
            require_client_authentication=self.client_auth,
        )

    # -- client -----------------------------------------------------------------------------------
    def channel_credentials(self) -> grpc.ChannelCredentials:
        """The node's credentials for dialling: its certificate as the client certificate."""
        material = self.material
        return grpc.ssl_channel_credentials(material.ca, material.key, material.cert)


# -- callers ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CertIdentity:
    kind: Literal["node", "client"]
    name: str  # the node id or the client's name
    serial: int


_identities: OrderedDict[bytes, CertIdentity | None] = OrderedDict()
_identities_lock = threading.Lock()


def caller_certificate(context: grpc.aio.ServicerContext) -> CertIdentity | None:
    """Who the certificate the caller presented names (gRPC verified it against the CA), or None
    (no TLS, no client certificate, or one naming nothing we know)."""
    try:
        pems = context.auth_context().get("x509_pem_cert")
    except (AttributeError, ValueError):
        return None
    if not pems:
        return None
    return identity_of(pems[0])


def identity_of(pem: bytes) -> CertIdentity | None:
    with _identities_lock:
        if pem in _identities:
            _identities.move_to_end(pem)
            return _identities[pem]
    identity = _parse(pem)
    with _identities_lock:
        _identities[pem] = identity
        if len(_identities) > _CACHE_SIZE:
            _identities.popitem(last=False)
    return identity


def _parse(pem: bytes) -> CertIdentity | None:
    try:
        certificate = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None
    try:
        sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = sans.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        uris = []
    for uri in uris:
        if uri.startswith(NODE_URI_PREFIX) and len(uri) > len(NODE_URI_PREFIX):
            return CertIdentity("node", uri[len(NODE_URI_PREFIX) :], certificate.serial_number)
    for uri in uris:
        if uri.startswith(CLIENT_URI_PREFIX) and len(uri) > len(CLIENT_URI_PREFIX):
            return CertIdentity("client", uri[len(CLIENT_URI_PREFIX) :], certificate.serial_number)
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if names:
        value = names[0].value
        name = value if isinstance(value, str) else value.decode(errors="replace")
        return CertIdentity("client", name, certificate.serial_number)
    return None
