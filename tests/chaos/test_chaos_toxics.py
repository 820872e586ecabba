"""Behaviour of our Toxiproxy proxies with a real TCP echo server behind them.

Each toxic's effect is taken from Toxiproxy v2.4.0 (toxics/*.go, link.go, proxy.go). Timing
checks assert a lower bound (a toxic cannot make data faster) and a generous upper bound.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests

from chaos.toxiproxy.echo_server import EchoServerThread
from chaos.toxiproxy.server import ServerThread
from chaos.toxiproxy.toxic_spec import Stream

Connect = Callable[[str], socket.socket]
WaitFor = Callable[..., None]
ROUND_TRIP_LIMIT_S = 5.0


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        piece = sock.recv(min(65536, size - len(data)))
        if not piece:
            raise AssertionError(f"connection closed after {len(data)} of {size} bytes")
        data += piece
    return bytes(data)


def round_trip_s(sock: socket.socket, payload: bytes = b"ping") -> float:
    started = time.monotonic()
    sock.sendall(payload)
    assert recv_exactly(sock, len(payload)) == payload
    return time.monotonic() - started


def read_until_closed(sock: socket.socket) -> tuple[bytes, str]:
    """All bytes until the peer closes, and how it closed: "eof" or "reset"."""
    data = bytearray()
    while True:
        try:
            piece = sock.recv(65536)
        except ConnectionResetError:
            return bytes(data), "reset"
        if not piece:
            return bytes(data), "eof"
        data += piece


def stream_through(
    sock: socket.socket, payload: bytes, during: Callable[[threading.Event], None] | None = None
) -> bytes:
    """Send `payload` from a thread and receive it here, while `during(done)` runs in a third
    thread (`done` is set once everything came back); return what came back."""
    errors: list[BaseException] = []
    done = threading.Event()

    def send() -> None:
        try:
            view = memoryview(payload)
            for offset in range(0, len(payload), 16384):
                sock.sendall(view[offset : offset + 16384])
        except BaseException as error:
            errors.append(error)

    def meddle() -> None:
        try:
            if during is not None:
                during(done)
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=send, name="test-sender"),
        threading.Thread(target=meddle, name="test-meddler"),
    ]
    for thread in threads:
        thread.start()
    try:
        received = recv_exactly(sock, len(payload))
    finally:
        done.set()
        for thread in threads:
            thread.join(30)
    assert not errors, errors
    return received


def make_proxy(client: Any, echo: EchoServerThread, name: str = "echo") -> Any:
    return client.create(upstream=echo.address, name=name)


def open_connections(server: ServerThread, name: str = "echo") -> int:
    async def count() -> int:
        return server.server.api.proxies[name].open_connections

    return server.call(count)


def test_bytes_pass_unchanged_on_many_connections(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    rng = random.Random(7)
    sockets = [connect(proxy.listen) for _ in range(4)]
    for sock in sockets:
        payload = rng.randbytes(512 * 1024)
        assert stream_through(sock, payload) == payload


def test_connections_are_forgotten_when_clients_close(
    client: Any,
    toxiproxy_server: ServerThread,
    echo_server: EchoServerThread,
    connect: Connect,
    wait_for: WaitFor,
) -> None:
    proxy = make_proxy(client, echo_server)
    sockets = [connect(proxy.listen) for _ in range(3)]
    for sock in sockets:
        round_trip_s(sock)
    assert open_connections(toxiproxy_server) == 3
    for sock in sockets:
        sock.close()
    wait_for(lambda: open_connections(toxiproxy_server) == 0, "connections to be forgotten")


def test_latency_adds_delay_and_updates_apply_to_open_connections(
    client: Any, toxiproxy_server: ServerThread, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    sock = connect(proxy.listen)
    assert round_trip_s(sock) < ROUND_TRIP_LIMIT_S
    proxy.add_toxic(type="latency", attributes={"latency": 200})  # added to an open connection
    assert 0.19 <= round_trip_s(sock) < ROUND_TRIP_LIMIT_S
    updated = requests.post(
        f"{toxiproxy_server.url}/proxies/echo/toxics/latency_downstream",
        json={"attributes": {"latency": 50}},
        timeout=10,
    )
    assert updated.status_code == 200
    assert 0.049 <= round_trip_s(sock) < 0.19  # the update reached the open connection
    proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 250})
    assert 0.29 <= round_trip_s(sock) < ROUND_TRIP_LIMIT_S
    fresh = connect(proxy.listen)  # a new connection starts with both toxics
    assert 0.29 <= round_trip_s(fresh) < ROUND_TRIP_LIMIT_S
    proxy.destroy_toxic("latency_upstream")
    proxy.destroy_toxic("latency_downstream")
    assert round_trip_s(sock) < 0.19
    assert round_trip_s(fresh) < 0.19


def test_toxicity_zero_never_applies(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    proxy.add_toxic(type="latency", toxicity=0.0, attributes={"latency": 1000})
    assert round_trip_s(connect(proxy.listen)) < 0.9


def test_disable_cuts_open_connections_refuses_new_ones_and_enable_restores(
    client: Any,
    toxiproxy_server: ServerThread,
    echo_server: EchoServerThread,
    connect: Connect,
) -> None:
    proxy = make_proxy(client, echo_server)
    sock = connect(proxy.listen)
    round_trip_s(sock)
    proxy.disable()
    assert read_until_closed(sock)[0] == b""
    with pytest.raises(ConnectionRefusedError):
        connect(proxy.listen)
    assert open_connections(toxiproxy_server) == 0
    proxy.enable()
    assert client.get_proxy("echo").listen == proxy.listen
    assert round_trip_s(connect(proxy.listen)) < ROUND_TRIP_LIMIT_S


def test_delete_cuts_connections_and_frees_the_port(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    sock = connect(proxy.listen)
    round_trip_s(sock)
    proxy.destroy()
    assert read_until_closed(sock)[0] == b""
    with pytest.raises(ConnectionRefusedError):
        connect(proxy.listen)


def test_timeout_zero_holds_data_until_removed(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    sock = connect(proxy.listen)
    proxy.add_toxic(type="timeout", attributes={"timeout": 0})
    sock.sendall(b"held")
    sock.settimeout(0.5)
    with pytest.raises(TimeoutError):  # nothing gets through within the wait
        sock.recv(16)
    sock.settimeout(10)
    proxy.destroy_toxic("timeout_downstream")
    # v2.4.0 closes the connections a removed timeout toxic held (TimeoutToxic.Cleanup) ...
    assert read_until_closed(sock) == (b"", "eof")
    # ... and new connections deliver again.
    assert round_trip_s(connect(proxy.listen)) < ROUND_TRIP_LIMIT_S


def test_timeout_closes_the_connection_after_the_delay(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 300})
    sock = connect(proxy.listen)
    started = time.monotonic()
    sock.sendall(b"dropped")
    assert read_until_closed(sock) == (b"", "eof")
    assert 0.25 <= time.monotonic() - started < ROUND_TRIP_LIMIT_S


def test_limit_data_closes_after_n_bytes(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    proxy.add_toxic(type="limit_data", attributes={"bytes": 1000})
    sock = connect(proxy.listen)
    payload = random.Random(3).randbytes(3000)
    sock.sendall(payload)
    data, how = read_until_closed(sock)
    assert (data, how) == (payload[:1000], "eof")


def test_reset_peer_resets_the_connection(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    proxy.add_toxic(type="reset_peer", attributes={"timeout": 100})
    sock = connect(proxy.listen)
    started = time.monotonic()
    sock.sendall(b"answer me")
    assert read_until_closed(sock) == (b"", "reset")
    assert 0.09 <= time.monotonic() - started < ROUND_TRIP_LIMIT_S


def test_bandwidth_limits_throughput(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    proxy.add_toxic(type="bandwidth", attributes={"rate": 100})  # 100 KB/s
    sock = connect(proxy.listen)
    payload = random.Random(5).randbytes(150_000)  # 1.5 s at 100 KB/s
    started = time.monotonic()
    assert stream_through(sock, payload) == payload
    assert 1.2 <= time.monotonic() - started < 15


def test_slow_close_delays_the_close(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    proxy.add_toxic(type="slow_close", attributes={"delay": 400})
    sock = connect(proxy.listen)
    round_trip_s(sock)
    started = time.monotonic()
    sock.shutdown(socket.SHUT_WR)
    assert read_until_closed(sock) == (b"", "eof")
    assert 0.35 <= time.monotonic() - started < ROUND_TRIP_LIMIT_S


def test_slicer_keeps_the_bytes(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    proxy.add_toxic(
        type="slicer", attributes={"average_size": 100, "size_variation": 40, "delay": 10}
    )
    sock = connect(proxy.listen)
    payload = random.Random(11).randbytes(40_000)
    assert stream_through(sock, payload) == payload


def test_upstream_that_refuses_closes_the_client(
    client: Any, connect: Connect, echo_server: EchoServerThread
) -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        refusing = f"127.0.0.1:{placeholder.getsockname()[1]}"  # bound, never listening
        proxy = client.create(upstream=refusing, name="nowhere")
        sock = connect(proxy.listen)
        assert read_until_closed(sock)[0] == b""


def test_rewiring_toxics_while_data_flows_loses_and_reorders_nothing(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    # A steady upstream limit keeps data in flight (about 1 s) while the downstream chain churns.
    proxy.add_toxic(type="bandwidth", name="steady", stream="upstream", attributes={"rate": 1000})
    sock = connect(proxy.listen)
    payload = random.Random(13).randbytes(1024 * 1024)
    rounds_done: list[int] = []

    def churn(done: threading.Event) -> None:
        for round_number in range(200):
            if done.is_set():
                break
            # "slow" first and slower than "steady": the reader waits on it with data in hand.
            proxy.add_toxic(type="bandwidth", name="slow", attributes={"rate": 700})
            proxy.add_toxic(type="latency", name="lag", attributes={"latency": 2})
            proxy.add_toxic(type="slicer", name="cut", attributes={"average_size": 4096})
            removal_order = ["slow", "cut", "lag"] if round_number % 2 else ["lag", "slow", "cut"]
            for name in removal_order:
                proxy.destroy_toxic(name)
            rounds_done.append(round_number)

    assert stream_through(sock, payload, churn) == payload
    assert len(rounds_done) >= 3, "the chain was not rewired while data flowed"


def test_removing_the_toxic_a_paused_reader_waits_on_keeps_its_data(
    client: Any,
    toxiproxy_server: ServerThread,
    echo_server: EchoServerThread,
    connect: Connect,
    wait_for: WaitFor,
) -> None:
    proxy = make_proxy(client, echo_server)
    proxy.add_toxic(type="bandwidth", name="slow", attributes={"rate": 50})
    sock = connect(proxy.listen)
    payload = random.Random(17).randbytes(400_000)

    async def reader_paused() -> bool:
        connections = toxiproxy_server.server.api.proxies["echo"].connections()
        return any(each.links[Stream.DOWNSTREAM].reader_paused for each in connections)

    def remove_once_the_reader_waits(done: threading.Event) -> None:
        wait_for(lambda: toxiproxy_server.call(reader_paused), "the reader to pause")
        proxy.destroy_toxic("slow")

    assert stream_through(sock, payload, remove_once_the_reader_waits) == payload


def test_reset_removes_toxics_from_open_connections(
    client: Any, echo_server: EchoServerThread, connect: Connect
) -> None:
    proxy = make_proxy(client, echo_server)
    proxy.add_toxic(type="latency", attributes={"latency": 300})
    sock = connect(proxy.listen)
    assert round_trip_s(sock) >= 0.29
    proxy.disable()
    assert client.reset() is True
    sock = connect(proxy.listen)
    assert round_trip_s(sock) < 0.29
