"""Client identities, tokens and ACLs on real nodes (`cluster.acl_service`, `cluster.acl_state`):
one cluster for the module, authorization on, a bootstrap token, no TLS (tokens on loopback).

Three nodes, one controller (n1): n2 and n3 forward ACL and token changes to it and keep a
polled copy of the table, so each check runs on a node that holds the table only by polling
too. Raw gRPC stubs with the `authorization: Bearer` metadata, as any client would send it.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from harness import wait_until
from prometheus_client.parser import text_string_to_metric_families
from queue_calls import Member, Router, take

from cluster.acl_state import TOKEN_HASHES_KEY
from cluster.certs import CertPaths, issue_client
from cluster.delayed import TIMER_FORWARD_KEY
from cluster.local import LocalCluster, free_port
from cluster.peer_auth import PEER_KEY, PeerAuth
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import encode_batch
from timers.types import DELIVER_AT_HEADER

pytestmark = pytest.mark.integration

BOOTSTRAP = "flt_bootstrap-for-the-acl-tests-0123456789abcdefghij"
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
DENIED = grpc.StatusCode.PERMISSION_DENIED
TOPICS = ("orders.eu", "payments")


class Calls:
    """Raw stubs of every node, with one credential."""

    def __init__(self, cluster: LocalCluster, token: str | None) -> None:
        self.cluster = cluster
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.channels: dict[str, grpc.Channel] = {}

    def stub(self, node_id: str) -> flotilla_pb2_grpc.FlotillaStub:
        address = self.cluster.nodes[node_id].address
        if address not in self.channels:
            self.channels[address] = grpc.insecure_channel(address)
        return flotilla_pb2_grpc.FlotillaStub(self.channels[address])

    def __call__(self, node_id: str, method: str, request: Any, **kwargs: Any) -> Any:
        call = getattr(self.stub(node_id), method)
        return call(request, timeout=15, metadata=self.metadata, **kwargs)

    def refused(self, node_id: str, method: str, request: Any) -> grpc.RpcError:
        with pytest.raises(grpc.RpcError) as caught:
            answer = self(node_id, method, request)
            if method == "Subscribe":
                next(iter(answer))
        return caught.value

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("acls")
    env = {"FLOTILLA_AUTHORIZATION": "on", "FLOTILLA_BOOTSTRAP_TOKEN": BOOTSTRAP}
    with LocalCluster(root, nodes=3, controllers=1, env=env) as local:
        spec = local.nodes["n2"]  # n2 serves metrics: the refusals it counts
        spec.extra_args = ["--metrics", f"{spec.host}:{free_port(spec.host)}"]
        local.start()
        yield local


def _refusals(cluster: LocalCluster) -> dict[tuple[str, str], float]:
    """n2's `flotilla_authz_refused_total` by (operation, outcome)."""
    address = cluster.nodes["n2"].extra_args[1]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.labels["operation"], sample.labels["outcome"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "flotilla_authz_refused_total"
    }


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Calls]:
    calls = Calls(cluster, BOOTSTRAP)
    for name in TOPICS:
        request = pb.CreateTopicRequest(name=name, partitions=1, replication_factor=3)
        calls("n2", "CreateTopic", request)  # forwarded to the controller, as n2's caller
    wait_until(
        lambda: all(_leader(calls, n, t) for n in ("n1", "n2", "n3") for t in TOPICS),
        what="both topics led, as every node sees them",
    )
    yield calls
    calls.close()


def _leader(calls: Calls, node_id: str, topic: str) -> str:
    try:
        response = calls(node_id, "Metadata", pb.MetadataRequest(topics=[topic]))
    except grpc.RpcError as error:
        if error.code() is not grpc.StatusCode.NOT_FOUND:  # not polled there yet
            raise
        return ""
    return str(response.topics[0].partitions[0].leader)


def _high_watermark(calls: Calls, topic: str, node_id: str = "n1") -> int:
    response = calls(node_id, "Metadata", pb.MetadataRequest(topics=[topic]))
    return int(response.topics[0].partitions[0].high_watermark)


