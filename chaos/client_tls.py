"""The TLS settings every client of a chaos run uses: the workloads' threads, the nemesis, the
checkers' readers and the member processes (given as `--tls-ca/--tls-cert/--tls-key`).

A chaos run is TLS by default, as every other way of starting a cluster (`flotilla dev`, `make
demo`, compose): the harness's `LocalCluster(tls=True)` makes a CA, node certificates and the
`admin` client certificate, and this carries the client's three files. Toxiproxy sits on the
node-to-node links and forwards TCP, so TLS passes through it unchanged. `ClientTls()` (no
files) is a plaintext run (`--no-tls`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from flotilla import Client

__all__ = ["PLAINTEXT", "ClientTls"]


@dataclass(frozen=True, slots=True)
class ClientTls:
    ca: str = ""  # PEM file of the cluster's CA; "" = plaintext
    cert: str = ""  # the client certificate (PEM)
    key: str = ""  # its key (PEM)

    @property
    def enabled(self) -> bool:
        return bool(self.ca)

    def client_kwargs(self) -> dict[str, str]:
        """Keyword arguments of `Client` / `AsyncClient` (none when plaintext)."""
        if not self.enabled:
            return {}
        return {"tls_ca": self.ca, "tls_cert": self.cert, "tls_key": self.key}

    def client(self, bootstrap: Sequence[str], *, timeout_s: float) -> Client:
        return Client(
            list(bootstrap),
            timeout_s=timeout_s,
            tls_ca=self.ca or None,
            tls_cert=self.cert or None,
            tls_key=self.key or None,
        )

    def argv(self) -> list[str]:
        """The flags `add_arguments` reads back, for a member process's command line."""
        if not self.enabled:
            return []
        return ["--tls-ca", self.ca, "--tls-cert", self.cert, "--tls-key", self.key]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--tls-ca", default="", help="the cluster CA (PEM); none: plaintext")
        parser.add_argument("--tls-cert", default="", help="the client certificate (PEM)")
        parser.add_argument("--tls-key", default="", help="the client certificate's key (PEM)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ClientTls:
        return cls(args.tls_ca, args.tls_cert, args.tls_key)


PLAINTEXT = ClientTls()  # no TLS: a `--no-tls` run, or a cluster started without it
