"""The channels a node dials its peers (and itself) with: TLS when the node has it
(`cluster.tls`), and every call signed with the node's `flotilla-peer` proof (`cluster.peer_auth`).

`SignedChannel` wraps a `grpc.aio.Channel` and adds the metadata to every call made through it,
whatever its kind (Raft streams, SWIM, and the client-API calls a node makes for itself:
topic forwards, delayed forwards, queue source reads, dead-letter copies), so no caller can
forget it. It costs one tuple per call (the proof itself is reused for a second): cheaper than
a gRPC client interceptor, which runs each call through an extra task.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc
import grpc.aio

from cluster.peer_auth import PEER_KEY
from cluster.tls import TlsReloader, peer_channel_options

__all__ = ["SignedChannel", "dial"]


class _SignedCallable:
    """A multi-callable whose calls carry the proof (added to any metadata the caller gives)."""

    __slots__ = ("_callable", "_sign")

    def __init__(self, callable_: Any, sign: Callable[[], str]) -> None:
        self._callable = callable_
        self._sign = sign

    def __call__(
        self, *args: Any, metadata: Sequence[tuple[str, str]] | None = None, **kwargs: Any
    ) -> Any:
        proof = (PEER_KEY, self._sign())
        signed = (*tuple(metadata), proof) if metadata else (proof,)
        return self._callable(*args, metadata=signed, **kwargs)


class SignedChannel(grpc.aio.Channel):  # type: ignore[misc]
    def __init__(self, channel: grpc.aio.Channel, sign: Callable[[], str]) -> None:
        self.channel = channel
        self._sign = sign

    async def __aenter__(self) -> SignedChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.channel.close(None)

    async def close(self, grace: float | None = None) -> None:
        await self.channel.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self.channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self.channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self.channel.channel_ready()

    def unary_unary(self, method: str, request_serializer: Any = None, response_deserializer: Any = None, _registered_method: bool | None = False) -> Any:  # fmt: skip
        inner = self.channel.unary_unary(
            method, request_serializer, response_deserializer, _registered_method
        )
        return _SignedCallable(inner, self._sign)

    def unary_stream(self, method: str, request_serializer: Any = None, response_deserializer: Any = None, _registered_method: bool | None = False) -> Any:  # fmt: skip
        inner = self.channel.unary_stream(
            method, request_serializer, response_deserializer, _registered_method
        )
        return _SignedCallable(inner, self._sign)

    def stream_unary(self, method: str, request_serializer: Any = None, response_deserializer: Any = None, _registered_method: bool | None = False) -> Any:  # fmt: skip
        inner = self.channel.stream_unary(
            method, request_serializer, response_deserializer, _registered_method
        )
        return _SignedCallable(inner, self._sign)

    def stream_stream(self, method: str, request_serializer: Any = None, response_deserializer: Any = None, _registered_method: bool | None = False) -> Any:  # fmt: skip
        inner = self.channel.stream_stream(
            method, request_serializer, response_deserializer, _registered_method
        )
        return _SignedCallable(inner, self._sign)


def dial(
    address: str,
    options: list[tuple[str, Any]],
    sign: Callable[[], str] | None,
    tls: TlsReloader | None,
) -> grpc.aio.Channel:
    """A channel to a peer at `address`: TLS with the node's certificate if `tls`, every call
    signed if `sign`."""
    if tls is not None:
        channel = grpc.aio.secure_channel(
            address, tls.channel_credentials(), options=[*options, *peer_channel_options()]
        )
    else:
        channel = grpc.aio.insecure_channel(address, options=options)
    return channel if sign is None else SignedChannel(channel, sign)
