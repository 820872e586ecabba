"""When no node answers, the client says so in seconds, not after its whole timeout, and names
every address it tried: connection refused (or a name that does not resolve) on every bootstrap
address is not worth 15 s of retries. Real sockets: ports with nothing listening."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from cluster.local import free_port
from flotilla import Client
from flotilla import aio as flotilla_aio
from flotilla.errors import Unavailable

GIVE_UP_WITHIN_S = 6.0  # the client's timeout is 15 s: well above this


def _dead_addresses() -> list[str]:
    return [f"127.0.0.1:{free_port('127.0.0.1')}", f"127.0.0.2:{free_port('127.0.0.2')}"]


def test_every_address_refusing_fails_fast_naming_each() -> None:
    addresses = _dead_addresses()
    started = time.monotonic()
    with Client(addresses, timeout_s=15) as client, pytest.raises(Unavailable) as caught:
        client.list_topics()
    took = time.monotonic() - started
    assert took < GIVE_UP_WITHIN_S, f"gave up after {took:.1f} s"
    message = str(caught.value)
    for address in addresses:
        assert address in message, message
    assert "connection refused" in message, message


def test_a_name_that_does_not_resolve_fails_fast_too() -> None:
    started = time.monotonic()
    with (
        Client("nosuch.invalid:7001", timeout_s=15) as client,
        pytest.raises(Unavailable) as caught,
    ):
        client.list_topics()
    assert time.monotonic() - started < GIVE_UP_WITHIN_S
    assert "nosuch.invalid:7001" in str(caught.value) and "resolve" in str(caught.value)


def test_the_asyncio_client_fails_fast_too() -> None:
    addresses = _dead_addresses()

    async def attempt() -> str:
        async with flotilla_aio.Client(addresses, timeout_s=15) as client:
            try:
                await client.list_topics()
            except Unavailable as error:
                return str(error)
        raise AssertionError("list_topics answered with no node up")

    started = time.monotonic()
    message = asyncio.run(attempt())
    assert time.monotonic() - started < GIVE_UP_WITHIN_S
    assert all(address in message for address in addresses), message


def test_the_cli_fails_fast_with_one_line() -> None:
    address = _dead_addresses()[0]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "flotilla", "topic", "list", "--bootstrap", address],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert time.monotonic() - started < GIVE_UP_WITHIN_S + 3  # + the interpreter's start
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    assert address in done.stderr and "connection refused" in done.stderr, done.stderr
