"""The SDK's security settings and calls without a cluster: credentials taken from arguments or
the environment and checked (missing files, a certificate without its key, a token that would
cross the network in clear), the two security errors mapped from their gRPC codes and never
retried, the ACL/token/whoami plans (requests built, answers read, bad arguments named before
anything is sent), and both clients' channels against a bare mutual-TLS gRPC server (the
certificate and token on the wire; a mismatched CA, name, or a missing certificate named). The real handshake and the server's decisions:
tests/flotilla/test_security_sdk.py."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from harness import drive

from flotilla import aio
from flotilla._core import ClientCore, Failed, Rpc
from flotilla._credentials import Credentials, is_loopback
from flotilla._security_plans import SecurityCalls, check_binding, token_id_of
from flotilla.certs import init_ca, issue_client, issue_node
from flotilla.client import Client
from flotilla.errors import (
    AuthenticationError,
    AuthorizationError,
    FlotillaError,
    InvalidArgument,
    Unavailable,
    from_rpc_error,
)
from flotilla.types import AclBinding, Token, TokenInfo, WhoAmI
from proto import flotilla_pb2 as pb

NO_ENV: dict[str, str] = {}


class StatusError(grpc.RpcError):  # type: ignore[misc]
    """A status as a node sends it (the parts `from_rpc_error` reads)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[()]:
        return ()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    init_ca(directory)
    issue_client(directory, "alice")
    return directory


# -- credentials --------------------------------------------------------------------------------
def test_settings_fall_back_to_the_environment_and_an_argument_wins(certs: Path) -> None:
    env = {
        "FLOTILLA_TLS_CA": str(certs / "ca.pem"),
        "FLOTILLA_TLS_CERT": str(certs / "alice.pem"),
        "FLOTILLA_TLS_KEY": str(certs / "alice.key"),
        "FLOTILLA_TOKEN": "flt_from-env",
    }
    loaded = Credentials.load(env=env)
    assert loaded.tls
    assert loaded.ca == (certs / "ca.pem").read_bytes()
    assert loaded.cert == (certs / "alice.pem").read_bytes()
    assert loaded.key == (certs / "alice.key").read_bytes()
    assert loaded.metadata == (("authorization", "Bearer flt_from-env"),)
    mine = Credentials.load(token="flt_mine", env=env)
    assert mine.metadata == (("authorization", "Bearer flt_mine"),)
    # "" turns a variable off; an empty variable counts as unset
    off = Credentials.load(tls_ca="", tls_cert="", tls_key="", token="", env=env)
    assert not off.tls and off.metadata is None
    assert Credentials.load(env={"FLOTILLA_TOKEN": ""}).metadata is None
    # secrets stay out of reprs
    assert "flt_from-env" not in repr(loaded) and "PRIVATE KEY" not in repr(loaded)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"tls_ca": "/nonexistent/ca.pem"}, "tls_ca '/nonexistent/ca.pem': no such file"),
        ({"tls_ca": "{certs}"}, "is a directory"),
        ({"tls_ca": "{certs}/alice.key.txt"}, "no such file"),
        ({"tls_ca": "{certs}/junk"}, "is not a PEM file"),
        ({"tls_ca": "{certs}/ca.pem", "tls_cert": "{certs}/alice.pem"}, "without tls_key"),
        ({"tls_ca": "{certs}/ca.pem", "tls_key": "{certs}/alice.key"}, "without tls_cert"),
        ({"tls_cert": "{certs}/alice.pem", "tls_key": "{certs}/alice.key"}, "without tls_ca"),
        ({"tls_server_name": "flotilla-node"}, "without tls_ca"),
        ({"token": "flt_two words"}, "token contains spaces"),
    ],
)
def test_a_bad_setting_is_named_before_anything_is_sent(
    certs: Path, settings: dict[str, str], named: str
) -> None:
    (certs / "junk").write_text("not a certificate\n")
    given = {key: value.format(certs=certs) for key, value in settings.items()}
    with pytest.raises(InvalidArgument, match=named.replace(".", r"\.")):
        Credentials.load(**given, env=NO_ENV)
    with pytest.raises(InvalidArgument, match=named.replace(".", r"\.")):
        Client("127.0.0.1:1", **given)  # type: ignore[arg-type]


