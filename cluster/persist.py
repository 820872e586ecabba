"""The disk work of a MultiRaft round, on the storage thread (`cluster.multiraft`).

Every Ready's writes, then one group commit (`sync_logs`: one fsync per dirty log, in
parallel), then one fsync of the node's state journal for the terms and votes that changed; the
round's messages that need them go out only after this returns. A failed write or fsync stops
the node here, on the storage thread (`cluster.failstop`): it is never retried, and the process
ends before the event loop could send anything the failed persist should back. A replica whose
write raises anything else (a bug) is returned, to quarantine, while the others' writes go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial

from cluster.failstop import FailStop, storage_failure
from cluster.replica import Replica
from raft.ready import Ready
from storage import HardState, StateJournal, sync_logs

__all__ = ["WRITE_CHUNK_GROUPS", "describe", "has_disk_work", "write_all"]


def describe(work: Callable[[], object]) -> str:
    """A name for storage-thread work in the fail-stop line (a partial's function and its
    replica, if it has one)."""
    if isinstance(work, partial):
        group = next((a.group for a in work.args if isinstance(a, Replica)), None)
        name = getattr(work.func, "__qualname__", repr(work.func))
        return f"{name} ({group})" if group else name
    return getattr(work, "__qualname__", repr(work))


def has_disk_work(replica: Replica, ready: Ready) -> bool:
    """A Ready whose hard state changed only in its commit index needs no disk work: the host
    saves the hard state only when term or vote change (see `Replica.write_ready`)."""
    state = ready.hard_state
    return bool(
        ready.entries
        or ready.boundary is not None
        or ready.truncate_from is not None
        or (state is not None and (state.term, state.vote) != replica.saved_term_vote)
    )


# Groups whose writes one group commit covers. Bounded so that the files written and not yet
# fsynced stay well below the node's open-file cap: the handle cache fsyncs a dirty file it has
# to evict, one at a time, which would serialise the fsyncs a group commit runs in parallel.
WRITE_CHUNK_GROUPS = 512


def write_all(
    readies: list[tuple[Replica, Ready]],
    journal: StateJournal,
    maintenance: Sequence[Callable[[], object]] = (),
    fail_stop: FailStop | None = None,
    on_fsync: Callable[[float], object] = lambda seconds: None,
) -> tuple[list[object], list[tuple[Replica, Exception]]]:
    """Storage thread: every Ready's writes, group-committed (one fsync per dirty log, in
    parallel, `WRITE_CHUNK_GROUPS` logs at a time), then one fsync of the state journal; then
    the maintenance work (`MultiRaft.maintain`). Returns each work's result or exception, and
    the replicas whose writes raised an error other than a storage failure (to quarantine: the
    others' writes go on, theirs are not synced and their messages never sent).

    A failed write or fsync (any of them) calls `fail_stop` here, on the storage thread, so the
    process ends before the event loop could send anything the failed persist should back;
    with an injected exit, `NodeFailStopped` is raised instead of returning."""
    stop = fail_stop or FailStop()
    states: dict[str, HardState | None] = {}
    failed: list[tuple[Replica, Exception]] = []
    for start in range(0, len(readies), WRITE_CHUNK_GROUPS):
        chunk = readies[start : start + WRITE_CHUNK_GROUPS]
        written: list[Replica] = []
        for replica, ready in chunk:
            try:
                state = replica.write_ready(ready)
            except Exception as error:
                if storage_failure(error) is not None:
                    raise stop(f"writing the log of {replica.group}", error) from error
                failed.append((replica, error))
                continue
            written.append(replica)
            if state is not None:
                states[replica.group] = state
        # every log that wrote is dirty; the others cost nothing (sync_logs skips clean logs)
        try:
            started = time.perf_counter()
            if sync_logs(replica.segmented for replica in written):
                on_fsync(time.perf_counter() - started)  # the fsync latency metric
        except Exception as error:  # never retried: the kernel may have dropped the pages
            groups = ", ".join(replica.group for replica, _ in chunk[:8])
            more = f" and {len(chunk) - 8} more" if len(chunk) > 8 else ""
            raise stop(f"the group commit (fsync) of {groups}{more}", error) from error
    try:
        journal.save_many(states)
    except Exception as error:
        raise stop(
            f"saving term/vote of {len(states)} group(s) in {journal.path}", error
        ) from error
    outcomes: list[object] = []
    for work in maintenance:
        try:
            outcomes.append(work())
        except Exception as error:  # handed to the caller's future
            if storage_failure(error) is not None:
                raise stop(f"maintenance {describe(work)}", error) from error
            outcomes.append(error)
    return outcomes, failed
