"""Conformance of our Toxiproxy server with v2.4.0, through the `toxiproxy-python` client.

The checks live in chaos/toxiproxy/conformance.py (so they also run against the real server:
`python -m chaos.toxiproxy.conformance --port 8474`); they passed against the real v2.4.0 binary built
from source when they were written. Here they run against our server, and against deliberately
broken variants of it, to show that they catch a wrong answer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
import requests

from chaos.toxiproxy.api import ToxiproxyApi
from chaos.toxiproxy.conformance import CHECKS, ConformanceFailure, Target, run_checks
from chaos.toxiproxy.http11 import HttpRequest, HttpResponse
from chaos.toxiproxy.server import ServerThread

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_conformance_check_passes(toxiproxy_server: ServerThread, check: str) -> None:
    assert run_checks(Target(toxiproxy_server.host, toxiproxy_server.port), [check]) == [check]


class _CreateAnswers200(ToxiproxyApi):
    """Broken: answers 200 instead of 201 when a proxy is created."""

    async def create_proxy(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        response = await super().create_proxy(request, variables)
        return dataclasses.replace(response, status=HTTPStatus.OK)


class _IgnoresEnabled(ToxiproxyApi):
    """Broken: a proxy update ignores the `enabled` field."""

    async def update_proxy(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        body = json.loads(request.body or b"{}")
        body.pop("enabled", None)
        stripped = dataclasses.replace(request, body=json.dumps(body).encode())
        return await super().update_proxy(stripped, variables)


class _ToxicNameWithoutStream(ToxiproxyApi):
    """Broken: the default toxic name is `<type>` instead of `<type>_<stream>`."""

    async def create_toxic(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        body = json.loads(request.body)
        body.setdefault("name", body.get("type", ""))
        renamed = dataclasses.replace(request, body=json.dumps(body).encode())
        return await super().create_toxic(renamed, variables)


@pytest.mark.parametrize(
    ("broken_api", "check", "complaint"),
    [
        (_CreateAnswers200, "create_proxy", "POST /proxies status"),
        (_IgnoresEnabled, "enable_disable", "disabled: enabled"),
        (_ToxicNameWithoutStream, "toxics", "toxic JSON"),
    ],
)
def test_conformance_catches_a_broken_server(
    broken_api: type[ToxiproxyApi], check: str, complaint: str
) -> None:
    with ServerThread(api_factory=broken_api) as server:
        with pytest.raises(ConformanceFailure, match=complaint):
            run_checks(Target(server.host, server.port), [check])
        # The same server passes the checks its breakage does not touch.
        assert run_checks(Target(server.host, server.port), ["version"]) == ["version"]


def test_browser_user_agent_is_refused_like_the_real_server(
    toxiproxy_server: ServerThread,
) -> None:
    response = requests.get(
        toxiproxy_server.url + "/proxies", headers={"User-Agent": "Mozilla/5.0"}, timeout=10
    )
    assert (response.status_code, response.text) == (403, "User agent not allowed\n")


def test_listen_address_must_be_loopback(client: Any, toxiproxy_server: ServerThread) -> None:
    response = requests.post(
        toxiproxy_server.url + "/proxies",
        json={"name": "open", "upstream": "127.0.0.1:9", "listen": "0.0.0.0:0"},
        timeout=10,
    )
    assert response.status_code == 400
    assert "0.0.0.0:0" in response.json()["error"]
    assert "loopback" in response.json()["error"]
    assert client.proxies() == {}


def test_command_line_server_starts_answers_and_stops() -> None:
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    process = subprocess.Popen(
        [sys.executable, "-m", "chaos.toxiproxy", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=REPOSITORY,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("toxiproxy listening on http://127.0.0.1:"), line
        url = line.split()[3]
        assert requests.get(url + "/version", timeout=10).text == "2.4.0"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_command_line_refuses_a_non_loopback_host() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "chaos.toxiproxy", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
        cwd=REPOSITORY,
        timeout=30,
        check=False,
    )
    assert completed.returncode == 2
    assert "loopback" in completed.stderr
