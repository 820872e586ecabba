"""How a client proves itself and checks the cluster: TLS files and a bearer token.

`Credentials.load(...)` takes the client's settings (`tls_ca`, `tls_cert`, `tls_key`, `token`,
`tls_server_name`), each falling back to its environment variable when not given
(`FLOTILLA_TLS_CA`, `FLOTILLA_TLS_CERT`, `FLOTILLA_TLS_KEY`, `FLOTILLA_TOKEN`; an empty value
counts as unset; an argument of "" turns its variable off). It reads the files once, at once, so
a missing or unreadable file is an error when the client is made, naming the setting, the path
and what went wrong; channels opened later use the bytes read then (a client made after a
certificate is renewed presents the new one).

The rules (InvalidArgument otherwise, before anything is sent):
- `tls_ca` (the PEM of the CA that signed the nodes' certificates) turns TLS on: every channel
  is a TLS channel that verifies the node's certificate against it, for the host name dialled
  (or `tls_server_name` when given: e.g. "flotilla-node", which every node certificate names).
- `tls_cert` and `tls_key` (the client's certificate and key, for mutual TLS) come together,
  and only with `tls_ca`.
- `token` is sent as `authorization: Bearer <token>` metadata on every call, streams included.
  Without TLS it would travel in clear, so a plaintext client sends it only to loopback
  addresses (127.0.0.0/8, ::1, localhost: a development cluster); dialling any other address
  with a token and no `tls_ca` is refused (`check_address`), naming the address.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import grpc

from flotilla.errors import InvalidArgument

__all__ = ["ENV_VARS", "Credentials", "is_loopback"]

# setting -> the environment variable it falls back to
ENV_VARS = {
    "tls_ca": "FLOTILLA_TLS_CA",
    "tls_cert": "FLOTILLA_TLS_CERT",
    "tls_key": "FLOTILLA_TLS_KEY",
    "token": "FLOTILLA_TOKEN",
}
MAX_PEM_BYTES = 1 << 20  # a certificate chain or key larger than this is not one


def is_loopback(address: str) -> bool:
    """Is `address` ("host:port") on this machine by its very name (127.0.0.0/8, ::1,
    localhost)? Names are not resolved: a name other than localhost is not loopback."""
    host = address.rpartition(":")[0] if ":" in address else address
    host = host.strip("[]")
    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(
        ".localhost"
    ):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _setting(name: str, given: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """(value, where it came from) of a setting: the argument, else its variable; "" if none."""
    if given is not None:
        return given, name
    variable = ENV_VARS[name]
    return env.get(variable, ""), f"{name} (from ${variable})"


def _read_pem(source: str, path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_PEM_BYTES + 1)
    except FileNotFoundError:
        raise InvalidArgument(f"{source} {path!r}: no such file; give the path of {what}") from None
    except IsADirectoryError:
        raise InvalidArgument(
            f"{source} {path!r} is a directory; give the path of {what}"
        ) from None
    except OSError as error:
        raise InvalidArgument(
            f"{source} {path!r} cannot be read ({error.strerror or error}); give a readable {what}"
        ) from None
    if len(data) > MAX_PEM_BYTES or b"-----BEGIN " not in data:
        raise InvalidArgument(f"{source} {path!r} is not a PEM file (no -----BEGIN line): {what}")
    return data


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a client's channels and calls carry. `ca`, `cert`, `key`: PEM bytes (None: not
    given); `token`: the bearer token ("" none); `server_name`: the name to verify the nodes'
    certificates for ("" the host dialled); `token_source`: where the token came from."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = field(default=None, repr=False)  # secrets stay out of reprs and logs
    token: str = field(default="", repr=False)
    server_name: str = ""
    token_source: str = "token"

    @classmethod
    def load(
        cls,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        token: str | None = None,
        tls_server_name: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Credentials:
        """The settings given, else from the environment (`env`, default os.environ), checked
        and their files read (see the module's rules); InvalidArgument names a bad one."""
        env = os.environ if env is None else env
        ca_path, ca_source = _setting("tls_ca", tls_ca, env)
        cert_path, cert_source = _setting("tls_cert", tls_cert, env)
        key_path, key_source = _setting("tls_key", tls_key, env)
        token_text, token_source = _setting("token", token, env)
        if bool(cert_path) != bool(key_path):
            given, missing = (cert_source, "tls_key") if cert_path else (key_source, "tls_cert")
            raise InvalidArgument(
                f"{given} is given without {missing} (${ENV_VARS[missing]}): a client "
                "certificate and its private key go together"
            )
        if cert_path and not ca_path:
            raise InvalidArgument(
                f"{cert_source} is given without tls_ca ($FLOTILLA_TLS_CA): a client certificate "
                "is for TLS, which needs the CA that signed the nodes' certificates"
            )
        if tls_server_name and not ca_path:
            raise InvalidArgument(
                f"tls_server_name={tls_server_name!r} is given without tls_ca ($FLOTILLA_TLS_CA):"
                " it names the certificate to expect, which only a TLS connection checks"
            )
        token_text = token_text.strip()
        if token_text and (any(c.isspace() for c in token_text) or not token_text.isprintable()):
            raise InvalidArgument(
                f"{token_source} contains spaces or unprintable characters: give the token as "
                "`flotilla token add` printed it (one word, e.g. flt_...)"
            )
        return cls(
            ca=_read_pem(ca_source, ca_path, "the cluster's CA certificate (PEM)")
            if ca_path
            else None,
            cert=_read_pem(cert_source, cert_path, "this client's certificate (PEM)")
            if cert_path
            else None,
            key=_read_pem(key_source, key_path, "this client's private key (PEM)")
            if key_path
            else None,
            token=token_text,
            server_name=tls_server_name or "",
            token_source=token_source,
        )

    @property
    def tls(self) -> bool:
        return self.ca is not None

    @property
    def metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The metadata every call carries (None: none)."""
        return (("authorization", f"Bearer {self.token}"),) if self.token else None

    def with_metadata(
        self, metadata: Sequence[tuple[str, str]] = ()
    ) -> tuple[tuple[str, str], ...] | None:
        """`metadata` with this client's authorization added."""
        combined = tuple(metadata) + (self.metadata or ())
        return combined or None

    def check_address(self, address: str) -> None:
        """InvalidArgument before a token would travel in clear: a plaintext client with a
        token may dial only loopback addresses."""
        if self.token and not self.tls and not is_loopback(address):
            raise InvalidArgument(
                f"refusing to send the {self.token_source} to {address} without TLS: it would "
                "cross the network in clear; give tls_ca ($FLOTILLA_TLS_CA, the cluster's CA "
                "certificate) so the connection is encrypted (a token goes over plaintext only "
                "to loopback addresses)"
            )

    def options(self, base: Sequence[tuple[str, object]]) -> list[tuple[str, object]]:
        options = list(base)
        if self.server_name:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        return options

    def _channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )

    def channel(self, address: str, base_options: Sequence[tuple[str, object]]) -> grpc.Channel:
        """A channel to `address`: TLS when a CA is given, else plaintext (checked first)."""
        self.check_address(address)
        if not self.tls:
            return grpc.insecure_channel(address, options=list(base_options))
        return grpc.secure_channel(
            address, self._channel_credentials(), options=self.options(base_options)
        )

    def aio_channel(
        self, address: str, base_options: Sequence[tuple[str, object]]
    ) -> grpc.aio.Channel:
        """The asyncio twin of `channel`."""
        self.check_address(address)
        if not self.tls:
            return grpc.aio.insecure_channel(address, options=list(base_options))
        return grpc.aio.secure_channel(
            address, self._channel_credentials(), options=self.options(base_options)
        )
