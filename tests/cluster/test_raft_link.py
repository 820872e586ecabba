"""The raw TCP Raft link (cluster/raft_link.py) in one process, on real loopback sockets: frames
go through `PeerTransport` to a `RaftLinkServer`; a connection whose hello fails the peer proof
(another cluster's secret, another node's proof, another target, no node certificate under
mutual TLS) or whose frame claims another sender is refused, counted and delivers nothing; an
oversized frame closes the link; routes fall back to the gRPC stream for a peer advertising no
raft port and for a dial map without `<id>/raft`; a restarted peer is re-dialled at once."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from cluster.certs import init_ca, issue_client, issue_node
from cluster.dialmap import DialMap
from cluster.frames import encode_frame
from cluster.local import RAFT_TRANSPORT_ENV, LocalCluster
from cluster.peer_auth import PeerAuth
from cluster.raft_link import RaftLink, RaftLinkServer, TlsContexts, encode_hello, open_link
from cluster.tls import TlsFiles, TlsReloader
from cluster.transport import InboxBudget, PeerTransport, TransportLimits

SECRET = "raft-link-secret"
SLOW = 60.0  # a reconnect backoff far longer than any deadline below


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.01)


class Receiver:
    """Node b's raw listener, recording what it delivers."""

    def __init__(self, tls: TlsReloader | None = None, max_message_bytes: int = 1 << 20) -> None:
        self.auth = PeerAuth("b", SECRET, require_node_certificate=tls is not None)
        self.received: list[tuple[str, bytes]] = []
        self.heard: list[str] = []
        self.address = f"127.0.0.1:{_free_port()}"
        contexts = None if tls is None else TlsContexts(tls)
        self.server = RaftLinkServer(
            "b", self.auth, self._deliver, self.heard.append, InboxBudget(1 << 24),
            max_message_bytes, contexts,
        )  # fmt: skip

    def _deliver(self, sender: str, messages: list[tuple[str, bytes | memoryview]]) -> None:
        self.received.extend((sender, bytes(payload)) for _, payload in messages)

    @property
    def rejected(self) -> int:
        return self.auth.rejected["raft"]


