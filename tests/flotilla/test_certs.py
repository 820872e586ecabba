"""The local CA (`flotilla.certs`): the files it writes, what its certificates say, and that a real
TLS handshake accepts them (mutual TLS with Python's `ssl`, the CA as the only trust root)."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from flotilla.certs import CertError, init_ca, issue_client, issue_node, load_ca


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(certificate: x509.Certificate) -> x509.SubjectAlternativeName:
    return certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value


def test_init_ca_writes_a_ca_with_private_key_0600_and_refuses_to_overwrite(tmp_path: Path) -> None:
    directory = tmp_path / "certs"
    paths = init_ca(directory)
    assert paths.cert == directory / "ca.pem" and paths.key == directory / "ca.key"
    assert stat.S_IMODE(paths.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    ca = _cert(paths.cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.subject.rfc4514_string().startswith("CN=Flotilla CA ")
    before = paths.cert.read_bytes()
    with pytest.raises(CertError, match="already holds a CA"):
        init_ca(directory)
    assert paths.cert.read_bytes() == before
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_node_certificate_names_the_node_and_its_hosts(tmp_path: Path) -> None:
    init_ca(tmp_path)
    paths = issue_node(tmp_path, "n1", hosts=("10.0.0.5", "broker-1.example.com"))
    assert stat.S_IMODE(paths.key.stat().st_mode) == 0o600
    assert paths.ca == tmp_path / "ca.pem"
    certificate = _cert(paths.cert)
    assert certificate.subject.rfc4514_string() == "CN=n1"
    sans = _sans(certificate)
    assert sans.get_values_for_type(x509.UniformResourceIdentifier) == ["urn:flotilla:node:n1"]
    assert set(sans.get_values_for_type(x509.DNSName)) == {
        "n1",
        "flotilla-node",
        "localhost",
        "broker-1.example.com",
    }
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {
        "127.0.0.1",
        "10.0.0.5",
    }
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert certificate.issuer == load_ca(tmp_path).certificate.subject


def test_client_certificate_is_client_only_and_reissue_rotates(tmp_path: Path) -> None:
    init_ca(tmp_path)
    first = issue_client(tmp_path, "alice")
    certificate = _cert(first.cert)
    assert _sans(certificate).get_values_for_type(x509.UniformResourceIdentifier) == [
        "urn:flotilla:client:alice"
    ]
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    second = issue_client(tmp_path, "alice")
    assert second == first
    assert _cert(second.cert).serial_number != certificate.serial_number


@pytest.mark.parametrize("name", ["", "ca", "..", "a/b", "x" * 65, "sp ace"])
def test_bad_names_are_refused_naming_them(tmp_path: Path, name: str) -> None:
    init_ca(tmp_path)
    with pytest.raises(CertError, match="is invalid: use 1 to 64 characters"):
        issue_node(tmp_path, name)
    with pytest.raises(CertError, match="is invalid"):
        issue_client(tmp_path, name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.key", "ca.pem"]


def test_bad_host_and_missing_ca_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CertError, match=r"no CA in .*flotilla certs init"):
        issue_node(tmp_path, "n1")
    init_ca(tmp_path)
    with pytest.raises(CertError, match="host 'no spaces' is invalid"):
        issue_node(tmp_path, "n1", hosts=("no spaces",))
    assert not (tmp_path / "n1.pem").exists()


def test_a_tls_handshake_accepts_node_and_client_certificates(tmp_path: Path) -> None:
    """Mutual TLS with the CA as the only root: the server (a node certificate, verified under
    the name peers use) requires and accepts the client's certificate."""
    init_ca(tmp_path)
    node = issue_node(tmp_path, "n1")
    client = issue_client(tmp_path, "admin")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(node.ca))
    server_context.load_cert_chain(str(node.cert), str(node.key))
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.create_default_context(cafile=str(client.ca))
    client_context.load_cert_chain(str(client.cert), str(client.key))
    seen: list[object] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            connection, _ = listener.accept()
            with server_context.wrap_socket(connection, server_side=True) as tls:
                seen.append(tls.getpeercert())

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client_context.wrap_socket(raw, server_hostname="flotilla-node") as tls,
        ):
            peer = tls.getpeercert()
            assert peer and peer["subject"] == ((("commonName", "n1"),),)
        thread.join(10)
    assert seen and seen[0]["subject"] == ((("commonName", "admin"),),)  # type: ignore[index]
