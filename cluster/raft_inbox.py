"""Received Raft frames: their checks (`serve_raft_stream`, for the gRPC stream and the raw
TCP link alike) and the bound on the bytes they hold until the driver takes them (`InboxBudget`).

Each frame's messages go to the host's inbox (`MultiRaft.deliver`) as views into the frame, so
a frame lives until the driver's next round takes it. `InboxBudget` bounds those bytes
(`max_inbox_bytes`): a frame arriving past it is dropped, not held back. Dropping, because Raft
recovers from lost messages by itself (a leader resends what a follower lacks, a candidate asks
again at its next election timeout) and a full inbox means the driver is behind (a slow fsync),
when queued messages age fastest; holding the connection back instead would stall every group's
heartbeats on it behind the backlog and still leave the connection's window of bytes buffered.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

from cluster.frames import FrameError, parse_frame

__all__ = ["InboxBudget", "RaftHandler", "serve_raft_stream"]

log = logging.getLogger("flotilla.transport")

RaftHandler = Callable[[str, list[tuple[str, bytes | memoryview]]], None]


class InboxBudget:
    """Bytes of received Raft frames handed to the host and not yet taken by its driver:

    bytes <= max_bytes, or bytes is one frame (a frame larger than the budget still passes
    when nothing else waits, or it could never be delivered)
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.dropped = 0  # frames dropped, since the start

    def admit(self, size: int) -> bool:
        if self.bytes and self.bytes + size > self.max_bytes:
            self.dropped += 1
            return False
        self.bytes += size
        return True

    def taken(self) -> None:
        """The driver has taken every frame delivered so far (`MultiRaft.on_inputs_taken`)."""
        self.bytes = 0


async def serve_raft_stream(
    requests: AsyncIterator[bytes],
    self_id: str,
    handler: RaftHandler,
    opened: Callable[[str], None] = lambda sender: None,
    inbox: InboxBudget | None = None,
    sender: str | None = None,
) -> str | None:
    """The server side of `Peer.Raft`: hands each frame's messages to `handler(from, messages)`
    (payloads are views into the received bytes), and the sender of its first frame to
    `opened` (a new stream: the peer may have restarted). A malformed frame is dropped and
    logged, and so is a frame past the `inbox` budget (logged once per stream).

    `sender`: the node the stream's caller proved to be (`cluster.peer_auth`). A frame from
    anyone else ends the stream, delivering nothing of it: the return value is that frame's
    claimed sender (None: the stream ended normally)."""
    proven = sender
    opened_once = False  # `opened` called
    over_budget = 0
    async for data in requests:
        if inbox is not None and not inbox.admit(len(data)):
            over_budget += 1
            level = logging.WARNING if over_budget == 1 else logging.DEBUG
            log.log(
                level,
                "dropped a raft frame of %d bytes: %d bytes received wait for the driver, "
                "max_inbox_bytes=%d (%d dropped on this stream)",
                len(data),
                inbox.bytes,
                inbox.max_bytes,
                over_budget,
            )
            continue
        try:
            frame = parse_frame(data)
        except FrameError as error:
            log.warning("dropped a malformed raft frame (%d bytes): %s", len(data), error)
            continue
        if frame.to_node != self_id:
            log.warning(
                "dropped a raft frame for %r from %r (this is %r)",
                frame.to_node,
                frame.from_node,
                self_id,
            )
            continue
        if proven is not None and frame.from_node != proven:
            return frame.from_node
        if not opened_once:
            opened(frame.from_node)
            opened_once = True
        handler(frame.from_node, frame.messages)
    return None
