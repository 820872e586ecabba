"""`python -m cluster.healthcheck` against a fake Flotilla Health server on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from harness import free_port

from cluster import healthcheck
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]


class FakeHealth(flotilla_pb2_grpc.FlotillaServicer):
    """Answers Health with `serving`; with `hang` set, holds the call until `release` is set."""

    def __init__(self) -> None:
        self.serving = True
        self.hang = False
        self.release = threading.Event()
        self.calls = 0

    def Health(self, request: pb.HealthRequest, context: Any) -> pb.HealthResponse:
        self.calls += 1
        if self.hang:
            self.release.wait(10)
        return pb.HealthResponse(node_id="n7", serving=self.serving, partitions=4, leaders=2)


@pytest.fixture
def fake() -> Iterator[tuple[FakeHealth, str]]:
    servicer = FakeHealth()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    flotilla_pb2_grpc.add_FlotillaServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        servicer.release.set()
        server.stop(grace=None).wait(5)


def test_serving_node_exits_0(
    fake: tuple[FakeHealth, str], capsys: pytest.CaptureFixture[str]
) -> None:
    servicer, address = fake
    assert healthcheck.main([address]) == 0
    assert servicer.calls == 1
    assert "node n7" in capsys.readouterr().out


def test_node_not_serving_exits_1(
    fake: tuple[FakeHealth, str], capsys: pytest.CaptureFixture[str]
) -> None:
    servicer, address = fake
    servicer.serving = False
    assert healthcheck.main([address]) == 1
    assert "not serving" in capsys.readouterr().err


def test_nothing_listening_exits_1_quickly(capsys: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    assert healthcheck.main([address]) == 1
    assert time.monotonic() - started < healthcheck.TIMEOUT_S
    assert "no answer (UNAVAILABLE)" in capsys.readouterr().err


def test_a_node_that_never_answers_fails_at_the_deadline(fake: tuple[FakeHealth, str]) -> None:
    servicer, address = fake
    servicer.hang = True
    started = time.monotonic()
    healthy, reason = healthcheck.check(address, timeout_s=0.3)
    assert not healthy
    assert "DEADLINE_EXCEEDED" in reason
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("argv", [["localhost"], ["127.0.0.1:0"], ["a:1", "b:2"]])
def test_bad_arguments_exit_1_not_the_reserved_2(argv: list[str]) -> None:
    assert healthcheck.main(argv) == 1


def test_module_runs_as_the_dockerfile_calls_it(fake: tuple[FakeHealth, str]) -> None:
    servicer, address = fake
    ran = subprocess.run(
        [sys.executable, "-m", "cluster.healthcheck", address],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ran.returncode == 0, ran.stderr
    servicer.serving = False
    ran = subprocess.run(
        [sys.executable, "-m", "cluster.healthcheck", address],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ran.returncode == 1
