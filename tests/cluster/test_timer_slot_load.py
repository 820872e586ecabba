"""A new timer leader's book misses nothing folded while it reads its first buckets
(`cluster.timers.Slot._load`): the follower keeps folding the committed timer log into the
index during the read (off the event loop), and a batch folded after the read took its
snapshot must still reach the book. Found in the module run of tests/cluster/test_timers.py:
one timer of 200 stayed pending until the next leader (the index held it, the book did not).

The slot runs against a real on-disk index; the replica and follower are stand-ins with the
few fields `_load` reads (no node is started)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace

from cluster.timers import Slot
from storage.timer_index import TimerIndex
from timers.faults import NO_FAULTS
from timers.types import TimerBatch, TimerConfig

H = 3_600_000


def test_a_batch_folded_while_the_new_leader_reads_its_buckets_reaches_its_book(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        now = int(time.time() * 1000)  # the slot reads the wall clock for its window
        index = TimerIndex.open(tmp_path / "timer_index", H)
        index.add(TimerBatch(now + 60_000, 0, 1))
        snapshot_taken, folded = threading.Event(), threading.Event()
        read = index.buckets  # the window's buckets, read in one pass

        def bucket_read_racing_the_fold(wanted: Iterable[int]) -> dict[int, list[TimerBatch]]:
            batches = read(wanted)  # the read's snapshot ...
            snapshot_taken.set()
            folded.wait(5)  # ... then the follower folds a batch before the read returns
            return batches

        index.buckets = bucket_read_racing_the_fold  # type: ignore[method-assign]
        node = SimpleNamespace(log=SimpleNamespace(last_index=0), applied_index=0)
        replica = SimpleNamespace(node=node, high_watermark=1, group="__timers.u/0", partition=0)
        follower = SimpleNamespace(index=index, on_item=None, caught_up=_no_wait, replica=replica)
        slot = Slot.__new__(Slot)
        slot.follower, slot.replica = follower, replica  # type: ignore[assignment]
        slot.host = SimpleNamespace(  # type: ignore[assignment]
            config=TimerConfig(bucket_ms=H), faults=NO_FAULTS
        )
        slot.source = SimpleNamespace(name="t")  # type: ignore[assignment]
        slot.term, slot.book, slot._wake = 1, None, asyncio.Event()
        loading = asyncio.create_task(slot._load())
        assert await asyncio.to_thread(snapshot_taken.wait, 5), "the bucket was never read"
        late = TimerBatch(now + 61_000, 1, 2)  # committed now: the follower folds it
        index.add(late)
        if follower.on_item is not None:
            follower.on_item(late)
        folded.set()
        book = await loading
        assert book is not None
        assert index.pending == 3
        assert book.pending == 3, "the batch folded during the bucket read is not in the book"
        assert book.holds(0) and book.holds(1)

    asyncio.run(scenario())


async def _no_wait(offset: int) -> None:
    return None
