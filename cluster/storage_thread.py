"""The node's storage thread: one thread that runs disk work in the order it was handed over.

`MultiRaft` hands it each round's writes and group commit (`cluster.persist.write_all`) with
`run`, the loop's cheap way in: one C-level queue put, and on completion one
`call_soon_threadsafe` that settles an asyncio future. That is a third less CPU per hand-off
than `loop.run_in_executor` on a `ThreadPoolExecutor` (no work item, no `concurrent.futures`
future and its condition, no chaining of one future into another; `bench.storage_handoff`),
paid once per round on every node. It is also an `Executor` (`submit`), for the rest of the
node's disk work (snapshots, closing and deleting replicas) and `run_in_executor`.

Guarantees: work runs one item at a time, in the order of `run` and `submit` calls, on this one
thread (so a round's writes never overlap a snapshot's or a close's); an exception the work
raises (any `BaseException`, as a `ThreadPoolExecutor`'s) settles its future and the thread goes
on. Nothing here takes a lock the event loop waits on while work runs: the loop only puts into
the queue, and fsyncs run on this thread with the GIL released.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

__all__ = ["StorageThread"]

T = TypeVar("T")
_Future = asyncio.Future[Any] | concurrent.futures.Future[Any]


class StorageThread(concurrent.futures.Executor):
    """One worker thread named `name`, fed through a `queue.SimpleQueue`."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[_Future, Callable[..., Any], tuple[Any, ...]] | None]
        self._queue = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def run(self, work: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Runs `work(*args)` on the thread; the returned future (of the running loop) gets
        its result or exception."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._put(future, work, args)
        return future

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._put(future, partial(fn, **kwargs) if kwargs else fn, args)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more work is taken; the work already handed over runs (`cancel_futures` is not
        supported: everything queued is disk work that must run). `wait`: until it has."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
        if wait and self._thread is not threading.current_thread():
            self._thread.join()

    def _put(self, future: _Future, work: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if self._closed:
            raise RuntimeError("the storage thread is shut down: no new work is taken")
        self._queue.put((future, work, args))

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            _run(*item)
            del item  # the work's arguments (a round's entries) are not kept until the next


def _run(future: _Future, work: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if isinstance(future, concurrent.futures.Future):
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(work(*args))
            except BaseException as raised:
                future.set_exception(raised)
        return
    try:
        result, error = work(*args), None
    except BaseException as failure:
        result, error = None, failure
    try:
        future.get_loop().call_soon_threadsafe(_settle, future, result, error)
    except RuntimeError:  # the loop is closed: nobody waits for this result any more
        pass


def _settle(future: asyncio.Future[Any], result: object, error: BaseException | None) -> None:
    if future.done():  # cancelled meanwhile (the round's task was)
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
