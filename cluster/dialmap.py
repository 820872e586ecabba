"""The dial map: member id -> the address to dial, overriding advertised addresses.

A chaos run writes a JSON object `{"<member id>": "host:port", "<member id>/raft": "host:port"}`
so that every directed link goes through its own Toxiproxy proxy: `<id>` for the member's gRPC
port, `<id>/raft` for its raw Raft port (`cluster.raft_link`). A file naming `<id>` without
`<id>/raft` (written before raft ports existed) sends Raft to that member over the gRPC address
it names (`PeerTransport.raft_route`), so its proxy still cuts Raft. The file is re-read when its modification time or size changes
(looked at no more than every `RECHECK_S`: the transport asks before every frame it writes);
members absent from it are dialled at their advertised address. A malformed file is reported and
the previous map kept, so a half-written file never breaks routing.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping

from cluster.config import ConfigError, parse_address

__all__ = ["DialMap"]

log = logging.getLogger("flotilla.dialmap")

RECHECK_S = 0.2


class DialMap:
    def __init__(
        self,
        path: str = "",
        *,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.recheck_s = recheck_s
        self.clock = clock
        self._checked_at: float | None = None
        self._stamp: tuple[int, int] | None = None
        self._routes: dict[str, str] = {}

    def address_for(self, member_id: str, advertised: str) -> str:
        self._refresh()
        return self._routes.get(member_id, advertised)

    def routes(self) -> dict[str, str]:
        self._refresh()
        return dict(self._routes)

    def routes_view(self) -> Mapping[str, str]:
        """The routes, not copied (read them, never change them): asked before every frame."""
        self._refresh()
        return self._routes

    def _refresh(self) -> None:
        if not self.path:
            return
        now = self.clock()
        if self._checked_at is not None and now - self._checked_at < self.recheck_s:
            return
        self._checked_at = now
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            if self._routes:
                log.warning("dial map %s disappeared; dialling advertised addresses", self.path)
            self._stamp, self._routes = None, {}
            return
        stamp = (status.st_mtime_ns, status.st_size)
        if stamp == self._stamp:
            return
        try:
            with open(self.path, "rb") as file:
                data = json.load(file)
            if not isinstance(data, dict):
                raise ConfigError("the dial map must be a JSON object of id -> HOST:PORT")
            for member_id, address in data.items():
                if not isinstance(address, str):
                    raise ConfigError(f"dial map entry {member_id!r}: {address!r} is not a string")
                parse_address(address, f"dial map entry {member_id!r}")
        except (OSError, ValueError) as error:
            log.warning("dial map %s ignored (keeping the previous one): %s", self.path, error)
            return
        self._stamp, self._routes = stamp, dict(data)