def _settled_high_watermark(calls: Calls, topic: str) -> int:
    """The high watermark once every node reports the same (a follower's may trail a moment)."""
    seen: set[int] = set()

    def agreed() -> bool:
        seen.clear()
        seen.update(_high_watermark(calls, topic, n) for n in ("n1", "n2", "n3"))
        return len(seen) == 1

    wait_until(agreed, what=f"the nodes agreeing on {topic}'s high watermark", detail=lambda: seen)
    return seen.pop()


def _produce(calls: Calls, topic: str) -> Any:
    leader = _leader(calls, "n1", topic)
    batch = encode_batch([(None, b"v", None, int(time.time() * 1000))])
    request = pb.ProduceRequest(topic=topic, partition=0, batch=batch, acks=pb.ACKS_ALL)
    return calls(leader, "Produce", request)


def _token(admin: Calls, principal: str, node_id: str = "n2") -> pb.CreateTokenResponse:
    made: pb.CreateTokenResponse = admin(
        node_id, "CreateToken", pb.CreateTokenRequest(principal=principal)
    )
    assert made.token.startswith("flt_") and len(made.token) == 47
    assert made.principal == principal and len(made.token_id) == 12
    return made


def _known_everywhere(cluster: LocalCluster, token: str) -> Calls:
    calls = Calls(cluster, token)

    def known() -> bool:
        try:
            return all(
                calls(n, "WhoAmI", pb.WhoAmIRequest()).authenticated for n in ("n1", "n2", "n3")
            )
        except grpc.RpcError:
            return False

    wait_until(known, what="the token known on every node")
    return calls


def test_a_call_without_credentials_or_with_an_unknown_token_is_unauthenticated(
    cluster: LocalCluster, admin: Calls
) -> None:
    anonymous = Calls(cluster, None)
    for node_id in ("n1", "n3"):
        error = anonymous.refused(node_id, "ListTopics", pb.ListTopicsRequest())
        assert error.code() is UNAUTHENTICATED
        assert "no credentials: present a client certificate" in str(error.details())
        error = anonymous.refused(node_id, "Produce", pb.ProduceRequest(topic="payments"))
        assert error.code() is UNAUTHENTICATED
    who = anonymous("n3", "WhoAmI", pb.WhoAmIRequest())
    assert (who.authenticated, who.principal, who.authorization) == (False, "", True)
    assert anonymous("n3", "Health", pb.HealthRequest()).serving  # probes need no credentials

    counted = _refusals(cluster)
    assert counted[("any", "unauthenticated")] == 0, counted  # every series from the start
    stranger = Calls(cluster, "flt_" + "x" * 43)
    error = stranger.refused("n2", "Metadata", pb.MetadataRequest())
    assert error.code() is UNAUTHENTICATED
    assert "is not known to the cluster" in str(error.details())
    assert "x" * 10 not in str(error.details())  # the token is never echoed
    error = Calls(cluster, "").refused("n2", "Metadata", pb.MetadataRequest())
    assert error.code() is UNAUTHENTICATED
    error = anonymous.refused("n2", "Produce", pb.ProduceRequest(topic="payments"))
    assert error.code() is UNAUTHENTICATED
    now = _refusals(cluster)
    assert now[("any", "unauthenticated")] - counted[("any", "unauthenticated")] == 2, now
    assert now[("produce", "unauthenticated")] - counted[("produce", "unauthenticated")] == 1

    who = admin("n2", "WhoAmI", pb.WhoAmIRequest())
    assert (who.principal, who.via, who.superuser) == ("admin", "token", True)