def run(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """The async test `test` as a sync one (no asyncio plugin), given a started `Receiver` when
    it asks for `receiver`."""

    @functools.wraps(test)
    def sync(**kwargs: Any) -> None:
        async def body() -> None:
            if "receiver" not in inspect.signature(test).parameters:
                await test(**kwargs)
                return
            peer = Receiver()
            await peer.server.start(peer.address)
            try:
                await test(receiver=peer, **kwargs)
            finally:
                await peer.server.close()

        asyncio.run(body())

    signature = inspect.signature(test)
    wanted = [p for p in signature.parameters.values() if p.name != "receiver"]
    sync.__signature__ = signature.replace(parameters=wanted)  # type: ignore[attr-defined]
    return sync


def _frame(sender: str, payload: bytes, to: str = "b") -> bytes:
    return encode_frame(1, sender, to, [(b"t/0", [payload], len(payload))])


def _sender(node_id: str, secret: str = SECRET) -> str:
    return PeerAuth(node_id, secret).sign_call()


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _send_raw(address: str, hello: bytes, *frames: bytes) -> Connection:
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(hello)
    for frame in frames:
        writer.write(struct.pack("<I", len(frame)) + frame)
    await writer.drain()
    return reader, writer


async def _closed_by_peer(connection: Connection) -> None:
    reader, writer = connection
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the receiver closed it
    writer.close()


@run
async def test_transport_sends_over_the_raw_link_when_the_peer_advertises_one(
    receiver: Receiver,
) -> None:
    auth = PeerAuth("a", SECRET)
    transport = PeerTransport(
        "a", DialMap(), {"b": "127.0.0.1:1"}.get, sign=auth.sign_call,
        advertised_raft={"b": receiver.address}.get,
    )  # fmt: skip
    try:
        assert transport.raft_route("b") == ("tcp", receiver.address)
        for number in range(50):
            transport.send_raft("b", "t/0", [b"m%d" % number])
        await _until(lambda: len(receiver.received) == 50, "50 messages over the raw link")
        assert receiver.received == [("a", b"m%d" % n) for n in range(50)]  # in order
        assert receiver.heard == ["a"]
        assert receiver.rejected == 0
    finally:
        await transport.close()


# each hello is made when its test runs (a proof carries its time: one made at collection may
# have expired by then, refused for that instead of what the case is about), and the ids are
# fixed strings, so that every xdist worker collects the same tests
_BAD_HELLOS: dict[str, tuple[Callable[[], bytes], str]] = {
    "another cluster's secret": (
        lambda: encode_hello("a", "b", _sender("a", "another-secret")),
        "a",
    ),
    "node c's proof, claiming a": (lambda: encode_hello("a", "b", _sender("c")), "c"),
    "a hello for node c": (lambda: encode_hello("a", "c", _sender("a")), "a"),
    "a malformed proof": (lambda: encode_hello("a", "b", "a.1.00"), "a"),
    "not a raft link peer": (lambda: b"GET / HTTP/1.1\r\n\r\n", "a"),
}


@pytest.mark.parametrize("why", list(_BAD_HELLOS))
@run
async def test_a_bad_hello_is_refused_and_delivers_nothing(receiver: Receiver, why: str) -> None:
    make_hello, sender = _BAD_HELLOS[why]
    connection = await _send_raw(receiver.address, make_hello(), _frame(sender, b"forged"))
    await _closed_by_peer(connection)
    assert receiver.rejected == 1, why
    assert receiver.received == [], why
    assert receiver.heard == [], why


@run
async def test_a_frame_claiming_another_sender_ends_the_link(receiver: Receiver) -> None:
    hello = encode_hello("a", "b", _sender("a"))
    connection = await _send_raw(
        receiver.address, hello, _frame("a", b"first"), _frame("c", b"forged"),
        _frame("a", b"after"),
    )  # fmt: skip
    await _closed_by_peer(connection)
    assert receiver.received == [("a", b"first")]  # nothing of the forged frame, nor after it
    assert receiver.rejected == 1


@run
async def test_an_oversized_frame_closes_the_link(tmp_path: Path) -> None:
    peer = Receiver(max_message_bytes=1000)
    await peer.server.start(peer.address)
    try:
        hello = encode_hello("a", "b", _sender("a"))
        connection = await _send_raw(
            peer.address, hello, _frame("a", b"small"), _frame("a", b"x" * 2000)
        )
        await _closed_by_peer(connection)
        assert peer.received == [("a", b"small")]
    finally:
        await peer.server.close()


@run
async def test_routes_fall_back_to_grpc(tmp_path: Path) -> None:
    dial_map = tmp_path / "dial.json"
    raft_addresses = {"b": "127.0.0.2:9001"}
    transport = PeerTransport(
        "a", DialMap(str(dial_map), recheck_s=0), {"b": "127.0.0.2:9000", "c": "127.0.0.3:9000"}.get,
        advertised_raft=raft_addresses.get,
    )  # fmt: skip
    # a peer advertising no raft port (an earlier release): the gRPC stream
    assert transport.raft_route("c") == ("grpc", "127.0.0.3:9000")
    assert transport.raft_route("b") == ("tcp", "127.0.0.2:9001")
    # a dial map from before raft ports: its proxy carries Raft, over gRPC
    dial_map.write_text(json.dumps({"b": "127.0.0.1:20001"}))
    assert transport.raft_route("b") == ("grpc", "127.0.0.1:20001")
    # with a /raft route: the raw link through that proxy
    dial_map.write_text(json.dumps({"b": "127.0.0.1:20001", "b/raft": "127.0.0.1:20002"}))
    assert transport.raft_route("b") == ("tcp", "127.0.0.1:20002")
    await transport.close()


@run
async def test_a_restarted_peer_is_redialled_at_once_when_heard_from() -> None:
    peer = Receiver()
    await peer.server.start(peer.address)
    limits = TransportLimits(reconnect_initial_s=SLOW, reconnect_max_s=SLOW)
    transport = PeerTransport(
        "a", DialMap(), {"b": "127.0.0.1:1"}.get, limits, sign=PeerAuth("a", SECRET).sign_call,
        advertised_raft={"b": peer.address}.get,
    )  # fmt: skip
    try:
        transport.send_raft("b", "t/0", [b"before"])
        await _until(lambda: len(peer.received) == 1, "the first message")
        await peer.server.close()  # b stops: its connections close
        transport.send_raft("b", "t/0", [b"lost"])  # finds the link closed: backoff of SLOW
        await asyncio.sleep(0.2)
        peer.server = RaftLinkServer(
            "b", peer.auth, peer._deliver, peer.heard.append, InboxBudget(1 << 24), 1 << 20
        )
        await peer.server.start(peer.address)
        transport.heard_from("b")  # b's gossip or Raft reaches a

        def delivered() -> bool:
            transport.send_raft("b", "t/0", [b"after"])
            return ("a", b"after") in peer.received

        await _until(delivered, "a message to the restarted peer, well before the backoff ends")
    finally:
        await transport.close()
        await peer.server.close()


@run
async def test_a_peer_restarted_while_the_link_was_idle_is_redialled_by_the_next_message() -> None:
    peer = Receiver()
    await peer.server.start(peer.address)
    limits = TransportLimits(reconnect_initial_s=SLOW, reconnect_max_s=SLOW)
    transport = PeerTransport(
        "a", DialMap(), {"b": "127.0.0.1:1"}.get, limits, sign=PeerAuth("a", SECRET).sign_call,
        advertised_raft={"b": peer.address}.get,
    )  # fmt: skip
    try:
        transport.send_raft("b", "t/0", [b"before"])
        await _until(lambda: len(peer.received) == 1, "the first message")
        await peer.server.close()  # b restarts while a has nothing to send
        peer.server = RaftLinkServer(
            "b", peer.auth, peer._deliver, peer.heard.append, InboxBudget(1 << 24), 1 << 20
        )
        await peer.server.start(peer.address)
        await asyncio.sleep(0.1)  # a's link has seen the end of b's side
        transport.send_raft("b", "t/0", [b"after"])  # a new link, not a failed write's backoff
        await _until(lambda: ("a", b"after") in peer.received, "the message after the restart")
    finally:
        await transport.close()
        await peer.server.close()


# -- TLS ---------------------------------------------------------------------------------------------


def _tls(directory: Path, node_id: str) -> TlsReloader:
    paths = issue_node(directory, node_id)
    return TlsReloader(TlsFiles(str(paths.ca), str(paths.cert), str(paths.key)))


@run
async def test_tls_link_delivers_and_wants_the_node_certificate_of_the_sender(
    tmp_path: Path,
) -> None:
    init_ca(tmp_path)
    peer = Receiver(tls=_tls(tmp_path, "b"))
    await peer.server.start(peer.address)
    a_tls = TlsContexts(_tls(tmp_path, "a"))
    try:
        link = await open_link(peer.address, "a", "b", _sender("a"), a_tls)
        await link.write(_frame("a", b"over tls"))
        await _until(lambda: peer.received == [("a", b"over tls")], "a frame over TLS")
        link.cancel()
        # node c's certificate, claiming a (with a's proof: the secret leaked, not the key)
        c_tls = TlsContexts(_tls(tmp_path, "c"))
        link = await open_link(peer.address, "a", "b", _sender("a"), c_tls)
        await link.write(_frame("a", b"as c"))
        await _until(lambda: peer.rejected == 1, "the link with c's certificate refused")
        # a client certificate: not a node's
        client = issue_client(tmp_path, "admin")
        reloader = TlsReloader(TlsFiles(str(client.ca), str(client.cert), str(client.key)))
        link = await open_link(peer.address, "a", "b", _sender("a"), TlsContexts(reloader))
        await link.write(_frame("a", b"as a client"))
        await _until(lambda: peer.rejected == 2, "the link with a client certificate refused")
        # plain TCP to a TLS listener: no handshake, no hello (closed before it is read)
        connection = await _send_raw(
            peer.address, encode_hello("a", "b", _sender("a")), _frame("a", b"in clear")
        )
        await _closed_by_peer(connection)
        assert peer.received == [("a", b"over tls")]
        assert peer.heard == ["a"]
    finally:
        await peer.server.close()


def _served_serial(link: RaftLink) -> int:
    der = link.writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return int(x509.load_der_x509_certificate(der).serial_number)


@run
async def test_a_reloaded_certificate_serves_new_links_and_old_ones_go_on(tmp_path: Path) -> None:
    init_ca(tmp_path)
    b_tls = _tls(tmp_path, "b")
    peer = Receiver(tls=b_tls)
    await peer.server.start(peer.address)
    a_tls = TlsContexts(_tls(tmp_path, "a"))
    try:
        before = await open_link(peer.address, "a", "b", _sender("a"), a_tls)
        assert _served_serial(before) == b_tls.material.serial
        issue_node(tmp_path, "b")  # rotation: a new certificate under the same file names
        assert b_tls.reload()
        after = await open_link(peer.address, "a", "b", _sender("a"), a_tls)
        assert _served_serial(after) == b_tls.material.serial != _served_serial(before)
        await before.write(_frame("a", b"old link"))
        await after.write(_frame("a", b"new link"))
        await _until(lambda: len(peer.received) == 2, "a frame on each link")
        before.cancel()
        after.cancel()
    finally:
        await peer.server.close()


def test_local_clusters_take_raft_on_a_raw_port_unless_the_switch_says_grpc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`FLOTILLA_RAFT_TRANSPORT=grpc` (benchmarks' A/B switch) starts local nodes without a raft
    port, so Raft rides the gRPC port; by default each gets one (binds nothing, starts nothing)."""
    monkeypatch.delenv(RAFT_TRANSPORT_ENV, raising=False)
    default = LocalCluster(tmp_path / "tcp", 1)
    spec = default.nodes["n1"]
    command = default.command(spec)
    assert spec.raft_port
    assert command[command.index("--raft-listen") + 1] == spec.raft_address
    monkeypatch.setenv(RAFT_TRANSPORT_ENV, "grpc")
    cluster = LocalCluster(tmp_path / "grpc", 1)
    assert cluster.nodes["n1"].raft_port == 0
    assert "--raft-listen" not in cluster.command(cluster.nodes["n1"])
    based = LocalCluster(tmp_path / "based", 1, base_port=7001, raft_link=True).nodes["n1"]
    assert based.raft_address == "127.0.0.1:7201"
