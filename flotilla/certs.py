"""Certificates for a Flotilla cluster: a small local CA, node certificates and client
certificates (`flotilla certs init|issue|client`). See `cluster.certs` for the layout and what
each certificate says; this module is the SDK's and the CLI's name for it."""

from __future__ import annotations

from cluster.certs import (
    CaPaths,
    CertError,
    CertPaths,
    LoadedCa,
    init_ca,
    issue_client,
    issue_node,
    load_ca,
)

__all__ = [
    "CaPaths",
    "CertError",
    "CertPaths",
    "LoadedCa",
    "init_ca",
    "issue_client",
    "issue_node",
    "load_ca",
]