def test_an_unreadable_file_and_a_bad_variable_are_named(certs: Path) -> None:
    beneath_a_file = certs / "ca.pem" / "inside.pem"  # ENOTDIR: the OS refuses the read
    with pytest.raises(InvalidArgument, match=r"inside\.pem' cannot be read \(Not a directory"):
        Credentials.load(tls_ca=str(beneath_a_file), env=NO_ENV)
    with pytest.raises(InvalidArgument, match=r"tls_cert \(from \$FLOTILLA_TLS_CERT\)"):
        Credentials.load(env={"FLOTILLA_TLS_CERT": str(certs / "alice.pem")})


def test_a_token_goes_over_plaintext_only_to_loopback(certs: Path) -> None:
    for address in ("127.0.0.1:7001", "127.0.0.5:1", "localhost:7001", "[::1]:7001"):
        assert is_loopback(address), address
    for address in ("10.0.0.5:7001", "flotilla-1:7001", "[2001:db8::1]:7001", "0.0.0.0:7001"):
        assert not is_loopback(address), address
    with pytest.raises(InvalidArgument, match=r"refusing to send the token to 10\.0\.0\.5:7001"):
        Client("10.0.0.5:7001", token="flt_x")
    with pytest.raises(InvalidArgument, match=r"FLOTILLA_TOKEN\) to node-a:7001"):
        ClientCore(
            ["127.0.0.1:7001", "node-a:7001"],
            1,
            "all",
            Credentials.load(env={"FLOTILLA_TOKEN": "t"}),
        )
    # a member learned later is checked when its channel opens
    client = Client("127.0.0.1:1", token="flt_x", tls_ca="")
    with pytest.raises(InvalidArgument, match=r"10\.1\.1\.1:7001 without TLS"):
        client._stub("10.1.1.1:7001")
    client.close()
    # no token, or TLS: any address
    Client("10.0.0.5:7001", token="").close()
    Client("10.0.0.5:7001", token="flt_x", tls_ca=str(certs / "ca.pem")).close()


def test_the_asyncio_client_takes_the_same_settings(certs: Path) -> None:
    with pytest.raises(InvalidArgument, match="without tls_key"):
        aio.Client("127.0.0.1:1", tls_ca=str(certs / "ca.pem"), tls_cert=str(certs / "alice.pem"))
    with pytest.raises(InvalidArgument, match="refusing to send the token"):
        aio.Client("10.0.0.5:7001", token="flt_x")

    async def main() -> None:
        client = aio.Client("127.0.0.1:1", tls_ca=str(certs / "ca.pem"), token="flt_x")
        assert client._core.credentials.tls
        client._stub("127.0.0.1:1")  # a TLS channel opens (no connection until a call)
        await client.close()

    asyncio.run(main())


def test_the_batching_producer_of_the_asyncio_client_carries_its_credentials() -> None:
    client = aio.Client("127.0.0.1:1", token="flt_x", tls_ca="")
    sender = Client._over(client._core)
    assert sender._core.credentials.metadata == (("authorization", "Bearer flt_x"),)


# -- errors -------------------------------------------------------------------------------------
def test_the_security_errors_carry_the_nodes_message_and_are_never_retried() -> None:
    denied = "principal 'bob' may not consume topic 'orders.eu': no ACL allows it"
    error = from_rpc_error(StatusError(grpc.StatusCode.PERMISSION_DENIED, denied))
    assert isinstance(error, AuthorizationError) and isinstance(error, PermissionError)
    assert str(error) == denied
    unknown = "no credentials: present a client certificate or a token"
    error = from_rpc_error(StatusError(grpc.StatusCode.UNAUTHENTICATED, unknown))
    assert isinstance(error, AuthenticationError) and str(error) == unknown
    for error in (AuthenticationError("x"), AuthorizationError("y")):
        assert not isinstance(error, Unavailable)
        core = ClientCore(["127.0.0.1:1", "127.0.0.2:1"], timeout_s=10, acks="all")
        asked: list[Rpc] = []

        def refuse(rpc: Rpc, error: Exception = error, asked: list[Rpc] = asked) -> Failed:
            asked.append(rpc)
            return Failed(error, "")  # type: ignore[arg-type]

        with pytest.raises(type(error)):
            drive(core.list_topics(), refuse)
        assert len(asked) == 1  # the other node is not asked: it would say the same