def test_a_principal_allowed_only_to_produce_on_a_prefix_can_do_nothing_else(
    cluster: LocalCluster, admin: Calls
) -> None:
    made = _token(admin, "bob")
    binding = pb.AclBinding(principal="bob", operation="produce", resource="orders.*")
    added = admin("n3", "AddAcl", binding)
    assert (added.principal, added.permission) == ("bob", "allow")
    log_path = cluster.nodes["n3"].log_path
    assert log_path is not None
    wait_until(
        lambda: any(
            "acl_added" in line and "by=admin" in line and "resource=orders.*" in line
            for line in log_path.read_text().splitlines()
        ),
        what="the change in the log of the node the client called",
    )
    assert made.token not in (cluster.root / "n2.log").read_text()  # tokens are never logged
    bob = _known_everywhere(cluster, made.token)
    wait_until(lambda: _may_produce(bob, "orders.eu"), what="bob's ACL on every node")
    assert bob("n3", "WhoAmI", pb.WhoAmIRequest()).principal == "bob"

    before = {topic: _high_watermark(admin, topic) for topic in ("orders.eu", "payments")}
    error = bob.refused(_leader(admin, "n1", "payments"), "Produce", _request("payments"))
    assert error.code() is DENIED
    assert error.details() == (
        "principal 'bob' may not produce to topic 'payments': no ACL allows it"
    )
    consume = "principal 'bob' may not consume from topic 'orders.eu': no ACL allows it"
    counted = _refusals(cluster)
    for node_id in ("n1", "n2", "n3"):
        for method, request in (
            ("Fetch", pb.FetchRequest(topic="orders.eu", partition=0)),
            ("Subscribe", pb.FetchRequest(topic="orders.eu", partition=0)),
            (
                "GroupHeartbeat",
                pb.GroupHeartbeatRequest(group="g", topics=["orders.eu"], kind=pb.GROUP_KIND_STREAM),
            ),
            ("QueueReceive", pb.QueueReceiveRequest(group="q", topic="orders.eu", max_records=1)),
            ("CommitOffsets", pb.CommitOffsetsRequest(group="g", offsets=[pb.PartitionOffset(topic="orders.eu")])),
        ):  # fmt: skip
            error = bob.refused(node_id, method, request)
            assert (error.code(), error.details()) == (DENIED, consume), (node_id, method)
    administer = "principal 'bob' may not administer topic 'orders.eu': no ACL allows it"
    for method, request in (
        ("DeleteTopic", pb.DeleteTopicRequest(name="orders.eu")),
        ("AlterTopic", pb.AlterTopicRequest(name="orders.eu", retention_ms=1000)),
        ("CreateTopic", pb.CreateTopicRequest(name="orders.eu", partitions=1)),
        ("ResetGroupOffsets", pb.ResetGroupOffsetsRequest(group="g", topic="orders.eu")),
    ):
        error = bob.refused("n2", method, request)
        assert (error.code(), error.details()) == (DENIED, administer), method
    now = _refusals(cluster)  # n2 counted the five refused reads and four changes it refused
    assert now[("consume", "denied")] - counted[("consume", "denied")] == 5, now
    assert now[("admin", "denied")] - counted[("admin", "denied")] == 4, now
    # nothing changed: the topic is there as it was, and nothing was written
    info = admin("n1", "DescribeTopic", pb.DescribeTopicRequest(name="orders.eu"))
    assert info.retention_ms == 0 and len(info.partitions) == 1
    assert {topic: _high_watermark(admin, topic) for topic in before} == before

    # and it may not manage who may do what
    cluster_admin = "principal 'bob' may not administer the cluster ('*'"
    for method, request in (
        ("AddAcl", pb.AclBinding(principal="bob", operation="all", resource="*")),
        ("ListAcls", pb.ListAclsRequest()),
        ("CreateToken", pb.CreateTokenRequest(principal="bob")),
        ("ListTokens", pb.ListTokensRequest()),
        ("RevokeToken", pb.RevokeTokenRequest(token_id=made.token_id)),
        ("DeleteGroup", pb.DeleteGroupRequest(group="g")),
    ):
        error = bob.refused("n3", method, request)
        assert error.code() is DENIED and cluster_admin in str(error.details()), method
    acls = admin("n1", "ListAcls", pb.ListAclsRequest(principal="bob")).acls
    assert [(a.operation, a.resource, a.permission) for a in acls] == [
        ("produce", "orders.*", "allow")
    ]


