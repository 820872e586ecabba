"""An asyncio event loop in a daemon thread, for blocking callers (tests, tools, benchmarks).

Contract: `start()` returns once the loop runs; `run(factory)` runs `factory()` on the loop and
returns its result (or raises its exception) in the caller's thread; `stop()` cancels whatever
is still running on the loop, closes the loop and joins the thread. `stop()` is idempotent.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["LoopThread"]

_T = TypeVar("_T")
_JOIN_TIMEOUT_S = 10.0


class LoopThread:
    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name=name, daemon=True)
        self._running = threading.Event()

    def start(self) -> None:
        self._thread.start()
        if not self._running.wait(_JOIN_TIMEOUT_S):
            raise TimeoutError(f"event loop thread {self._thread.name} did not start")

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._running.set)
        try:
            self._loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def run(self, factory: Callable[[], Awaitable[_T]], timeout_s: float = _JOIN_TIMEOUT_S) -> _T:
        async def call() -> _T:
            return await factory()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout_s)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                raise TimeoutError(f"event loop thread {self._thread.name} did not stop")
        elif not self._loop.is_closed() and self._thread.ident is None:
            self._loop.close()  # never started