# -- the calls ----------------------------------------------------------------------------------
def calls() -> tuple[SecurityCalls, list[Rpc]]:
    return SecurityCalls(ClientCore(["127.0.0.1:1"], 5, "all")), []


def test_acl_calls_build_their_requests_and_read_the_answers() -> None:
    security, sent = calls()

    def node(rpc: Rpc) -> Any:
        sent.append(rpc)
        if rpc.method == "AddAcl":
            return rpc.request
        if rpc.method == "ListAcls":
            return pb.ListAclsResponse(
                acls=[
                    pb.AclBinding(
                        principal="zed", operation="all", resource="*", permission="deny"
                    ),
                    pb.AclBinding(
                        principal="bob", operation="produce", resource="o.*", permission="allow"
                    ),
                ]
            )
        return pb.RemoveAclResponse(removed=1)

    added, _ = drive(security.add_acl("bob", "PRODUCE", "orders.*", "Allow"), node)
    assert added == AclBinding("bob", "produce", "orders.*", "allow")
    assert sent[-1].request == pb.AclBinding(
        principal="bob", operation="produce", resource="orders.*", permission="allow"
    )
    listed, _ = drive(security.list_acls(None), node)
    assert [b.principal for b in listed] == ["bob", "zed"]  # sorted
    assert sent[-1].request == pb.ListAclsRequest(principal="")
    drive(security.list_acls("bob"), node)
    assert sent[-1].request == pb.ListAclsRequest(principal="bob")
    removed, _ = drive(security.remove_acl("*", "consume", "*", "deny"), node)
    assert removed == 1 and sent[-1].method == "RemoveAcl"
    assert sent[-1].request.permission == "deny"


def test_token_and_whoami_calls() -> None:
    security, sent = calls()
    secret = "flt_" + "a" * 43
    token_id = hashlib.sha256(secret.encode()).hexdigest()[:12]

    def node(rpc: Rpc) -> Any:
        sent.append(rpc)
        return {
            "CreateToken": pb.CreateTokenResponse(principal="bob", token=secret, token_id=token_id),
            "ListTokens": pb.ListTokensResponse(
                tokens=[
                    pb.TokenInfo(principal="bob", token_id="b" * 12, created_ms=2),
                    pb.TokenInfo(principal="bob", token_id=token_id, created_ms=1),
                ]
            ),
            "RevokeToken": pb.RevokeTokenResponse(revoked=1),
            "WhoAmI": pb.WhoAmIResponse(
                principal="bob", authenticated=True, via="token", authorization=True
            ),
        }[rpc.method]

    made, _ = drive(security.create_token("bob"), node)
    assert made == Token("bob", secret, token_id) and secret not in repr(made)
    listed, _ = drive(security.list_tokens(None), node)
    assert listed == [TokenInfo("bob", token_id, 1), TokenInfo("bob", "b" * 12, 2)]
    assert drive(security.revoke_token(token_id.upper()), node)[0] == 1
    assert sent[-1].request == pb.RevokeTokenRequest(token_id=token_id)
    drive(security.revoke_token(secret), node)  # the token itself names its id
    assert sent[-1].request == pb.RevokeTokenRequest(token_id=token_id)
    assert drive(security.whoami(), node)[0] == WhoAmI("bob", True, False, "token", True)


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda s: s.add_acl("bob", "read", "orders", "allow"), "operation 'read'"),
        (lambda s: s.add_acl("bob", "produce", "orders", "maybe"), "permission 'maybe'"),
        (lambda s: s.add_acl("bob smith", "produce", "orders", "allow"), "principal 'bob smith'"),
        (lambda s: s.add_acl("", "produce", "orders", "allow"), "principal ''"),
        (lambda s: s.add_acl("bob", "produce", "", "allow"), "resource ''"),
        (lambda s: s.add_acl("bob", "produce", "or*ders", "allow"), "resource 'or\\*ders'"),
        (lambda s: s.remove_acl("bob", "write", "orders", "allow"), "operation 'write'"),
        (lambda s: s.create_token("*"), "principal '\\*'"),
        (lambda s: s.list_tokens("a/b"), "principal 'a/b'"),
        (lambda s: s.revoke_token("xyz"), "token id 'xyz'"),
    ],
)
def test_a_bad_argument_is_named_and_nothing_is_sent(call: Any, named: str) -> None:
    security, sent = calls()
    with pytest.raises(InvalidArgument, match=named):
        drive(call(security), sent.append)
    assert sent == []