def _request(topic: str, deliver_at_ms: int = 0) -> pb.ProduceRequest:
    headers = [(DELIVER_AT_HEADER, str(deliver_at_ms).encode())] if deliver_at_ms else None
    batch = encode_batch([(None, b"v", headers, int(time.time() * 1000))])
    return pb.ProduceRequest(
        topic=topic, partition=0, batch=batch, acks=pb.ACKS_ALL, deliver_at_ms=deliver_at_ms
    )


def _may_produce(calls: Calls, topic: str) -> bool:
    try:
        _produce(calls, topic)
        return True
    except grpc.RpcError as error:
        retry = (DENIED, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE)
        if error.code() not in retry:  # a leader moving, an ACL not polled yet
            raise
        return False


def test_deny_wins_over_allow_and_a_bad_binding_is_refused(
    cluster: LocalCluster, admin: Calls
) -> None:
    carol = _known_everywhere(cluster, _token(admin, "carol", node_id="n1").token)
    admin("n2", "AddAcl", pb.AclBinding(principal="carol", operation="all", resource="orders.*"))
    wait_until(lambda: _may_produce(carol, "orders.eu"), what="carol's allow")
    deny = pb.AclBinding(
        principal="*", operation="produce", resource="orders.eu", permission="deny"
    )
    admin("n3", "AddAcl", deny)
    wait_until(lambda: not _may_produce(carol, "orders.eu"), what="the deny on every node")
    error = carol.refused(_leader(admin, "n1", "orders.eu"), "Produce", _request("orders.eu"))
    assert error.details() == (
        "principal 'carol' may not produce to topic 'orders.eu': denied by ACL deny produce "
        "on 'orders.eu'"
    )
    carol("n2", "Fetch", pb.FetchRequest(topic="orders.eu", partition=0, max_records=1))
    removed = admin("n2", "RemoveAcl", deny)
    assert removed.removed == 1
    assert admin("n2", "RemoveAcl", deny).removed == 0
    wait_until(lambda: _may_produce(carol, "orders.eu"), what="the deny gone")

    bad = pb.AclBinding(principal="carol", operation="write", resource="orders.*")
    error = admin.refused("n3", "AddAcl", bad)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "operation 'write' is invalid: use produce | consume | admin | all" in error.details()


def _answers(calls: Calls, node_id: str, method: str, request: Any) -> bool:
    try:
        calls(node_id, method, request)
        return True
    except grpc.RpcError as error:
        starting = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION)
        if error.code() not in starting:  # not loaded yet, its replica not open yet
            raise
        return False


