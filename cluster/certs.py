"""A small local certificate authority: the cluster CA, node certificates and client certificates
(ECDSA P-256, SHA-256), written as PEM files into one directory.

Layout of a certificate directory:

    ca.pem  ca.key            the CA (10 years); made once by `init_ca`, never overwritten
    <name>.pem  <name>.key    a node's or a client's certificate (1 year) and key

Every key file is mode 0600; every file is written to a temporary name and renamed into place,
so a node reloading its files (cluster/tls.py) sees the old pair or the new one, never half a file.
Issuing a certificate under a name that has one replaces it: that is how a certificate is rotated.

What the certificates say (the receiving side of a peer call relies on it, cluster/tls.py):
- node `<id>`: CN = id; SAN URI `urn:flotilla:node:<id>`, DNS `<id>`, DNS `flotilla-node` (the
  name peers verify, whatever address they dialled), DNS `localhost`, IP 127.0.0.1 and every host
  given; extended key usage serverAuth + clientAuth.
- client `<name>`: CN = name; SAN URI `urn:flotilla:client:<name>`; clientAuth only, so a client
  certificate cannot serve as a node.

Pure file and `cryptography` work: this module imports nothing else of ours (`flotilla.certs`
re-exports it for the SDK and CLI; it lives here because `cluster.local` makes certificates for
test clusters and `cluster` may not import `flotilla`).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cluster.errors import ClusterError

__all__ = [
    "CLIENT_URI_PREFIX",
    "NODE_SERVER_NAME",
    "NODE_URI_PREFIX",
    "CaPaths",
    "CertError",
    "CertPaths",
    "LoadedCa",
    "init_ca",
    "issue_client",
    "issue_node",
    "load_ca",
]

NODE_URI_PREFIX = "urn:flotilla:node:"
CLIENT_URI_PREFIX = "urn:flotilla:client:"
# every node certificate carries this DNS name; peers dial with it as the TLS target name
NODE_SERVER_NAME = "flotilla-node"
CA_DAYS = 3650
LEAF_DAYS = 365
# a certificate is valid from a little before it was made: clocks of a cluster differ
BACKDATE = datetime.timedelta(minutes=5)
NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
DNS_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_-]{1,63})*$")
RESERVED = {"ca", ".", ".."}
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
    encipher_only=False, decipher_only=False,
)  # fmt: skip


class CertError(ClusterError, ValueError):
    """A certificate cannot be made or loaded; the message names the bad name or path."""


@dataclass(frozen=True, slots=True)
class CaPaths:
    directory: Path
    cert: Path  # ca.pem
    key: Path  # ca.key (0600)


@dataclass(frozen=True, slots=True)
class CertPaths:
    """What a node or a client needs to connect: the CA to trust, its certificate and its key."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class LoadedCa:
    paths: CaPaths
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _ca_paths(directory: str | os.PathLike[str]) -> CaPaths:
    root = Path(directory)
    return CaPaths(root, root / "ca.pem", root / "ca.key")


def init_ca(directory: str | os.PathLike[str]) -> CaPaths:
    """Makes a new CA in `directory` (created if missing, mode 0700). Refuses when the directory
    already holds one: replacing a CA would orphan every certificate it signed."""
    paths = _ca_paths(directory)
    if paths.cert.exists() or paths.key.exists():
        raise CertError(
            f"{paths.directory} already holds a CA ({paths.cert.name}/{paths.key.name}); "
            "refusing to overwrite it: issue certificates from it, or choose another directory"
        )
    _make_directory(paths.directory)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"Flotilla CA {secrets.token_hex(4)}")]
    )
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(paths.key, _key_pem(key), private=True)
    _write(paths.cert, certificate.public_bytes(serialization.Encoding.PEM), private=False)
    return paths


def load_ca(directory: str | os.PathLike[str]) -> LoadedCa:
    paths = _ca_paths(directory)
    try:
        cert_bytes = paths.cert.read_bytes()
        key_bytes = paths.key.read_bytes()
    except OSError as error:
        raise CertError(
            f"no CA in {paths.directory}: {error.strerror} ({error.filename}); "
            "make one with `flotilla certs init`"
        ) from None
    try:
        certificate = x509.load_pem_x509_certificate(cert_bytes)
        key = serialization.load_pem_private_key(key_bytes, password=None)
    except (ValueError, TypeError) as error:
        raise CertError(f"the CA in {paths.directory} cannot be read: {error}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError(f"{paths.key} is not an EC private key (this CA signs with ECDSA P-256)")
    return LoadedCa(paths, certificate, key)


def issue_node(
    directory: str | os.PathLike[str], node_id: str, hosts: tuple[str, ...] | list[str] = ()
) -> CertPaths:
    """Issues (or re-issues: rotation) node `node_id`'s certificate from the CA in `directory`.
    `hosts`: further addresses the node is reached at, each an IP address or a DNS name."""
    _check_name(node_id, "node id")
    names: list[x509.GeneralName] = [
        x509.UniformResourceIdentifier(NODE_URI_PREFIX + node_id),
        x509.DNSName(node_id),
        x509.DNSName(NODE_SERVER_NAME),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    for host in hosts:
        entry = _host_name(host)
        if entry not in names:
            names.append(entry)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    return _issue(directory, node_id, names, usages)


def issue_client(directory: str | os.PathLike[str], name: str) -> CertPaths:
    """Issues (or re-issues) client `name`'s certificate: its principal is `name`."""
    _check_name(name, "client name")
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(CLIENT_URI_PREFIX + name)]
    return _issue(directory, name, names, [ExtendedKeyUsageOID.CLIENT_AUTH])


def _issue(
    directory: str | os.PathLike[str],
    name: str,
    alt_names: list[x509.GeneralName],
    usages: list[x509.ObjectIdentifier],
) -> CertPaths:
    ca = load_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )
    root = ca.paths.directory
    paths = CertPaths(ca.paths.cert, root / f"{name}.pem", root / f"{name}.key")
    _write(paths.key, _key_pem(key), private=True)
    _write(paths.cert, certificate.public_bytes(serialization.Encoding.PEM), private=False)
    return paths


def _check_name(name: str, what: str) -> None:
    if not NAME.match(name) or name.lower() in RESERVED:
        raise CertError(
            f"{what} {name!r} is invalid: use 1 to 64 characters from [A-Za-z0-9._-], "
            "not 'ca', '.' or '..'"
        )


def _host_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not DNS_NAME.match(host):
        raise CertError(f"host {host!r} is invalid: give an IP address or a DNS name")
    return x509.DNSName(host)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _make_directory(path: Path) -> None:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise CertError(f"cannot make certificate directory {path}: {error.strerror}") from None
    if not path.is_dir():
        raise CertError(f"{path} is not a directory")


def _write(path: Path, data: bytes, *, private: bool) -> None:
    """Writes `data` to a temporary file beside `path` and renames it into place (fsynced)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        descriptor = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644
        )
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        os.replace(temporary, path)
    except OSError as error:
        raise CertError(f"cannot write {path}: {error.strerror}") from None
