"""Raft frames over a raw TCP connection per ordered node pair (the peer's `raft_listen` port),
beside the gRPC `Peer.Raft` stream, which stays the path to a peer that advertises no such port.

Why: one leader-follower exchange over the grpc.aio stream cost ~365 us against ~75 us over a
bare TCP connection on the same loop (`bench.peer_hop`), and a sync produce pays three.

Wire (integers little-endian). The dialler opens the connection (TLS first, mutual, with the
node certificates, when the node has TLS: `cluster.tls`) and sends one hello:

    "FRL1" | u8 len + from_node | u8 len + to_node | u16 len + proof

where proof is the dialler's `flotilla-peer` value, the one a gRPC call carries in metadata
(`cluster.peer_auth`). Then frames, nothing else, in one direction only:

    u32 length | the frame, exactly the bytes `cluster.frames.encode_frame` makes

No acknowledgement per frame (the gRPC stream has none either); nothing is ever sent back.

Receiving (`RaftLinkServer`): the hello is checked as a gRPC Raft stream's metadata is
(`PeerAuth.verify_call`; the proof's node must be the hello's `from_node`, `to_node` this node;
with mutual TLS the certificate must be the node certificate of that id). A connection failing
it is closed, counted in `flotilla_peer_auth_rejected_total{kind="raft"}` and logged once per
source; so is a connection whose frame claims another sender (nothing of that frame is
delivered). A frame longer than `max_message_bytes` closes the connection (logged). Frames then
go through `cluster.raft_inbox.serve_raft_stream`, as the gRPC stream's do: the same
`InboxBudget`, the same drop of a frame past it, the same `heard_from` at a new connection's
first frame. A connection that fails the TLS handshake is closed by asyncio before any of this
(not counted: gRPC does not count its failed handshakes either).

Sending (`open_link`, driven by `PeerTransport`'s sender task): frames are written with
`writelines` (length and frame, no copy where the loop can gather) and `drain` is awaited only
when the transport's buffer is past `HIGH_WATER_BYTES`, so a burst costs a syscall per frame,
not a task switch. A connection seen closed (the peer restarted) is re-dialled for the next
frame; a failed dial or write waits out the sender's backoff, cut short by `heard_from`.
TLS: a context is built per certificate generation (`TlsReloader.generation`), so a reload
applies to connections opened after it, both ways (the listener hands each handshake over to
the current context from its SNI callback: every node dials with the name `flotilla-node`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from cluster.certs import NODE_SERVER_NAME
from cluster.config import parse_address
from cluster.errors import ClusterError
from cluster.peer_auth import PeerAuth, PeerAuthError
from cluster.raft_inbox import InboxBudget, RaftHandler, serve_raft_stream
from cluster.tls import TlsReloader, identity_of

__all__ = [
    "HIGH_WATER_BYTES",
    "Hello",
    "RaftLink",
    "RaftLinkError",
    "RaftLinkServer",
    "TlsContexts",
    "encode_hello",
    "open_link",
]

log = logging.getLogger("flotilla.raft_link")

MAGIC = b"FRL1"
_HELLO_HEAD = struct.Struct("<4sBBH")  # magic, len(from), len(to), len(proof)
_LENGTH = struct.Struct("<I")
MAX_PROOF_BYTES = 512
HELLO_TIMEOUT_S = 5.0  # a dialler that says nothing (or handshakes nothing) this long is cut
CONNECT_TIMEOUT_S = 2.0
HIGH_WATER_BYTES = 1024 * 1024  # unsent bytes past which a sender awaits `drain`
READ_LIMIT_BYTES = 1024 * 1024  # the StreamReader's buffer, before it pauses the socket


class RaftLinkError(ClusterError):
    """A raw Raft connection broke its protocol (a bad hello, an oversized frame)."""


@dataclass(frozen=True, slots=True)
class Hello:
    from_node: str
    to_node: str
    proof: str


def encode_hello(from_node: str, to_node: str, proof: str) -> bytes:
    sender, target, signed = from_node.encode(), to_node.encode(), proof.encode()
    if len(sender) > 255 or len(target) > 255 or len(signed) > MAX_PROOF_BYTES:
        raise RaftLinkError(
            f"hello {from_node!r} -> {to_node!r}: node ids are at most 255 bytes, the proof "
            f"{MAX_PROOF_BYTES}"
        )
    head = _HELLO_HEAD.pack(MAGIC, len(sender), len(target), len(signed))
    return b"".join((head, sender, target, signed))


async def read_hello(reader: asyncio.StreamReader) -> Hello:
    head = await reader.readexactly(_HELLO_HEAD.size)
    magic, sender_length, target_length, proof_length = _HELLO_HEAD.unpack(head)
    if magic != MAGIC:
        raise RaftLinkError(f"hello magic {magic!r}: expected {MAGIC!r} (not a raft link peer)")
    if proof_length > MAX_PROOF_BYTES:
        raise RaftLinkError(f"hello proof of {proof_length} bytes: at most {MAX_PROOF_BYTES}")
    body = await reader.readexactly(sender_length + target_length + proof_length)
    split = sender_length + target_length
    try:
        sender = body[:sender_length].decode()
        target = body[sender_length:split].decode()
        proof = body[split:].decode()
    except UnicodeDecodeError:
        raise RaftLinkError("hello names are not UTF-8") from None
    return Hello(sender, target, proof)


class TlsContexts:
    """The node's `ssl.SSLContext`s for raw links, built from the node's TLS files and rebuilt
    when the certificate's generation changes (a reload: new connections take it)."""

    def __init__(self, tls: TlsReloader) -> None:
        self.tls = tls
        self._built: dict[bool, tuple[int, ssl.SSLContext]] = {}

    def context(self, *, server: bool) -> ssl.SSLContext:
        generation = self.tls.generation
        built = self._built.get(server)
        if built is not None and built[0] == generation:
            return built[1]
        files = self.tls.files
        material = self.tls.material
        purpose = ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT
        context = ssl.SSLContext(purpose)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(files.cert, files.key)
        context.load_verify_locations(cadata=material.ca.decode())
        if server:
            required = self.tls.client_auth
            context.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
        else:  # verify the name every node certificate carries (cluster.tls)
            context.check_hostname = True
            context.verify_mode = ssl.CERT_REQUIRED
        self._built[server] = (generation, context)
        return context

    def listener_context(self) -> ssl.SSLContext:
        """The listener's context: on each handshake (a client naming the server, as every node
        does) it hands over to the context of the current generation."""
        listener = self.context(server=True)

        def current(ssl_object: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
            latest = self.context(server=True)
            if ssl_object.context is not latest:
                ssl_object.context = latest

        listener.sni_callback = current
        return listener


class RaftLink:
    """The sending end of one raw connection (`open_link`)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def done(self) -> bool:
        """The connection has ended (the peer closed it, restarted, or refused the hello)."""
        return self.writer.is_closing() or self.reader.at_eof()

    async def write(self, frame: bytes) -> None:
        if self.done():
            raise ConnectionResetError("the raft link was closed by the peer")
        self.writer.writelines((_LENGTH.pack(len(frame)), frame))
        if self.writer.transport.get_write_buffer_size() > HIGH_WATER_BYTES:
            await self.writer.drain()

    def cancel(self) -> None:
        self.writer.close()


async def open_link(
    address: str,
    from_node: str,
    to_node: str,
    proof: str,
    tls: TlsContexts | None = None,
    timeout_s: float = CONNECT_TIMEOUT_S,
) -> RaftLink:
    """A connection to `to_node`'s raft listener at `address`, its hello sent."""
    host, port = parse_address(address, f"raft address of {to_node!r}")
    context = None if tls is None else tls.context(server=False)
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(
            host,
            port,
            ssl=context,
            server_hostname=NODE_SERVER_NAME if context is not None else None,
            limit=READ_LIMIT_BYTES,
        ),
        timeout_s,
    )
    writer.write(encode_hello(from_node, to_node, proof))
    return RaftLink(reader, writer)


