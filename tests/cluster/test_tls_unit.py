"""`cluster.tls` without a cluster: the files are checked (a key of another certificate, a
missing file: errors naming them), a reload takes new files and keeps the old ones when the new
ones are broken, and a certificate is read as the node or client it names."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cluster.certs import init_ca, issue_client, issue_node
from cluster.tls import TlsError, TlsFiles, TlsMaterial, TlsReloader, identity_of


def _files(tmp_path: Path) -> TlsFiles:
    init_ca(tmp_path)
    paths = issue_node(tmp_path, "n1")
    return TlsFiles(str(paths.ca), str(paths.cert), str(paths.key))


def test_material_is_checked_naming_the_bad_file(tmp_path: Path) -> None:
    files = _files(tmp_path)
    assert TlsMaterial.read(files).serial > 0
    other = issue_node(tmp_path, "n2")
    with pytest.raises(TlsError, match=r"tls_key=.*n2.key.* is not the key of tls_cert=.*n1.pem"):
        TlsMaterial.read(TlsFiles(files.ca, files.cert, str(other.key)))
    with pytest.raises(TlsError, match=r"tls_ca='/nonexistent/ca.pem' cannot be read"):
        TlsMaterial.read(TlsFiles("/nonexistent/ca.pem", files.cert, files.key))
    with pytest.raises(TlsError, match=r"tls_cert=.* holds no PEM certificate"):
        TlsMaterial.read(TlsFiles(files.ca, files.key, files.key))


def test_reload_takes_new_files_and_keeps_the_old_ones_when_broken(tmp_path: Path) -> None:
    files = _files(tmp_path)
    reloader = TlsReloader(files)
    first = reloader.material.serial
    assert not reloader.check()  # nothing changed
    issue_node(tmp_path, "n1")  # rotation: a new certificate and key under the same names
    assert reloader.check() and reloader.generation == 1
    second = reloader.material.serial
    assert second != first
    # a key that is not the certificate's (a half-done rotation): the old pair stays
    shutil.copy(issue_node(tmp_path, "n2").key, files.key)
    assert not reloader.check() and reloader.material.serial == second
    assert not reloader.reload()
    issue_node(tmp_path, "n1")
    assert reloader.reload() and reloader.generation == 2


def test_the_fetcher_hands_new_material_once(tmp_path: Path) -> None:
    files = _files(tmp_path)
    now = [0.0]
    reloader = TlsReloader(files, clock=lambda: now[0])
    reloader.server_credentials()
    assert reloader._fetch() is None
    issue_node(tmp_path, "n1")
    assert reloader._fetch() is None  # looked at the files less than a second ago
    now[0] = 1.5
    assert reloader._fetch() is not None  # changed: the new configuration, once
    assert reloader._fetch() is None


def test_identity_of_node_and_client_certificates(tmp_path: Path) -> None:
    init_ca(tmp_path)
    node = identity_of(issue_node(tmp_path, "n1").cert.read_bytes())
    client = identity_of(issue_client(tmp_path, "alice").cert.read_bytes())
    assert node is not None and (node.kind, node.name) == ("node", "n1")
    assert client is not None and (client.kind, client.name) == ("client", "alice")
    assert identity_of(b"not a certificate") is None
