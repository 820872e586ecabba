"""What both clients' constructors do (`flotilla.client.Client`, `flotilla.aio.Client`): load
the credentials (`flotilla._credentials`), build the core the client's plans share (router,
producer ids and sequences) and start with no channel open. One constructor, inherited by both,
so the two take the same arguments by construction (tests/flotilla/test_client_surface.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Generic, TypeVar

from flotilla._core import ClientCore
from flotilla._credentials import Credentials
from flotilla._router import Router
from proto import flotilla_pb2_grpc

__all__ = ["ClientSetup"]

C = TypeVar("C")  # the client's channel type: grpc.Channel, grpc.aio.Channel


class ClientSetup(Generic[C]):
    """The state a client starts with; see `flotilla.Client` for the arguments."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        timeout_s: float = 15.0,
        acks: str = "all",
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        token: str | None = None,
        tls_server_name: str | None = None,
    ) -> None:
        """Connects to the cluster at `bootstrap` lazily: the TLS files are read now (a missing
        or unreadable one is an InvalidArgument naming it), channels open on first use."""
        credentials = Credentials.load(tls_ca, tls_cert, tls_key, token, tls_server_name)
        self._core = ClientCore(bootstrap, timeout_s, acks, credentials)
        self.router: Router = self._core.router
        self.timeout_s = timeout_s
        self.acks = self._core.acks
        self._channels: dict[str, C] = {}
        self._stubs: dict[str, flotilla_pb2_grpc.FlotillaStub] = {}  # one per channel: cheap calls
        self._stub_lock = threading.Lock()  # the sync client's threads share its channels
