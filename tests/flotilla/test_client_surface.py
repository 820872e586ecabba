"""The sync and asyncio clients offer the same calls, so they cannot drift apart again.

Every public call of `flotilla.Client` (and the lifecycle dunders) is on `flotilla.aio.Client`
with the same parameters — names, kinds, defaults and annotations, in order — and the other way
round. A plain call is a coroutine on the asyncio side, a generator an async generator, and
`with` is `async with`; the only calls that stay plain on both sides are `producer`,
`consumer` and `queue` (factories that do no I/O: they return the thread-based producer or its
asyncio face, the `Consumer` or the `AsyncConsumer`, the `Queue` or the `AsyncQueue`). The batching producer and its asyncio face
(`flotilla.aio.AsyncProducer`) are held to the same rule, and so are the group consumers
(`flotilla.Consumer`, `flotilla.AsyncConsumer`), whose `assignment`, `seek` and `position` (no
I/O) stay plain on both sides. The checker is shown to catch deliberately drifted copies.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from flotilla import aio
from flotilla._checks import SUBSCRIBE_IDLE_TIMEOUT_S
from flotilla.client import Client
from flotilla.consumer import AsyncConsumer, Consumer
from flotilla.producer import Producer
from flotilla.queue import AsyncQueue, Queue

# sync name -> its asyncio twin's name
LIFECYCLE = {"__enter__": "__aenter__", "__exit__": "__aexit__"}
PLAIN_ON_BOTH = frozenset({"producer", "consumer", "queue"})
CONSUMER_PLAIN_ON_BOTH = frozenset({"assignment", "seek", "position"})


def calls(cls: type) -> dict[str, Callable[..., Any]]:
    """The public calls of `cls` (its own and inherited), lifecycle dunders included."""
    found: dict[str, Callable[..., Any]] = {}
    for name, value in inspect.getmembers(cls):
        public = not name.startswith("_") or name in LIFECYCLE or name in LIFECYCLE.values()
        if public and inspect.isfunction(value):
            found[name] = value
    return found


def flavour(function: Callable[..., Any]) -> str:
    if inspect.isasyncgenfunction(function):
        return "async generator"
    if inspect.iscoroutinefunction(function):
        return "coroutine"
    if inspect.isgeneratorfunction(function):
        return "generator"
    return "plain"


def parameters(function: Callable[..., Any]) -> list[tuple[str, str, object, object]]:
    """Each parameter's name, kind, default and annotation (a string: annotations are
    postponed in both modules)."""
    return [
        (p.name, p.kind.name, p.default, p.annotation)
        for p in inspect.signature(function).parameters.values()
    ]


def named(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def drift(
    sync_cls: type, async_cls: type, plain_on_both: frozenset[str] = PLAIN_ON_BOTH
) -> list[str]:
    """How `async_cls` differs from `sync_cls`, call by call; [] when they match."""
    problems: list[str] = []
    sync_calls, async_calls = calls(sync_cls), calls(async_cls)
    expected = {LIFECYCLE.get(name, name): name for name in sync_calls}
    for twin, name in sorted(expected.items()):
        if twin not in async_calls:
            problems.append(f"{named(async_cls)} lacks {twin} ({named(sync_cls)}.{name})")
            continue
        mine, theirs = sync_calls[name], async_calls[twin]
        if parameters(mine) != parameters(theirs):
            problems.append(
                f"{twin}: parameters differ: sync {parameters(mine)} != async {parameters(theirs)}"
            )
        want = {"plain": "coroutine", "generator": "async generator"}.get(flavour(mine), "?")
        if name in plain_on_both:
            want = flavour(mine)
        if flavour(theirs) != want:
            problems.append(f"{twin}: {flavour(theirs)} on the asyncio side, expected: {want}")
    for extra in sorted(set(async_calls) - set(expected)):
        problems.append(f"{named(async_cls)}.{extra} has no sync twin")
    return problems


def test_the_asyncio_client_has_every_call_of_the_sync_one() -> None:
    assert drift(Client, aio.Client) == []
    assert {"fetch", "metadata", "producer", "send_batch", "subscribe"} <= set(calls(aio.Client))
    assert {"consumer", "list_groups", "describe_group", "reset_group_offsets"} <= set(
        calls(aio.Client)
    )


def test_both_clients_take_the_same_settings() -> None:
    """The constructors match too: bootstrap, timeout, acks, and the TLS and token settings."""
    sync_init, async_init = parameters(Client.__init__), parameters(aio.Client.__init__)
    assert sync_init == async_init
    names = [name for name, *_ in sync_init]
    assert names[-5:] == ["tls_ca", "tls_cert", "tls_key", "token", "tls_server_name"]

    def drifted(self: object, bootstrap: str, *, timeout_s: float = 15.0) -> None:
        return None

    assert parameters(drifted) != sync_init  # the check sees a constructor that lost some


def test_the_asyncio_producer_has_every_call_of_the_sync_one() -> None:
    assert drift(Producer, aio.AsyncProducer) == []


def test_the_asyncio_consumer_has_every_call_of_the_sync_one() -> None:
    assert drift(Consumer, AsyncConsumer, CONSUMER_PLAIN_ON_BOTH) == []
    assert {"poll", "commit", "committed", "assignment", "seek", "position", "close"} <= set(
        calls(AsyncConsumer)
    )


def test_the_asyncio_queue_has_every_call_of_the_sync_one() -> None:
    assert drift(Queue, AsyncQueue) == []
    assert {"receive", "ack", "release", "reject", "extend", "close"} <= set(calls(AsyncQueue))


def test_the_checker_catches_a_drifted_consumer() -> None:
    """A consumer whose poll lost its default, or whose commit is not a coroutine, is caught."""
    own = dict(vars(AsyncConsumer))

    async def poll(self: object, max_records: int, timeout_s: float = 1.0) -> list[object]:
        return []

    def commit(self: object, offsets: dict[tuple[str, int], int] | None = None) -> None:
        return None

    poll.__annotations__ = dict(inspect.get_annotations(AsyncConsumer.poll))
    commit.__annotations__ = dict(inspect.get_annotations(AsyncConsumer.commit))
    drifted = type("Drifted", (), {**own, "poll": poll, "commit": commit})
    problems = drift(Consumer, drifted, CONSUMER_PLAIN_ON_BOTH)
    assert any(p.startswith("poll: parameters differ") for p in problems), problems
    assert "commit: plain on the asyncio side, expected: coroutine" in problems, problems
    assert drift(Consumer, type("Copy", (), own), CONSUMER_PLAIN_ON_BOTH) == []


def test_the_checker_catches_drifted_copies() -> None:
    """Copies of the asyncio client, each drifted one way, are each caught, and named."""
    own = dict(vars(aio.Client))

    def copy(**changes: object) -> type:
        body = {**own, **changes}
        body = {k: v for k, v in body.items() if v is not None}
        return type("Drifted", aio.Client.__bases__, body)  # the group calls it inherits

    async def poll(  # a default changed (timeout_s 1.0 -> 2.0)
        self: object,
        topic: str,
        partition: int = 0,
        offset: int = 0,
        timeout_s: float = 2.0,
        *,
        max_records: int = 1000,
        replica: str | None = None,
    ) -> list[object]:
        return []

    async def read(  # a parameter renamed (max_records -> limit)
        self: object,
        topic: str,
        partition: int = 0,
        offset: int = 0,
        limit: int = 1000,
        replica: str | None = None,
    ) -> list[object]:
        return []

    async def members(self: object, verbose: bool = False) -> list[object]:  # one added
        return []

    def list_topics(self: object) -> list[str]:  # not a coroutine
        return []

    async def subscribe(self: object) -> None:  # a coroutine, not an async iterator
        return None

    async def compact(self: object) -> None:  # a call the sync client lacks
        return None

    cases = {
        "metadata": (copy(metadata=None), "lacks metadata"),
        "poll": (copy(poll=poll), "poll: parameters differ"),
        "read": (copy(read=read), "read: parameters differ"),
        "members": (copy(members=members), "members: parameters differ"),
        "list_topics": (
            copy(list_topics=list_topics),
            "list_topics: plain on the asyncio side, expected: coroutine",
        ),
        "subscribe": (copy(subscribe=subscribe), "subscribe: parameters differ"),
        "compact": (copy(compact=compact), "Drifted.compact has no sync twin"),
        "aexit": (copy(__aexit__=None), "lacks __aexit__"),
    }
    for what, (drifted, expected) in cases.items():
        problems = drift(Client, drifted)
        assert any(expected in problem for problem in problems), (what, problems)

    # a coroutine where an async iterator belongs is caught even with the right parameters
    async def subscribe_same(
        self: object,
        topic: str,
        partition: int = 0,
        offset: int = 0,
        replica: str | None = None,
        *,
        idle_timeout_s: float = SUBSCRIBE_IDLE_TIMEOUT_S,
        stop_after_idle_s: float | None = None,
    ) -> None:
        return None

    subscribe_same.__annotations__ = dict(inspect.get_annotations(aio.Client.subscribe))
    problems = drift(Client, copy(subscribe=subscribe_same))
    assert problems == ["subscribe: coroutine on the asyncio side, expected: async generator"]
    assert drift(Client, copy()) == []  # an unchanged copy passes
