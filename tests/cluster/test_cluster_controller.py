"""The control plane: replicated topic metadata among real pysyncobj controllers on loopback."""

from __future__ import annotations

import pickle
import socket
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import free_port, wait_until

from cluster.controller import (
    ControlPlaneError,
    CreateOutcome,
    MetadataStore,
    TopicSpec,
    UpdateOutcome,
)

SECRET = "test-secret"


@pytest.fixture
def controllers(tmp_path: Path) -> Iterator[dict[str, MetadataStore]]:
    addresses = {f"c{n}": f"127.0.0.1:{free_port()}" for n in range(1, 4)}
    stores = {
        node: MetadataStore(node, addresses, SECRET, str(tmp_path / node), election_timeout_s=0.2)
        for node in addresses
    }
    try:
        wait_until(lambda: all(s.has_leader for s in stores.values()), what="a controller leader")
        yield stores
    finally:
        for store in stores.values():
            store.close()


def _spec(name: str, partitions: int = 3) -> TopicSpec:
    return TopicSpec(name, partitions, 3, assignment=(("n1", "n2", "n3"),) * partitions, uid="u1")


def test_topics_replicate_create_is_idempotent_and_conflicts_are_refused(
    controllers: dict[str, MetadataStore],
) -> None:
    c1, c2, c3 = controllers.values()
    assert c1.create_topic(_spec("orders")).result(10) is CreateOutcome.CREATED
    wait_until(lambda: all("orders" in s.topics() for s in (c1, c2, c3)), what="replication")
    assert c3.topics()["orders"] == _spec("orders")
    assert c2.create_topic(_spec("orders")).result(10) is CreateOutcome.EXISTS
    assert c2.create_topic(_spec("orders", partitions=5)).result(10) is CreateOutcome.CONFLICT
    assert c3.delete_topic("orders").result(10) is True
    assert c3.delete_topic("orders").result(10) is False
    wait_until(lambda: not any("orders" in s.topics() for s in (c1, c2, c3)), what="deletion")


def test_a_majority_of_controllers_keeps_working(controllers: dict[str, MetadataStore]) -> None:
    stores = list(controllers.values())
    stores[0].close()
    wait_until(lambda: stores[1].has_leader and stores[2].has_leader, what="a new leader")
    assert stores[1].create_topic(_spec("events")).result(15) is CreateOutcome.CREATED
    wait_until(lambda: "events" in stores[2].topics(), what="replication to the survivor")


def test_unauthenticated_traffic_is_dropped_unread(
    controllers: dict[str, MetadataStore], tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str, str]]:
            return (open, (str(marker), "w"))

    payload = zlib.compress(pickle.dumps(Evil()))
    host, port = next(iter(controllers.values()))._sync.selfNode.address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack("i", len(payload)) + payload)
        sock.settimeout(10)
        try:
            assert sock.recv(1024) == b""  # the controller hung up on us
        except ConnectionResetError:
            pass
    assert not marker.exists()
    assert all(not store.topics() for store in controllers.values())


def test_a_store_refuses_to_start_without_a_secret(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match="FLOTILLA_CLUSTER_SECRET"):
        MetadataStore("c1", {"c1": "127.0.0.1:1"}, "", str(tmp_path))
    with pytest.raises(ControlPlaneError, match="is not among the controllers"):
        MetadataStore("c9", {"c1": "127.0.0.1:1"}, SECRET, str(tmp_path))


def test_retention_is_updated_everywhere_and_method_numbers_stay(
    controllers: dict[str, MetadataStore],
) -> None:
    store = controllers["c1"]
    assert store.create_topic(_spec("kept")).result(timeout=10) is CreateOutcome.CREATED
    updated = UpdateOutcome.UPDATED
    assert store.update_topic("kept", retention_ms=60_000).result(timeout=10) is updated
    assert store.update_topic("kept", retention_bytes=1 << 20).result(timeout=10) is updated
    missing = store.update_topic("missing", retention_ms=1).result(timeout=10)
    assert missing is UpdateOutcome.MISSING
    # partitions are only added; of the assignment given, only the added ones' is taken
    wider = (("x", "y", "z"),) * 5
    grown = store.update_topic("kept", partitions=5, assignment=wider).result(timeout=10)
    assert grown is updated
    fewer = store.update_topic("kept", partitions=4, retention_ms=1).result(timeout=10)
    assert fewer is UpdateOutcome.FEWER

    def changed(each: MetadataStore) -> bool:
        spec = each.topics().get("kept")
        return spec is not None and (spec.retention_ms, spec.retention_bytes, spec.partitions) == (
            60_000,
            1 << 20,
            5,
        )

    wait_until(
        lambda: all(changed(each) for each in controllers.values()),
        what="the changes on every controller",
    )
    spec = store.topics()["kept"]
    assert (spec.partitions, spec.uid) == (5, "u1")
    assert spec.assignment == _spec("kept").assignment + (("x", "y", "z"),) * 2
    # pysyncobj's journal names replicated methods by number, in name order: a method added
    # later must not renumber those a journal written before it holds
    numbers = store._sync._methodToID
    assert numbers == {"create_topic_v0": 0, "delete_topic_v0": 1, "update_topic_v0": 2}
