"""`cluster.tls` without a cluster: the files are checked (a key of another certificate, a
missing file: errors naming them), a reload takes new files and keeps the old ones when the new
ones are broken, and a certificate is read as the node or client it names."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cluster.certs import init_ca, issue_client, issue_node
from cluster.config import ConfigError, NodeConfig
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


# -- configuration (NodeConfig._validate_security) ---------------------------------------------


def _load(**overrides: object) -> NodeConfig:
    base: dict[str, object] = {"node_id": "n1", "data_dir": "/tmp/unused", "cluster_secret": "s"}
    return NodeConfig.load(environ={}, overrides={**base, **overrides})


def test_every_clustered_node_needs_the_secret() -> None:
    with pytest.raises(
        ConfigError, match=r"cluster_secret is required on node 'n2'.*FLOTILLA_CLUSTER_SECRET"
    ):
        _load(
            node_id="n2",
            cluster_secret="",
            join=("127.0.0.1:7001",),
            controllers="n1=127.0.0.1:7101",
        )
    _load(cluster_secret="")  # a lone node: `standalone` gives it its kept secret


def test_tls_files_all_or_none_and_readable(tmp_path: Path) -> None:
    files = _files(tmp_path)
    with pytest.raises(ConfigError, match="tls_ca, tls_cert given without tls_key"):
        _load(tls_ca=files.ca, tls_cert=files.cert)
    with pytest.raises(ConfigError, match=r"tls_key='/nonexistent/k\.pem' is not a readable file"):
        _load(tls_ca=files.ca, tls_cert=files.cert, tls_key="/nonexistent/k.pem")
    assert _load(tls_ca=files.ca, tls_cert=files.cert, tls_key=files.key).tls


def test_a_public_address_needs_tls_or_insecure(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"listens on 0.0.0.0:7001 without TLS: give tls_ca.*--insecure"
    ):
        _load(listen="0.0.0.0:7001")
    with pytest.raises(ConfigError, match=r"advertises on 10.0.0.5:7001 without TLS"):
        _load(advertise="10.0.0.5:7001")
    assert _load(listen="0.0.0.0:7001", insecure=True).insecure
    files = _files(tmp_path)
    _load(listen="0.0.0.0:7001", tls_ca=files.ca, tls_cert=files.cert, tls_key=files.key)
    _load(listen="localhost:7001")


def test_metrics_stay_on_loopback_unless_public() -> None:
    with pytest.raises(
        ConfigError, match=r"metrics='0.0.0.0:9100' is not a loopback.*--metrics-public"
    ):
        _load(metrics="0.0.0.0:9100")
    assert _load(metrics="0.0.0.0:9100", metrics_public=True).metrics_public
    _load(metrics="127.0.0.1:9100")


def test_authorization_and_superusers_are_checked() -> None:
    with pytest.raises(ConfigError, match="authorization='maybe' is invalid; valid: auto, on, off"):
        _load(authorization="maybe")
    with pytest.raises(ConfigError, match="superusers entry 'bad name' is invalid"):
        _load(superusers="admin,bad name")
    assert _load(superusers="admin,ops").superusers == ("admin", "ops")


def test_a_local_cluster_does_not_hand_the_shells_client_settings_to_its_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FLOTILLA_TLS_CERT is the client's certificate to a client and the node's own to a node:
    exported for a client (as `flotilla dev` suggests), it must not become a local node's."""
    from cluster.local import LocalCluster

    for name in ("FLOTILLA_TLS_CA", "FLOTILLA_TLS_CERT", "FLOTILLA_TLS_KEY", "FLOTILLA_TOKEN"):
        monkeypatch.setenv(name, "/nonexistent/client-setting")
    monkeypatch.setenv("FLOTILLA_SOMETHING_ELSE", "kept")
    cluster = LocalCluster(tmp_path, 1)
    assert not any(v == "/nonexistent/client-setting" for v in cluster.env.values())
    assert cluster.env["FLOTILLA_SOMETHING_ELSE"] == "kept"
    given = LocalCluster(tmp_path / "b", 1, env={"FLOTILLA_TLS_CA": "/given/ca.pem"})
    assert given.env["FLOTILLA_TLS_CA"] == "/given/ca.pem"  # an explicit setting still wins