def test_binding_checks_accept_what_the_contract_allows() -> None:
    assert check_binding("*", "all", "*", "deny") == AclBinding("*", "all", "*", "deny")
    assert check_binding("svc.orders-1", "consume", "orders.eu").resource == "orders.eu"
    assert token_id_of(" ABCDEF012345 ") == "abcdef012345"


# -- channels against a bare TLS server ---------------------------------------------------------
class Recorder(grpc.GenericRpcHandler):  # type: ignore[misc]
    """A gRPC server's handler that serves nothing (UNIMPLEMENTED) and notes each call's method
    and metadata: what a client put on the wire, after a real TLS handshake."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []

    def service(self, details: Any) -> None:
        self.calls.append((details.method, dict(details.invocation_metadata)))


@pytest.fixture(scope="module")
def tls_server(certs: Path) -> Iterator[tuple[str, Recorder]]:
    node = issue_node(certs, "n1")
    recorder = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(2), handlers=[recorder])
    credentials = grpc.ssl_server_credentials(
        [(node.key.read_bytes(), node.cert.read_bytes())],
        root_certificates=(certs / "ca.pem").read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield f"127.0.0.1:{port}", recorder
    finally:
        server.stop(0)


def test_a_tls_client_presents_its_certificate_and_token(
    certs: Path, tls_server: tuple[str, Recorder]
) -> None:
    address, recorder = tls_server
    mutual = {
        "tls_ca": str(certs / "ca.pem"),
        "tls_cert": str(certs / "alice.pem"),
        "tls_key": str(certs / "alice.key"),
    }
    with Client(address, timeout_s=10, token="flt_abc", **mutual) as client:
        with pytest.raises(FlotillaError, match="UNIMPLEMENTED") as refused:
            client.list_topics()  # the handshake passed: the server answered, at once
        assert not isinstance(refused.value, Unavailable)  # not retried
    assert recorder.calls[-1][0] == "/flotilla.v1.Flotilla/ListTopics"
    assert recorder.calls[-1][1]["authorization"] == "Bearer flt_abc"

    async def asyncio_client() -> None:
        async with aio.Client(address, timeout_s=10, token="flt_def", **mutual) as client:
            with pytest.raises(FlotillaError, match="UNIMPLEMENTED"):
                await client.whoami()

    asyncio.run(asyncio_client())
    assert recorder.calls[-1][0] == "/flotilla.v1.Flotilla/WhoAmI"
    assert recorder.calls[-1][1]["authorization"] == "Bearer flt_def"
    with Client(address, timeout_s=10, tls_server_name="flotilla-node", **mutual) as client:
        with pytest.raises(FlotillaError, match="UNIMPLEMENTED"):
            client.list_topics()  # the name every node certificate holds
        assert "authorization" not in recorder.calls[-1][1]


def test_a_tls_mismatch_ends_soon_and_says_what_to_check(
    certs: Path, tls_server: tuple[str, Recorder], tmp_path: Path
) -> None:
    address, recorder = tls_server
    init_ca(tmp_path)
    stranger = issue_client(tmp_path, "mallory")
    mine = {"tls_cert": str(certs / "alice.pem"), "tls_key": str(certs / "alice.key")}
    cases = [
        ({"tls_ca": str(tmp_path / "ca.pem"), "tls_cert": str(stranger.cert),
          "tls_key": str(stranger.key)}, "the node's certificate is not signed by tls_ca"),
        ({"tls_ca": str(certs / "ca.pem"), "tls_server_name": "elsewhere", **mine},
         "does not name the host dialled"),
        ({"tls_ca": ""}, "a TLS node closes a plaintext connection"),
        ({"tls_ca": str(certs / "ca.pem")}, "one without a client certificate"),
    ]  # fmt: skip
    before = len(recorder.calls)
    for settings, named in cases:
        started = time.monotonic()
        with (
            Client(address, timeout_s=30, **settings) as client,
            pytest.raises(Unavailable) as failed,
        ):
            client.list_topics()
        assert named in str(failed.value) and "check the client's TLS settings" in str(failed.value)
        assert time.monotonic() - started < 15, settings  # not the whole 30 s timeout
    assert len(recorder.calls) == before  # none reached the server's handlers
