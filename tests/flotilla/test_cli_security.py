"""The security CLI without a cluster: `flotilla certs init|issue|client` writes a CA and
certificates the SDK accepts (and refuses a second CA in one line), the TLS and token options are
taken before or after a command's name and fall back to the environment, and bad settings end
in one line and a non-zero exit, never a traceback. The commands against real nodes (acl, token,
whoami, status): tests/flotilla/test_security_sdk.py."""

from __future__ import annotations

import argparse
import stat
import sys
from pathlib import Path

import pytest
from cryptography import x509

from flotilla import cli
from flotilla._credentials import Credentials
from flotilla.cli_security import operations, tls_settings


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out, err


def test_certs_init_issue_and_client_write_what_the_sdk_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "certs"
    status, out, _ = run(capsys, "certs", "init", "--dir", str(directory))
    assert status == 0 and "ca.pem" in out
    assert stat.S_IMODE((directory / "ca.key").stat().st_mode) == 0o600
    status, out, _ = run(
        capsys, "certs", "issue", "n1", "--host", "10.0.0.5", "--host", "n1.example", "--dir",
        str(directory),
    )  # fmt: skip
    assert status == 0 and 'tls_cert = "' in out
    node = x509.load_pem_x509_certificate((directory / "n1.pem").read_bytes())
    names = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "n1.example" in names.get_values_for_type(x509.DNSName)
    assert "10.0.0.5" in {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    status, out, _ = run(capsys, "certs", "client", "alice", "--dir", str(directory))
    assert status == 0 and f"FLOTILLA_TLS_CERT={directory / 'alice.pem'}" in out
    loaded = Credentials.load(
        str(directory / "ca.pem"), str(directory / "alice.pem"), str(directory / "alice.key")
    )
    assert loaded.tls and loaded.cert and loaded.key
    # a second CA would orphan every certificate the first signed: refused, one line
    status, out, err = run(capsys, "certs", "init", "--dir", str(directory))
    assert status == 1 and err.count("\n") == 1 and "refusing to overwrite" in err
    status, _, err = run(capsys, "certs", "client", "bad name", "--dir", str(directory))
    assert status == 1 and err.startswith("flotilla certs client: ") and err.count("\n") == 1
    status, _, err = run(capsys, "certs", "issue", "n2", "--dir", str(tmp_path / "none"))
    assert status == 1 and err.count("\n") == 1


def test_the_security_options_go_before_or_after_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[argparse.Namespace] = []

    def client_command(args: argparse.Namespace) -> int:
        parsed.append(args)
        return 0

    monkeypatch.setattr(cli, "_run_client_command", client_command)
    cli.main(["--tls-ca", "a.pem", "--token", "t1", "topic", "list"])
    cli.main(["topic", "list", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "b"])
    cli.main(["--token", "t1", "whoami", "--token", "t2", "--tls-server-name", "flotilla-node"])
    cli.main(["acl", "list"])
    first, second, third, nothing = (tls_settings(args) for args in parsed)
    assert first == {
        "tls_ca": "a.pem", "tls_cert": None, "tls_key": None, "token": "t1",
        "tls_server_name": None,
    }  # fmt: skip
    assert (second["tls_ca"], second["tls_cert"], second["tls_key"]) == ("b", "c.pem", "k.pem")
    assert third["token"] == "t2" and third["tls_server_name"] == "flotilla-node"
    assert set(nothing.values()) == {None}  # the environment's, then (Client reads it)


def test_acl_operations_are_checked_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    assert operations("Produce, consume,produce") == ["produce", "consume"]
    with pytest.raises(argparse.ArgumentTypeError, match="use one or more of produce"):
        operations("read")
    for argv in (
        ["acl", "add", "bob", "--allow", "write", "--topic", "t"],
        ["acl", "add", "bob", "--allow", "produce"],  # no --topic
        ["acl", "add", "bob", "--topic", "t"],  # neither --allow nor --deny
        ["acl", "add", "bob", "--allow", "produce", "--deny", "admin", "--topic", "t"],
    ):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 2, argv
    assert "Traceback" not in capsys.readouterr().err


def test_bad_settings_end_in_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("FLOTILLA_TLS_CA", "FLOTILLA_TLS_CERT", "FLOTILLA_TLS_KEY", "FLOTILLA_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    status, _, err = run(capsys, "topic", "list", "--bootstrap", "10.0.0.5:7001", "--token", "t")
    assert status == 1 and err.count("\n") == 1
    assert "refusing to send the token to 10.0.0.5:7001 without TLS" in err
    missing = tmp_path / "nope.pem"
    status, _, err = run(capsys, "--tls-ca", str(missing), "whoami")
    assert (
        status == 1
        and err
        == f"flotilla: tls_ca {str(missing)!r}: no such file; give the path of the cluster's CA certificate (PEM)\n"
    )
    monkeypatch.setenv("FLOTILLA_TLS_CERT", str(missing))
    status, _, err = run(capsys, "acl", "list")
    assert status == 1 and "tls_cert (from $FLOTILLA_TLS_CERT) is given without tls_key" in err


def test_the_top_level_help_names_the_security_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for word in ("acl", "token", "whoami", "certs", "--tls-ca", "--token"):
        assert word in out, word
    assert sys.modules["flotilla.cli_security"].__doc__ is not None
