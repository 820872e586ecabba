"""Fixtures for the chaos tests: our Toxiproxy server, an echo upstream, a configured client.

Every fixture stops what it started even when the test fails; `no_leftover_threads` checks it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import toxiproxy
from toxiproxy.api import APIConsumer

from chaos.toxiproxy.echo_server import EchoServerThread
from chaos.toxiproxy.server import ServerThread

DEADLINE_S = 10.0


@pytest.fixture(autouse=True)
def no_leftover_threads() -> Iterator[None]:
    before = {thread.ident for thread in threading.enumerate()}
    yield
    leftovers = [
        thread.name
        for thread in threading.enumerate()
        if thread.ident not in before and thread.name in ("toxiproxy-server", "echo-server")
    ]
    assert not leftovers, f"threads left running: {leftovers}"


@pytest.fixture
def toxiproxy_server() -> Iterator[ServerThread]:
    with ServerThread(seed=1) as server:
        yield server


@pytest.fixture
def client(toxiproxy_server: ServerThread) -> Iterator[Any]:
    saved = (APIConsumer.host, APIConsumer.port)
    toxiproxy_client = toxiproxy.Toxiproxy()
    toxiproxy_client.update_api_consumer(toxiproxy_server.host, toxiproxy_server.port)
    try:
        yield toxiproxy_client
    finally:
        APIConsumer.host, APIConsumer.port = saved


@pytest.fixture
def echo_server() -> Iterator[EchoServerThread]:
    with EchoServerThread() as server:
        yield server


@pytest.fixture
def connect() -> Iterator[Callable[[str], socket.socket]]:
    """Open client sockets to "host:port" addresses; all are closed at teardown."""
    opened: list[socket.socket] = []

    def open_connection(address: str) -> socket.socket:
        host, _, port = address.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
        opened.append(sock)
        return sock

    try:
        yield open_connection
    finally:
        for sock in opened:
            sock.close()


def _wait_for(condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> None:
    give_up_at = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > give_up_at:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.01)  # a poll interval, not a wait for an outcome


@pytest.fixture
def wait_for() -> Callable[..., None]:
    """`wait_for(condition, what, deadline_s=10)`: poll until it holds, fail after the deadline."""
    return _wait_for
