"""`cluster.peer_auth` without a cluster: the call proof and the SWIM mac accept what the cluster
secret (or the previous one) signed, within the clock window, and nothing tampered with; each
refusal says why, and rejections are counted and logged once per source host."""

from __future__ import annotations

import logging

import pytest

from cluster.peer_auth import PEER_KEY, PeerAuth, PeerAuthError, source_host
from proto import peer_pb2

NOW_MS = 1_800_000_000_000


def _auth(node_id: str = "n1", secret: str = "s3cret", previous: str = "") -> PeerAuth:
    return PeerAuth(node_id, secret, previous, clock=lambda: NOW_MS / 1000)


def test_a_signed_call_proves_its_node() -> None:
    value = _auth("node.a-1").sign_call()
    assert value.startswith(f"node.a-1.{NOW_MS}.")
    assert _auth("n2").verify_call(value) == "node.a-1"
    assert _auth("n2").verify_call(value.encode()) == "node.a-1"
    assert PEER_KEY == "flotilla-peer"


def test_another_secret_is_refused_and_the_previous_one_is_accepted() -> None:
    old = _auth("n1", secret="old").sign_call()
    with pytest.raises(PeerAuthError, match="not signed with this cluster's secret"):
        _auth("n2", secret="new").verify_call(old)
    assert _auth("n2", secret="new", previous="old").verify_call(old) == "n1"
    # the previous secret only verifies: a node signs with the current one
    rotated = _auth("n1", secret="new", previous="old").sign_call()
    with pytest.raises(PeerAuthError):
        _auth("n2", secret="old").verify_call(rotated)


@pytest.mark.parametrize("skew_ms", [-120_001, 120_001, 10**9])
def test_a_call_outside_the_window_is_refused(skew_ms: int) -> None:
    value = _auth().sign_call(now_ms=NOW_MS + skew_ms)
    with pytest.raises(PeerAuthError, match="outside the ±120 s window"):
        _auth("n2").verify_call(value)


def test_inside_the_window_is_accepted() -> None:
    for skew_ms in (-120_000, 0, 119_999):
        assert _auth("n2").verify_call(_auth().sign_call(now_ms=NOW_MS + skew_ms)) == "n1"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda v: v.replace("n1.", "n9.", 1),  # another node claimed
        lambda v: v.replace(str(NOW_MS), str(NOW_MS + 1)),  # another time
        lambda v: v[:-1] + ("0" if v[-1] != "0" else "1"),  # the mac
        lambda v: v[:-2],  # short
        lambda v: v.upper(),  # not lower hex
        lambda v: v + "\n",
        lambda v: "",
        lambda v: "n1." + "é" * 70,  # non-ascii must not reach compare_digest
    ],
)
def test_tampered_calls_are_refused(tamper: object) -> None:
    value = tamper(_auth().sign_call())  # type: ignore[operator]
    with pytest.raises(PeerAuthError):
        _auth("n2").verify_call(value)


def test_missing_metadata_says_so() -> None:
    with pytest.raises(PeerAuthError, match="no flotilla-peer metadata"):
        _auth().verify_call(None)


def _packet() -> peer_pb2.SwimPacket:
    return peer_pb2.SwimPacket(from_node="n1", from_address="127.0.0.1:7001", payload=b"\x01dead")


def test_swim_packets_are_signed_over_their_whole_body() -> None:
    packet = _packet()
    _auth().sign_swim(packet)
    assert packet.sent_at_ms == NOW_MS and len(packet.mac) == 32
    _auth("n2").verify_swim(packet)
    for field, value in (
        ("from_node", "n3"),
        ("from_address", "127.0.0.9:7001"),
        ("payload", b"\x01alive"),
        ("sent_at_ms", NOW_MS + 1),
    ):
        forged = peer_pb2.SwimPacket()
        forged.CopyFrom(packet)
        setattr(forged, field, value)
        with pytest.raises(PeerAuthError, match="not signed"):
            _auth("n2").verify_swim(forged)
    with pytest.raises(PeerAuthError, match="carries no mac"):
        _auth("n2").verify_swim(_packet())
    with pytest.raises(PeerAuthError, match="not signed"):
        _auth("n2", secret="other").verify_swim(packet)
    _auth("n2", "other", previous="s3cret").verify_swim(packet)  # accepted: no error


def test_an_old_swim_packet_is_refused() -> None:
    packet = _packet()
    _auth().sign_swim(packet, now_ms=NOW_MS - 121_000)
    with pytest.raises(PeerAuthError, match="outside"):
        _auth("n2").verify_swim(packet)


def test_no_secret_is_refused() -> None:
    with pytest.raises(PeerAuthError, match="FLOTILLA_CLUSTER_SECRET"):
        PeerAuth("n1", "")


def test_rejections_are_counted_and_logged_once_per_host(caplog: pytest.LogCaptureFixture) -> None:
    counted: list[str] = []
    auth = PeerAuth("n1", "s", on_rejected=counted.append)
    with caplog.at_level(logging.WARNING, logger="flotilla.peer_auth"):
        auth.reject("raft", "ipv4:10.0.0.5:40000", "bad mac")
        auth.reject("swim", "ipv4:10.0.0.5:40001", "bad mac")
        auth.reject("swim", "ipv6:[::1]:5000", "old")
    assert counted == ["raft", "swim", "swim"]
    assert auth.rejected == {"raft": 1, "swim": 2, "call": 0}
    logged = [r for r in caplog.records if r.getMessage() == "peer_auth_rejected"]
    assert len(logged) == 2
    assert source_host("ipv4:10.0.0.5:40000") == "10.0.0.5"
    assert source_host("ipv6:[::1]:5000") == "[::1]"
    assert source_host("unix:/tmp/x") == "unix:/tmp/x"
