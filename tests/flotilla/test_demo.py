"""`flotilla demo` (`make demo`) end to end, shortened: three real nodes with mutual TLS, records
produced and read back from followers, every node stopped (the Spark job is left to `make demo`:
it takes a JVM)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

import flotilla.demo
from cluster.local import LocalCluster
from flotilla.demo import run_demo

pytestmark = pytest.mark.integration


def test_the_demo_runs_with_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[LocalCluster] = []

    def check_tls(cluster: LocalCluster, client: object) -> None:
        seen.append(cluster)
        assert cluster.tls is not None  # the nodes were started with certificates
        for node_id in cluster.nodes:
            assert "--tls-cert" in cluster.command(cluster.nodes[node_id])

    output = io.StringIO()
    result = run_demo(300, Console(file=output, width=120), after=check_tls)
    assert (result.produced, result.read_back) == (300, 300)
    assert "mutual TLS" in output.getvalue()
    assert seen and not any(seen[0].is_running(n) for n in seen[0].nodes)


def test_tls_settings_name_the_admin_certificate(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 1, tls=True)
    settings = flotilla.demo.tls_settings(cluster)
    assert set(settings) == {"tls_ca", "tls_cert", "tls_key"}
    assert Path(settings["tls_cert"]).name == "admin.pem"
    assert flotilla.demo.tls_settings(LocalCluster(tmp_path / "plain", 1)) == {}
