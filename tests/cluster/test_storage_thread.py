"""The storage thread: work in the order handed over, each outcome on its own future, and a
shutdown that runs what was queued and takes nothing more."""

from __future__ import annotations

import asyncio
import threading

import pytest

from cluster.storage_thread import StorageThread


class Boom(BaseException):
    """Not an Exception: the thread must settle even these and go on."""


def test_work_runs_in_order_on_one_thread_and_settles_its_future() -> None:
    asyncio.run(asyncio.wait_for(_in_order(), 20))


async def _in_order() -> None:
    storage = StorageThread("test-storage")
    done: list[int] = []
    threads: set[str] = set()

    def work(n: int) -> int:
        threads.add(threading.current_thread().name)
        done.append(n)
        return n * 10

    def fail(error: BaseException) -> None:
        raise error

    try:
        loop = asyncio.get_running_loop()
        futures = [storage.run(work, n) if n % 2 else loop.run_in_executor(storage, work, n)
                   for n in range(40)]  # fmt: skip
        failing = storage.run(fail, OSError(5, "EIO"))
        boom = storage.submit(fail, Boom())
        after = storage.run(work, 40)
        assert await asyncio.gather(*futures) == [n * 10 for n in range(40)]
        with pytest.raises(OSError, match="EIO"):
            await failing
        with pytest.raises(Boom):
            boom.result(timeout=10)
        assert await after == 400
        assert done == list(range(41)) and threads == {"test-storage"}
    finally:
        storage.shutdown(wait=True)


def test_a_shutdown_runs_the_queued_work_then_refuses_more() -> None:
    asyncio.run(asyncio.wait_for(_shutdown(), 20))


async def _shutdown() -> None:
    storage = StorageThread("test-storage")
    gate = threading.Event()
    ran: list[str] = []
    blocked = storage.submit(gate.wait, 10)
    queued = storage.run(ran.append, "queued")
    cancelled = storage.run(ran.append, "cancelled by its waiter")
    cancelled.cancel()  # the work still runs (disk work is never dropped); nothing settles it
    gate.set()
    storage.shutdown(wait=True)
    assert blocked.result(timeout=10) is True and ran == ["queued", "cancelled by its waiter"]
    await queued
    with pytest.raises(RuntimeError, match="shut down"):
        storage.run(ran.append, "late")
    with pytest.raises(RuntimeError, match="shut down"):
        storage.submit(ran.append, "late")
