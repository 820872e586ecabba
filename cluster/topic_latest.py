"""The control plane's latest word on one topic, for a decision that must not rest on this
node's copy of the topic table (which trails the control plane by up to a poll, more under
load): has the dead-letter topic a copy just went into been deleted meanwhile?

Every controller is asked at once for the topic (`MetadataRequest(topics=[name],
topics_only=True)`: its spec, or its absence, with the control-plane version of the table it
answers from; a controller brings its table up to its own control plane first); this node, if
it is a controller, answers from its own. The answer of the highest version wins. A change the
control plane committed is applied on its leader before anyone is told it is done, and the
leader is among those asked: so a delete that completed before this call is seen, unless the
leader does not answer within `LATEST_TIMEOUT_S` (paused, cut off), when the best of the others
is taken.
"""

from __future__ import annotations

import asyncio

import grpc

from cluster.errors import ControlPlaneUnavailable
from cluster.topic_spec import TopicSpec
from cluster.topics import TopicAdmin, spec_of
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

__all__ = ["LATEST_TIMEOUT_S", "latest_spec"]

LATEST_TIMEOUT_S = 1.0

Answer = tuple[int, TopicSpec | None]  # (control-plane version, the topic or None)


async def latest_spec(admin: TopicAdmin, name: str) -> TopicSpec | None:
    """The topic `name` as the control plane has it now (None: it does not exist). Raises
    `ControlPlaneUnavailable` when no controller answers."""
    answers: list[Answer] = []
    controller = admin.controller
    if controller is not None and controller.ready:
        await admin.refresh()
        answers.append((admin.control_version, admin.topics.get(name)))

    async def ask(address: str) -> Answer:
        stub = flotilla_pb2_grpc.FlotillaStub(admin.transport.channel(address))
        response = await stub.Metadata(
            pb.MetadataRequest(topics=[name], topics_only=True), timeout=LATEST_TIMEOUT_S
        )
        found = [spec_of(topic) for topic in response.topics if topic.name == name]
        return int(response.topics_version), (found[0] if found else None)

    others = [
        address
        for controller_id in sorted(admin.config.controllers)
        if controller_id != admin.config.node_id
        and (address := admin.transport.address_of(controller_id))
    ]
    errors = []
    for outcome in await asyncio.gather(*(ask(a) for a in others), return_exceptions=True):
        if isinstance(outcome, grpc.aio.AioRpcError):
            errors.append(f"{outcome.code().name} {outcome.details()}")
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            answers.append(outcome)
    if not answers:
        raise ControlPlaneUnavailable(
            f"no controller answered for topic {name!r} ({'; '.join(errors) or 'none known'})"
        )
    return max(answers, key=lambda answer: answer[0])[1]
