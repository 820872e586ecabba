"""Topic admin reports its outcomes as `cluster.errors` types, each with one gRPC status; an
error from a bug (a stray KeyError) is reported as INTERNAL, never as "topic not found". One real
node in this process (its own single-node control plane), called over gRPC."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import NoReturn

import grpc
import pytest

from cluster import topics as topics_module
from cluster.config import NodeConfig
from cluster.errors import (
    ClusterError,
    ControlPlaneUnavailable,
    Invalid,
    TopicExists,
    TopicNotFound,
)
from cluster.local import free_port
from cluster.node import Node
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"


def test_every_topic_admin_outcome_is_a_cluster_error() -> None:
    for error in (Invalid, TopicNotFound, TopicExists, ControlPlaneUnavailable):
        assert issubclass(error, ClusterError), error
        assert not issubclass(error, (KeyError, OSError)), f"{error} is caught as a builtin"


# the one error of cluster/ outside the root, and why: the process exiting on a storage failure
# (`cluster.failstop`) must not be caught by a handler of API errors
OUTSIDE_THE_ROOT = {"cluster.failstop.NodeFailStopped"}


def errors_outside_the_root(package: str = "cluster") -> list[str]:
    """Every exception class a module of `package` defines that does not descend from
    `ClusterError` (and is not allowed to)."""
    outside = []
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for _, value in inspect.getmembers(module, inspect.isclass):
            name = f"{value.__module__}.{value.__qualname__}"
            if (
                value.__module__ == module.__name__
                and issubclass(value, BaseException)
                and not issubclass(value, ClusterError)
                and name not in OUTSIDE_THE_ROOT
            ):
                outside.append(name)
    return sorted(outside)


def test_every_error_of_cluster_descends_from_the_root() -> None:
    assert errors_outside_the_root() == []


def test_a_key_error_from_a_bug_in_topic_admin_is_not_topic_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def buggy_place(*args: object, **kwargs: object) -> NoReturn:
        raise KeyError("n9")  # as a lookup of a member that is not in a dict would

    async def scenario() -> None:
        config = NodeConfig(
            node_id="n1",
            listen=f"{HOST}:{free_port(HOST)}",
            data_dir=str(tmp_path / "n1"),
            controllers={"n1": f"{HOST}:{free_port(HOST)}"},
            default_replication_factor=1,
            cluster_secret="test-secret",
        ).validate()
        node = Node(config)
        try:
            await node.start()
            async with grpc.aio.insecure_channel(config.listen) as channel:
                stub = flotilla_pb2_grpc.FlotillaStub(channel)
                # a topic that really is missing is NOT_FOUND
                with pytest.raises(grpc.aio.AioRpcError) as missing:
                    await stub.DeleteTopic(pb.DeleteTopicRequest(name="nothing"), timeout=30)
                assert missing.value.code() == grpc.StatusCode.NOT_FOUND, missing.value
                # a bug inside topic admin raises KeyError while placing a new topic
                monkeypatch.setattr(topics_module, "place", buggy_place)
                request = pb.CreateTopicRequest(name="orders", partitions=1, replication_factor=1)
                with pytest.raises(grpc.aio.AioRpcError) as bug:
                    await stub.CreateTopic(request, timeout=30)
                code, details = bug.value.code(), bug.value.details() or ""
                print(f"a KeyError from a bug reached the client as {code.name}: {details!r}")
                assert code != grpc.StatusCode.NOT_FOUND, (
                    f"a KeyError from a bug was reported as topic not found: {details!r}"
                )
                assert code == grpc.StatusCode.INTERNAL, (code, details)
                assert "KeyError" in details and "Traceback" not in details, details
                names = await stub.ListTopics(pb.ListTopicsRequest(), timeout=10)
                assert "orders" not in names.names  # nothing was created
        finally:
            await node.stop(graceful=False)

    asyncio.run(scenario())
