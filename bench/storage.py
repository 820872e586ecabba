"""Storage benchmark: the segmented log against raw `os.write` of the same bytes, in one run.

    python -m bench.storage [--dir DIR] [--scale 1.0]

Measures appends of 1 KiB records in batches of 1, 16 and 256 with fsync `never` and `always`
(one fsync per batch, the same cadence as the raw baseline), group commit across many logs, and
sequential reads. Prints a table, then one JSON line of ratios (log rate / raw rate): higher is
better, 1.0 is parity with the raw file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from storage import FileHandles, FsyncPolicy, LogConfig, SegmentedLog, sync_logs

RECORD_BYTES = 1024
BATCH_SIZES = (1, 16, 256)


@dataclass(frozen=True, slots=True)
class Row:
    case: str
    batches: int
    log_mb_s: float
    raw_mb_s: float

    @property
    def ratio(self) -> float:
        return self.log_mb_s / self.raw_mb_s if self.raw_mb_s else 0.0


def _timed(action: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _raw_writes(path: str, batch: bytes, count: int, fsync: bool) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:

        def run() -> None:
            for _ in range(count):
                os.write(fd, batch)
                if fsync:
                    os.fsync(fd)

        return _timed(run)
    finally:
        os.close(fd)


def _log_appends(directory: str, batch: bytes, records: int, count: int, fsync: bool) -> float:
    policy = FsyncPolicy.parse("always" if fsync else "never")
    with SegmentedLog(directory, LogConfig(fsync=policy)) as log:

        def run() -> None:
            for _ in range(count):
                log.append(batch, 1, records, 0)

        return _timed(run)


def _paired(
    repeats: int, raw: Callable[[int], float], log: Callable[[int], float]
) -> tuple[float, float]:
    """Best of `repeats` for each side, alternating which goes first, with dirty pages written
    back before every timed run so neither side pays for the other's write-back."""
    raw_times: list[float] = []
    log_times: list[float] = []
    for attempt in range(repeats):
        order = [(raw, raw_times), (log, log_times)]
        for measure, times in order if attempt % 2 == 0 else reversed(order):
            os.sync()
            times.append(measure(attempt))
    return min(raw_times), min(log_times)


def bench_append_case(root: str, records: int, scale: float, fsync: bool) -> Row:
    batch = os.urandom(RECORD_BYTES * records)
    if fsync:
        count = max(20, int(400 * scale / max(1, records // 16)))
    else:
        count = max(50, int(48 * 1024 * scale / records))
    megabytes = count * len(batch) / 1e6
    raw, log = _paired(
        3,
        lambda n: _raw_writes(f"{root}/raw{records}-{n}", batch, count, fsync),
        lambda n: _log_appends(f"{root}/log{records}-{n}", batch, records, count, fsync),
    )
    policy = "always" if fsync else "never"
    return Row(
        f"append {records:>3} x 1KiB fsync={policy}", count, megabytes / log, megabytes / raw
    )


def bench_appends(root: str, scale: float, fsync: bool) -> list[Row]:
    return [bench_append_case(root, records, scale, fsync) for records in BATCH_SIZES]


def bench_group_commit(root: str, scale: float) -> Row:
    """16 partitions each take one 16-record batch, then one group commit; raw does the same
    writes to 16 plain files and fsyncs each."""
    partitions, rounds = 16, max(10, int(40 * scale))
    batch = os.urandom(RECORD_BYTES * 16)
    megabytes = partitions * rounds * len(batch) / 1e6
    handles = FileHandles(max_open=64)
    logs = [SegmentedLog(f"{root}/gc{n}", LogConfig(), handles=handles) for n in range(partitions)]
    fds = [
        os.open(f"{root}/gcraw{n}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for n in range(partitions)
    ]

    def run_log() -> None:
        for _ in range(rounds):
            for each in logs:
                each.append(batch, 1, 16, 0, sync=False)
            sync_logs(logs)

    def run_raw() -> None:
        for _ in range(rounds):
            for fd in fds:
                os.write(fd, batch)
            for fd in fds:
                os.fsync(fd)

    try:
        log_s, raw_s = _timed(run_log), _timed(run_raw)
    finally:
        for each in logs:
            each.close()
        for fd in fds:
            os.close(fd)
    return Row(
        "group commit 16 logs x 16 x 1KiB",
        partitions * rounds,
        megabytes / log_s,
        megabytes / raw_s,
    )


def bench_reads(root: str, scale: float) -> Row:
    records = 256
    batch = os.urandom(RECORD_BYTES * records)
    count = max(50, int(256 * scale))
    directory, raw_path = f"{root}/reads", f"{root}/reads.raw"
    with SegmentedLog(directory, LogConfig(fsync=FsyncPolicy.parse("never"))) as log:
        for _ in range(count):
            log.append(batch, 1, records, 0)
    with open(raw_path, "wb") as file:
        for _ in range(count):
            file.write(batch)
    megabytes = count * len(batch) / 1e6
    chunk = 4 * 1024 * 1024

    def read_log() -> None:
        with SegmentedLog(directory, LogConfig(fsync=FsyncPolicy.parse("never"))) as log:
            index = log.first_index
            while index <= log.last_index:
                for entry in log.read_from(index, chunk):
                    index = entry.index + 1

    def read_raw() -> None:
        fd = os.open(raw_path, os.O_RDONLY)
        try:
            position = 0
            while data := os.pread(fd, chunk, position):
                position += len(data)
        finally:
            os.close(fd)

    read_log()  # warm the page cache for both
    read_raw()
    raw_s, log_s = _paired(3, lambda _: _timed(read_raw), lambda _: _timed(read_log))
    return Row("sequential read (4 MiB reads)", count, megabytes / log_s, megabytes / raw_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir here)")
    parser.add_argument("--scale", type=float, default=1.0, help="work multiplier (default 1.0)")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="flotilla-bench-", dir=args.dir or os.getcwd())
    try:
        never = bench_appends(root, args.scale, fsync=False)
        always = bench_appends(root, args.scale, fsync=True)
        group = bench_group_commit(root, args.scale)
        reads = bench_reads(root, args.scale)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = [*never, *always, group, reads]
    print(f"{'case':<38} {'batches':>8} {'log MB/s':>10} {'raw MB/s':>10} {'ratio':>7}")
    for row in rows:
        rates = f"{row.log_mb_s:>10.1f} {row.raw_mb_s:>10.1f} {row.ratio:>7.2f}"
        print(f"{row.case:<38} {row.batches:>8} {rates}")
    summary = {
        "append_vs_raw": {
            "never": {
                str(size): round(row.ratio, 3) for size, row in zip(BATCH_SIZES, never, strict=True)
            },
            "always": {
                str(size): round(row.ratio, 3)
                for size, row in zip(BATCH_SIZES, always, strict=True)
            },
        },
        "group_commit_vs_raw": round(group.ratio, 3),
        "read_vs_raw": round(reads.ratio, 3),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
