"""deploy/compose_certs.py, the compose `certs` step: certificates made once, the CA's key kept
out of the volume the nodes mount, each node's certificate naming its compose host name."""

from __future__ import annotations

import runpy
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from chaos.deploy_files import compose_document
from chaos.topology import Topology

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "compose_certs.py"
ensure: Any = runpy.run_path(str(SCRIPT))["ensure"]


def _dns_names(path: Path) -> list[str]:
    certificate = x509.load_pem_x509_certificate(path.read_bytes())
    san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return san.get_values_for_type(x509.DNSName)


def test_the_step_as_compose_runs_it_makes_every_file_once(tmp_path: Path) -> None:
    service = compose_document(Topology())["services"]["certs"]
    command = [
        str(tmp_path / word[1:]) if word in ("/ca", "/certs") else word
        for word in service["command"]
    ]
    first = subprocess.run(
        [sys.executable, str(SCRIPT), *command], capture_output=True, text=True, check=False
    )
    assert first.returncode == 0, first.stderr
    published = tmp_path / "certs"
    names = {"ca.pem"} | {
        f"{n}.{k}" for n in ("n1", "n2", "n3", "n4", "admin") for k in ("pem", "key")
    }
    assert {p.name for p in published.iterdir()} == names  # no ca.key where the nodes look
    assert (tmp_path / "ca" / "ca.key").exists()
    for key in published.glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    assert "n2" in _dns_names(published / "n2.pem")  # the name n1 dials
    before = {p.name: p.read_bytes() for p in published.iterdir()}
    second = subprocess.run(
        [sys.executable, str(SCRIPT), *command], capture_output=True, text=True, check=False
    )
    assert second.returncode == 0, second.stderr
    assert "every certificate is in" in second.stdout
    assert {p.name: p.read_bytes() for p in published.iterdir()} == before


def test_a_node_named_later_gets_a_certificate_from_the_same_ca(tmp_path: Path) -> None:
    ca, published = tmp_path / "ca", tmp_path / "certs"
    assert ensure(ca, published, ["n1"], ["admin"]) == ["ca.pem", "n1.pem", "admin.pem"]
    ca_pem = (published / "ca.pem").read_bytes()
    assert ensure(ca, published, ["n1", "n5"], ["admin"]) == ["n5.pem"]
    assert (published / "ca.pem").read_bytes() == ca_pem
    issuer = x509.load_pem_x509_certificate((published / "n5.pem").read_bytes()).issuer
    assert issuer == x509.load_pem_x509_certificate(ca_pem).subject


@pytest.mark.parametrize("bad", ["../n1", "ca"])
def test_a_bad_name_fails_with_one_line_and_no_traceback(tmp_path: Path, bad: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--ca-dir", str(tmp_path / "ca"), "--dir",
         str(tmp_path / "certs"), "--node", bad],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("compose_certs: ") and "Traceback" not in done.stderr
    assert bad in done.stderr
