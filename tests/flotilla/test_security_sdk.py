"""The SDK and CLI against real nodes that enforce ACLs: a cluster with tokens (three nodes, one
controller, authorization on, a bootstrap token for the `admin` superuser; tokens over loopback,
no TLS), and a two-node cluster with mutual TLS (ACLs on because TLS is; clients named by their
certificates; the admin certificate a superuser's).

What is checked here is the client's side: the token reaches the node on every kind of call
(unary, the Subscribe stream, the batching producer's threads, a consumer's heartbeats and
commits, the asyncio client and its producer); the node's refusals come back as
AuthenticationError / AuthorizationError carrying its message, at once (never retried); the
security calls and the CLI's acl, token, whoami and status.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import aio, cli
from flotilla.certs import issue_client
from flotilla.client import Client
from flotilla.errors import AuthenticationError, AuthorizationError, FlotillaError, Unavailable
from flotilla.types import AclBinding, TokenInfo

pytestmark = pytest.mark.integration

BOOTSTRAP = "flt_bootstrap-for-the-sdk-security-tests-0123456789"
REFUSED_AT_ONCE_S = 3.0  # a refusal is not retried: well under the clients' 15 s timeout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    env = {"FLOTILLA_AUTHORIZATION": "on", "FLOTILLA_BOOTSTRAP_TOKEN": BOOTSTRAP}
    with LocalCluster(tmp_path_factory.mktemp("sdk-security"), 3, controllers=1, env=env) as local:
        local.start()
        yield local


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap, timeout_s=30, token=BOOTSTRAP) as client:
        for name in ("orders.eu", "payments"):
            client.create_topic(name, partitions=2, replication_factor=3)
        yield client


def everywhere(cluster: LocalCluster, token: str, check: Callable[[Client], object]) -> None:
    """Waits until `check` passes on every node for a client with `token` (a non-controller
    node learns new tokens and ACLs within a poll)."""
    for node in cluster.nodes.values():

        def passes(address: str = node.address) -> bool:
            with Client(address, timeout_s=5, token=token) as client:
                try:
                    check(client)
                    return True
                except (AuthenticationError, AuthorizationError):
                    return False

        wait_until(passes, what=f"the change seen at {node.address}")


def refused_at_once(kind: type[FlotillaError], call: Callable[[], object]) -> FlotillaError:
    started = time.monotonic()
    with pytest.raises(kind) as caught:
        call()
    assert time.monotonic() - started < REFUSED_AT_ONCE_S, "a refusal was retried"
    return caught.value


@pytest.fixture(scope="module")
def bob(cluster: LocalCluster, admin: Client) -> str:
    """A token for bob, allowed only to produce on orders.*."""
    assert admin.add_acl("bob", "produce", "orders.*") == AclBinding(
        "bob", "produce", "orders.*", "allow"
    )
    made = admin.create_token("bob")
    assert made.principal == "bob" and made.token.startswith("flt_")
    everywhere(
        cluster, made.token, lambda c: c.produce("orders.eu", b"warm-up", key=b"k", partition=0)
    )
    return made.token


def test_no_token_or_an_unknown_one_is_unauthenticated_at_once(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap, token="") as anonymous:
        error = refused_at_once(AuthenticationError, anonymous.list_topics)
        assert "no credentials: present a client certificate" in str(error)
        who = anonymous.whoami()  # any caller may ask
        assert (who.authenticated, who.principal, who.authorization) == (False, "", True)
    with Client(cluster.bootstrap, token="flt_" + "x" * 43) as stranger:
        error = refused_at_once(AuthenticationError, lambda: stranger.produce("payments", b"v"))
        assert "is not known to the cluster" in str(error) and "x" * 10 not in str(error)


def test_a_producer_on_a_prefix_may_produce_there_and_nothing_else(
    cluster: LocalCluster, admin: Client, bob: str
) -> None:
    with Client(cluster.bootstrap, token=bob) as client:
        assert client.whoami().principal == "bob" and client.whoami().via == "token"
        written = client.produce("orders.eu", b"one", key=b"k")
        with client.producer(linger_ms=1) as producer:  # its sender threads carry the token
            futures = [producer.send("orders.eu", b"%d" % n, partition=1) for n in range(20)]
            producer.flush()
        assert [f.result().partition for f in futures] == [1] * 20
        error = refused_at_once(
            AuthorizationError, lambda: client.read("orders.eu", written.partition)
        )
        assert str(error) == (
            "principal 'bob' may not consume from topic 'orders.eu': no ACL allows it"
        )
        assert isinstance(error, PermissionError)
        refused_at_once(
            AuthorizationError,
            lambda: next(client.subscribe("orders.eu", stop_after_idle_s=1)),
        )
        error = refused_at_once(AuthorizationError, lambda: client.delete_topic("orders.eu"))
        assert "may not administer topic 'orders.eu'" in str(error)
        refused_at_once(AuthorizationError, lambda: client.produce("payments", b"v"))
        with client.consumer("g", "orders.eu") as consumer:  # its heartbeat is refused
            error = refused_at_once(AuthorizationError, lambda: consumer.poll(1, timeout_s=2))
            assert str(error) == (
                "principal 'bob' may not consume from topic 'orders.eu': no ACL allows it"
            )
        with client.queue("q", "orders.eu") as receiver:  # its join is refused
            refused_at_once(AuthorizationError, lambda: receiver.receive(1, timeout_s=2))
        refused_at_once(AuthorizationError, client.list_acls)
        refused_at_once(AuthorizationError, lambda: client.create_token("bob"))
    assert "orders.eu" in admin.list_topics()  # nothing changed
    assert len(admin.read("orders.eu", 1, 0)) >= 20


def test_a_consumer_subscriber_and_asyncio_client_carry_the_token(
    cluster: LocalCluster, admin: Client
) -> None:
    admin.add_acl("carol", "all", "payments")
    carol = admin.create_token("carol").token
    everywhere(cluster, carol, lambda c: c.read("payments", 0, 0))
    with Client(cluster.bootstrap, token=carol) as client:
        sent = [client.produce("payments", b"p%d" % n, partition=0) for n in range(3)]
        streamed = client.subscribe("payments", 0, sent[0].offset, stop_after_idle_s=2)
        assert [r.value for r in streamed][:3] == [b"p0", b"p1", b"p2"]
        with client.consumer("carol-group", "payments") as consumer:  # heartbeats, commits
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < 3 and time.monotonic() < deadline:
                got += [r.value for r in consumer.poll(100, timeout_s=1)]
            consumer.commit()
            assert got[:3] == [b"p0", b"p1", b"p2"]
            assert consumer.committed("payments", 0) == sent[-1].offset + 1
        with client.queue("carol-queue", "payments") as receiver:  # its joins and receives
            leased: list[Any] = []
            deadline = time.monotonic() + 20
            while len(leased) < 3 and time.monotonic() < deadline:
                leased += receiver.receive(10, timeout_s=1)
            receiver.ack(leased)
            assert {d.record.value for d in leased} >= {b"p0", b"p1", b"p2"}

    async def asyncio_side() -> None:
        async with aio.Client(cluster.bootstrap, token=carol) as client:
            assert (await client.whoami()).principal == "carol"
            written = await client.produce("payments", b"async", partition=0)
            records = await client.read("payments", 0, written.offset)
            assert records[0].value == b"async"
            async with client.producer(linger_ms=1) as producer:  # a sync sender, same token
                future = await producer.send("payments", b"batched", partition=0)
                assert (await future).topic == "payments"
            async with client.consumer("carol-async", "payments") as consumer:
                got: list[bytes] = []
                deadline = time.monotonic() + 20
                while b"async" not in got and time.monotonic() < deadline:
                    got += [r.value for r in await consumer.poll(100, timeout_s=1)]
                assert b"async" in got
            with pytest.raises(AuthorizationError, match="principal 'carol' may not produce"):
                await client.produce("orders.eu", b"v")
            with pytest.raises(AuthorizationError):
                await client.list_tokens()
        async with aio.Client(cluster.bootstrap, token="") as anonymous:
            with pytest.raises(AuthenticationError):
                await anonymous.describe_topic("payments")

    asyncio.run(asyncio_side())


def test_acls_and_tokens_are_listed_removed_and_revoked(
    cluster: LocalCluster, admin: Client
) -> None:
    admin.add_acl("dave", "consume", "orders.*")
    admin.add_acl("dave", "admin", "orders.eu", "deny")
    both = [  # sorted by principal, resource, operation
        AclBinding("dave", "consume", "orders.*", "allow"),
        AclBinding("dave", "admin", "orders.eu", "deny"),
    ]
    # a node other than the one changed lists its copy, polled each second
    wait_until(lambda: admin.list_acls("dave") == both, what="dave's ACLs listed")
    assert admin.remove_acl("dave", "admin", "orders.eu", "deny") == 1
    assert admin.remove_acl("dave", "admin", "orders.eu", "deny") == 0
    wait_until(lambda: admin.list_acls("dave") == both[:1], what="the deny gone")
    made = admin.create_token("dave")
    listed: list[TokenInfo] = []

    def dave_listed() -> bool:
        listed[:] = admin.list_tokens("dave")
        return [(t.principal, t.token_id) for t in listed] == [("dave", made.token_id)]

    wait_until(dave_listed, what="dave's token listed")
    assert listed[0].created_ms > 0
    everywhere(cluster, made.token, lambda c: c.read("orders.eu", 0, 0))
    assert admin.revoke_token(made.token) == 1  # by the token itself: its id is computed
    assert admin.revoke_token(made.token_id) == 0
    wait_until(lambda: admin.list_tokens("dave") == [], what="dave's token gone")
    controller = cluster.nodes[cluster.controller_ids[0]].address  # knows it at once
    with Client(controller, token=made.token) as revoked:
        refused_at_once(AuthenticationError, lambda: revoked.read("orders.eu", 0, 0))


class Cli:
    def __init__(self, capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
        self.capsys, self.bootstrap = capsys, bootstrap

    def __call__(self, *args: str, token: str = BOOTSTRAP) -> tuple[int, str, str]:
        self.capsys.readouterr()
        status = cli.main(["--token", token, *args, "--bootstrap", self.bootstrap])
        out, err = self.capsys.readouterr()
        assert "Traceback" not in err
        return status, out, err


def test_the_cli_manages_acls_and_tokens(
    cluster: LocalCluster, admin: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Cli(capsys, ",".join(cluster.addresses()))
    status, out, _ = run(
        "acl", "add", "erin", "--allow", "produce,consume", "--topic", "logs.*", "--topic", "audit"
    )
    assert status == 0 and out.count("added: allow erin") == 4
    status, out, _ = run("acl", "list", "--principal", "erin")
    lines = out.splitlines()
    assert lines[0].split() == ["PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE"]
    assert sorted(line.split()[2:] for line in lines[1:]) == [
        ["consume", "audit"], ["consume", "logs.*"], ["produce", "audit"], ["produce", "logs.*"],
    ]  # fmt: skip
    status, out, _ = run("acl", "list", "--json")
    assert {"principal": "erin", "operation": "produce", "resource": "audit",
            "permission": "allow"} in json.loads(out)  # fmt: skip
    status, out, err = run("acl", "remove", "erin", "--allow", "consume", "--topic", "audit")
    assert status == 0 and out == "removed: allow erin consume on audit\n"
    status, _, err = run("acl", "remove", "erin", "--deny", "admin", "--topic", "audit")
    assert status == 1 and "nothing matched" in err

    status, token, err = run("token", "add", "erin")
    token = token.strip()
    assert status == 0 and token.startswith("flt_") and "shown only now" in err
    status, out, _ = run("token", "list", "--principal", "erin")
    assert status == 0 and out.splitlines()[1].split()[1] == "erin"
    token_id = out.splitlines()[1].split()[0]
    everywhere(cluster, token, lambda c: c.list_topics())
    status, out, _ = run("whoami", token=token)
    assert out == "erin (via token, authorization on)\n"
    status, out, err = run("topic", "delete", "payments", token=token)
    assert status == 1 and err.count("\n") == 1
    assert err.startswith("flotilla: principal 'erin' may not administer topic 'payments'")
    status, out, _ = run("status")
    assert "ACLs" in out and "erin" in out and "logs.*" in out
    status, out, _ = run("status", token=token)  # erin may not list ACLs: the rest stands
    assert status == 0 and "ACLs: not shown: principal 'erin' may not" in out
    assert run("token", "remove", token_id)[1] == "revoked\n"
    status, _, err = run("token", "remove", token_id)
    assert status == 1 and "no token" in err
    status, _, err = run("whoami", token="")
    assert status == 0
    status, _, err = run("topic", "list", token="")
    assert status == 1 and err.startswith("flotilla: no credentials") and err.count("\n") == 1


# -- a cluster with mutual TLS (its ACLs on because TLS is) -------------------------------------
@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("sdk-tls")
    with LocalCluster(root, 2, controllers=1, tls=True) as local:
        local.start()
        yield local


def tls_settings(cluster: LocalCluster, name: str = "admin") -> dict[str, str]:
    assert cluster.tls_dir is not None
    if name != "admin" and not (cluster.tls_dir / f"{name}.pem").exists():
        issue_client(cluster.tls_dir, name)
    return {
        "tls_ca": str(cluster.tls_dir / "ca.pem"),
        "tls_cert": str(cluster.tls_dir / f"{name}.pem"),
        "tls_key": str(cluster.tls_dir / f"{name}.key"),
    }


def test_a_tls_client_with_the_admin_certificate_works_and_others_are_held_to_acls(
    tls_cluster: LocalCluster,
) -> None:
    bootstrap = tls_cluster.addresses()
    with Client(bootstrap, timeout_s=30, **tls_settings(tls_cluster)) as admin:
        who = admin.whoami()
        assert (who.principal, who.via, who.superuser, who.authorization) == (
            "admin", "certificate", True, True,
        )  # fmt: skip
        admin.create_topic("orders.tls", partitions=1, replication_factor=2)
        written = admin.produce("orders.tls", b"over tls")
        assert admin.read("orders.tls", 0, written.offset)[0].value == b"over tls"
        streamed = admin.subscribe("orders.tls", 0, written.offset, stop_after_idle_s=1)
        assert next(streamed).value == b"over tls"
        admin.add_acl("alice", "produce", "orders.*")
    with Client(bootstrap, timeout_s=30, **tls_settings(tls_cluster, "alice")) as alice:
        assert alice.whoami().principal == "alice"
        wait_until(lambda: _may_produce(alice, "orders.tls"), what="alice's ACL on both nodes")
        error = refused_at_once(AuthorizationError, lambda: alice.read("orders.tls", 0, 0))
        assert "principal 'alice' may not consume from topic 'orders.tls'" in str(error)
    with Client(bootstrap, timeout_s=30, **tls_settings(tls_cluster, "mallory")) as mallory:
        refused_at_once(AuthorizationError, lambda: mallory.produce("orders.tls", b"v"))

    async def asyncio_side() -> None:
        async with aio.Client(bootstrap, timeout_s=30, **tls_settings(tls_cluster)) as client:
            assert (await client.whoami()).principal == "admin"
            assert (await client.read("orders.tls", 0, written.offset))[0].value == b"over tls"

    asyncio.run(asyncio_side())


def _may_produce(client: Client, topic: str) -> bool:
    try:
        client.produce(topic, b"probe")
        return True
    except AuthorizationError:
        return False


def test_a_client_without_a_certificate_or_without_tls_is_told_why(
    tls_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tls_settings(tls_cluster)
    with Client(tls_cluster.addresses(), timeout_s=30, **settings) as admin:
        admin.add_acl("zed", "consume", "audit.*")
    for missing, named in (
        ({"tls_ca": settings["tls_ca"]}, "without a client certificate its CA signed"),
        ({"tls_ca": ""}, "a TLS node closes a plaintext connection"),
    ):
        started = time.monotonic()
        client = Client(tls_cluster.addresses(), timeout_s=30, **missing)
        with client, pytest.raises(Unavailable, match=named):
            client.list_topics()
        assert time.monotonic() - started < 15  # not the 30 s timeout
    # the CLI, with the options (or the variables)
    address = tls_cluster.addresses()[0]
    flags = ["--tls-ca", settings["tls_ca"], "--tls-cert", settings["tls_cert"]]
    flags += ["--tls-key", settings["tls_key"]]
    capsys.readouterr()
    assert cli.main([*flags, "whoami", "--bootstrap", address]) == 0
    assert capsys.readouterr().out == "admin (via certificate, superuser, authorization on)\n"
    assert cli.main(["status", "--bootstrap", address, *flags]) == 0
    out = capsys.readouterr().out
    assert "zed" in out and "audit.*" in out  # the ACLs
    assert "(no answer)" not in out and "not reachable" not in out  # every member asked
    assert cli.main(["whoami", "--bootstrap", address, "--tls-ca", settings["tls_ca"]]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "check the client's TLS settings" in err