def test_acls_and_tokens_survive_a_controller_restart_and_a_revoked_token_stops_at_once(
    cluster: LocalCluster, admin: Calls
) -> None:
    made = _token(admin, "dave")
    admin("n3", "AddAcl", pb.AclBinding(principal="dave", operation="consume", resource="*"))
    dave = _known_everywhere(cluster, made.token)
    cluster.stop("n1")
    cluster.start("n1")
    # the controller's table comes from its own journal and dumps, nothing else (until it has
    # loaded them it says so: UNAVAILABLE)
    wait_until(lambda: _answers(admin, "n1", "ListTokens", pb.ListTokensRequest()))
    listed = admin("n1", "ListTokens", pb.ListTokensRequest(principal="dave")).tokens
    assert [(t.principal, t.token_id) for t in listed] == [("dave", made.token_id)]
    # the full hashes go to the cluster's nodes only (a client asking as a node does gets ids)
    curious = Calls(cluster, BOOTSTRAP)
    curious.metadata = (*curious.metadata, (TOKEN_HASHES_KEY, "1"))
    assert {
        len(t.token_id) for t in curious("n1", "ListTokens", pb.ListTokensRequest()).tokens
    } == {12}
    acls = admin("n1", "ListAcls", pb.ListAclsRequest(principal="dave")).acls
    assert [(a.operation, a.resource) for a in acls] == [("consume", "*")]
    wait_until(
        lambda: dave("n1", "WhoAmI", pb.WhoAmIRequest()).principal == "dave",
        what="dave known on the restarted controller",
    )
    fetch = pb.FetchRequest(topic="payments", partition=0, max_records=1)
    wait_until(lambda: _answers(dave, "n1", "Fetch", fetch), what="dave's fetch on n1")

    revoked = admin("n3", "RevokeToken", pb.RevokeTokenRequest(token_id=made.token_id))
    assert revoked.revoked == 1
    for node_id in ("n3", "n1"):  # the node that revoked it, and the controller: at once
        error = dave.refused(node_id, "Fetch", pb.FetchRequest(topic="payments", partition=0))
        assert error.code() is UNAUTHENTICATED, node_id
        assert f"(id {made.token_id}) is not known to the cluster" in error.details()
    wait_until(
        lambda: not dave("n2", "WhoAmI", pb.WhoAmIRequest()).authenticated,
        what="the revocation on the third node (within a poll)",
    )
    error = admin.refused("n2", "RevokeToken", pb.RevokeTokenRequest(token_id="xyz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT


class _Bearer(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Adds `authorization: Bearer <token>` to every unary call (for tests/queue_calls.py's
    router, which calls without metadata)."""

    def __init__(self, token: str) -> None:
        self.pair = ("authorization", f"Bearer {token}")

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = (*(details.metadata or ()), self.pair)
        return continuation(details._replace(metadata=metadata), request)


def test_the_nodes_own_calls_pass_for_a_client_s_delayed_produce_and_queue(
    cluster: LocalCluster, admin: Calls
) -> None:
    """What a node does for a client call, it does as itself (`node:<id>`, its signed proof):
    delayed batches forwarded to their timer partition's leader (and the timer topic created
    through the controller), queue source reads from partition leaders, dead-letter copies
    (and the dead-letter topic created). erin may do all on orders.* and nothing else."""
    made = _token(admin, "erin")
    admin("n1", "AddAcl", pb.AclBinding(principal="erin", operation="all", resource="orders.*"))
    erin = _known_everywhere(cluster, made.token)
    wait_until(lambda: _may_produce(erin, "orders.eu"), what="erin's ACL on every node")
    start = _settled_high_watermark(admin, "orders.eu")
    for node_id in ("n1", "n2", "n3"):  # at most one of them leads the timer partition
        erin(node_id, "Produce", _request("orders.eu", int(time.time() * 1000) + 300))
    wait_until(
        lambda: _high_watermark(admin, "orders.eu") == start + 3,
        what="the three delayed records delivered",
        detail=lambda: {"start": start, "now": _high_watermark(admin, "orders.eu")},
    )
    # internal topics stay the nodes' own, even for a superuser holding the forward marker
    timers = [
        name
        for name in admin("n1", "Metadata", pb.MetadataRequest()).topics
        if name.name.startswith("__timers.")
    ]
    assert timers, "the timer topic was made"
    forged = _request(timers[0].name, int(time.time() * 1000) + 60_000)
    marked = Calls(cluster, BOOTSTRAP)
    marked.metadata = (*marked.metadata, (TIMER_FORWARD_KEY, "1"))
    error = marked.refused(timers[0].partitions[0].leader, "Produce", forged)
    assert error.code() is DENIED
    assert "is the cluster's own (names starting with '__'); only its nodes may" in (
        error.details()
    )

    router = Router(cluster)
    for spec in cluster.nodes.values():
        channel = grpc.insecure_channel(spec.address)
        router.channels[spec.address] = grpc.intercept_channel(channel, _Bearer(made.token))
    try:
        member = Member(router, "w", "orders.eu").join()
        leases = take(member, 1)
        member.settle(leases[:1], pb.SETTLE_REJECT)
        wait_until(
            lambda: (
                _leader(admin, "n1", "orders.eu.w.dlq")
                and _high_watermark(admin, "orders.eu.w.dlq") == 1
            ),
            what="the rejected record copied to the dead-letter topic",
        )
    finally:
        router.close()


# -- with TLS: client certificates name principals ---------------------------------------------


def _tls_stub(
    cluster: LocalCluster, node_id: str, paths: CertPaths
) -> flotilla_pb2_grpc.FlotillaStub:
    credentials = grpc.ssl_channel_credentials(
        paths.ca.read_bytes(), paths.key.read_bytes(), paths.cert.read_bytes()
    )
    channel = grpc.secure_channel(cluster.nodes[node_id].address, credentials)
    return flotilla_pb2_grpc.FlotillaStub(channel)


def test_with_mutual_tls_a_client_certificate_is_the_principal(tmp_path: Path) -> None:
    """authorization "auto" is on with TLS: the admin certificate (a superuser) makes a topic
    through the non-controller (its forward goes as the node, over mutual TLS) and an ACL; the
    certificate of client bob may produce and nothing else; a token beats a certificate, and a
    valid peer proof presented with a client certificate is no node."""
    with LocalCluster(tmp_path, nodes=2, controllers=1, tls=True) as cluster:
        cluster.start()
        assert cluster.tls is not None and cluster.tls_dir is not None
        admin = _tls_stub(cluster, "n2", cluster.tls)
        bob_paths = issue_client(cluster.tls_dir, "bob")
        bob = {n: _tls_stub(cluster, n, bob_paths) for n in ("n1", "n2")}
        who = admin.WhoAmI(pb.WhoAmIRequest(), timeout=10)
        assert (who.principal, who.via, who.superuser, who.authorization) == (
            "admin", "certificate", True, True,
        )  # fmt: skip
        request = pb.CreateTopicRequest(name="orders.eu", partitions=1, replication_factor=2)
        admin.CreateTopic(request, timeout=15)
        binding = pb.AclBinding(principal="bob", operation="produce", resource="orders.*")
        admin.AddAcl(binding, timeout=15)
        assert bob["n2"].WhoAmI(pb.WhoAmIRequest(), timeout=10).via == "certificate"

        def produced() -> bool:
            for stub in bob.values():
                try:
                    stub.Produce(_request("orders.eu"), timeout=10)
                    return True
                except grpc.RpcError as error:
                    retry = (
                        DENIED,
                        grpc.StatusCode.FAILED_PRECONDITION,
                        grpc.StatusCode.UNAVAILABLE,
                    )
                    if error.code() not in retry:  # a leader not elected, an ACL not polled
                        raise
            return False

        wait_until(produced, what="bob's produce over TLS")
        with pytest.raises(grpc.RpcError) as caught:
            bob["n1"].Fetch(pb.FetchRequest(topic="orders.eu", partition=0), timeout=10)
        assert caught.value.code() is DENIED
        assert "principal 'bob' may not consume from topic 'orders.eu'" in caught.value.details()
        with pytest.raises(grpc.RpcError) as caught:
            bob["n2"].DeleteTopic(pb.DeleteTopicRequest(name="orders.eu"), timeout=10)
        assert caught.value.code() is DENIED
        # a token is looked at before the certificate: an unknown one is refused outright
        with pytest.raises(grpc.RpcError) as caught:
            bob["n2"].ListTopics(
                pb.ListTopicsRequest(), timeout=10, metadata=(("authorization", "Bearer flt_x"),)
            )
        assert caught.value.code() is UNAUTHENTICATED
        # the cluster's secret (stolen) signs a proof of n1, but bob's certificate is no node's
        forged = PeerAuth("n1", cluster.secret).sign_call()
        with pytest.raises(grpc.RpcError) as caught:
            bob["n2"].ListTopics(pb.ListTopicsRequest(), timeout=10, metadata=((PEER_KEY, forged),))
        assert caught.value.code() is UNAUTHENTICATED
        assert "the client certificate of 'bob'" in caught.value.details()
        # and a node's certificate without the proof is nobody
        as_node = _tls_stub(cluster, "n1", cluster.node_tls("n2") or cluster.tls)
        with pytest.raises(grpc.RpcError) as caught:
            as_node.ListTopics(pb.ListTopicsRequest(), timeout=10)
        assert caught.value.code() is UNAUTHENTICATED