class RaftLinkServer:
    """The node's raw Raft listener: frames go to `deliver` (`MultiRaft.deliver`)."""

    def __init__(
        self,
        node_id: str,
        peer_auth: PeerAuth,
        deliver: RaftHandler,
        heard_from: Callable[[str], None],
        inbox: InboxBudget,
        max_message_bytes: int,
        tls: TlsContexts | None = None,
    ) -> None:
        self.node_id = node_id
        self.peer_auth = peer_auth
        self.deliver = deliver
        self.heard_from = heard_from
        self.inbox = inbox
        self.max_message_bytes = max_message_bytes
        self.tls = tls
        self.server: asyncio.AbstractServer | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self, listen: str) -> None:
        host, port = parse_address(listen, "raft_listen")
        context = None if self.tls is None else self.tls.listener_context()
        self.server = await asyncio.start_server(
            self._accepted, host, port, limit=READ_LIMIT_BYTES, reuse_address=True,
            ssl=context, ssl_handshake_timeout=HELLO_TIMEOUT_S if context else None,
        )  # fmt: skip

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        peer = writer.get_extra_info("peername")
        source = str(peer[0]) if peer else "unknown"
        try:
            await self._serve(reader, writer, source)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the peer went away: it re-dials
        except asyncio.CancelledError:
            pass  # `close`: ends quietly (asyncio's stream callback would log it as an error)
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: str
    ) -> None:
        try:
            proven = await asyncio.wait_for(self._handshake(reader, writer), HELLO_TIMEOUT_S)
        except (
            PeerAuthError, RaftLinkError, TimeoutError, ssl.SSLError,
            asyncio.IncompleteReadError, ConnectionError,
        ) as error:  # fmt: skip
            self.peer_auth.reject("raft", source, f"raft link hello refused: {_brief(error)}")
            return
        try:
            forged = await serve_raft_stream(
                self._frames(reader, proven),
                self.node_id,
                self.deliver,
                self.heard_from,
                self.inbox,
                sender=proven,
            )
        except RaftLinkError as error:
            log.warning("closed the raft link from %s (%s): %s", proven, source, error)
            return
        if forged is not None:
            reason = f"a raft frame claiming sender {forged!r} on node {proven!r}'s link"
            self.peer_auth.reject("raft", source, reason)

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        """The node the dialler proves to be: its hello, and with mutual TLS its certificate
        (a connection that fails the TLS handshake never gets here: asyncio closes it)."""
        identity = None
        ssl_object = writer.get_extra_info("ssl_object")  # the handshake is done (start_server)
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if der:
            identity = identity_of(ssl.DER_cert_to_PEM_cert(der).encode())
        hello = await read_hello(reader)
        node_id = self.peer_auth.verify_call(hello.proof)
        if node_id != hello.from_node:
            raise PeerAuthError(
                f"a raft hello from {hello.from_node!r} carries {node_id!r}'s proof"
            )
        if hello.to_node != self.node_id:
            raise PeerAuthError(
                f"a raft hello from {node_id!r} is for {hello.to_node!r}, this is {self.node_id!r}"
            )
        self.peer_auth.check_identity(identity, node_id)
        return node_id

    async def _frames(self, reader: asyncio.StreamReader, sender: str) -> AsyncIterator[bytes]:
        while True:
            try:
                head = await reader.readexactly(_LENGTH.size)
            except asyncio.IncompleteReadError as error:
                if error.partial:
                    raise
                return  # closed between frames
            (size,) = _LENGTH.unpack(head)
            if size > self.max_message_bytes:
                raise RaftLinkError(
                    f"a frame of {size} bytes from {sender!r}: max_message_bytes="
                    f"{self.max_message_bytes}"
                )
            yield await reader.readexactly(size)


def _brief(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return f"no hello within {HELLO_TIMEOUT_S:g} s"
    if isinstance(error, asyncio.IncompleteReadError):
        return "the connection ended within the hello"
    return str(error) or type(error).__name__
