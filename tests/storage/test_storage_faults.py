"""The disk fault hook (`storage.faults`): armed by FLOTILLA_DISK_FAULTS or `arm_faults()`, it fails the
storage layer's writes and fsyncs with EIO / ENOSPC as the control file says."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import (
    FileHandles,
    HardState,
    LogConfig,
    SegmentedLog,
    StateJournal,
    StorageFailed,
    faults,
)
from storage.disk import OS_DISK, arm_faults, disarm_faults

CONFIG = LogConfig(segment_bytes=8192, max_batch_bytes=4096)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def control(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "faults.json"
    arm_faults(str(path))
    try:
        yield path
    finally:
        disarm_faults()


def _set(control: Path, content: dict[str, str]) -> None:
    # a new size or mtime makes the hook re-read it; pad so two writes in one tick still differ
    previous = control.stat().st_size if control.exists() else -1
    text = json.dumps(content)
    if len(text) == previous:
        text += " "
    control.write_text(text)


def test_the_hook_is_disarmed_unless_the_environment_arms_it() -> None:
    assert faults.ENV_VAR not in os.environ
    assert OS_DISK.faults is None


def test_an_fsync_fault_fails_the_flush_and_stops_the_log(tmp_path: Path, control: Path) -> None:
    log = SegmentedLog(tmp_path / "log", CONFIG, handles=FileHandles(16))
    log.append(b"a", 1, 1, 0)  # no control file yet: no faults
    log.append(b"b", 1, 1, 0, sync=False)
    _set(control, {"fsync": "EIO"})
    with pytest.raises(StorageFailed) as caught:
        log.flush()
    assert caught.value.errno == errno.EIO
    _set(control, {})
    with pytest.raises(StorageFailed):
        log.flush()  # never retried, though the disk "recovered"
    assert log.durable_index == 1
    log.close()
    with SegmentedLog(tmp_path / "log", CONFIG, handles=FileHandles(16)) as reopened:
        assert reopened.last_index >= 1  # recovery decides what survived
        reopened.append(b"c", 1, 1, 0)


def test_a_write_fault_refuses_the_append(tmp_path: Path, control: Path) -> None:
    log = SegmentedLog(tmp_path / "log", CONFIG, handles=FileHandles(16))
    log.append(b"a", 1, 1, 0)
    _set(control, {"write": "ENOSPC"})
    with pytest.raises(StorageFailed) as caught:
        log.append(b"b", 1, 1, 0)
    assert caught.value.errno == errno.ENOSPC
    assert (log.last_index, log.durable_index) == (1, 1)
    log.close()


def test_journal_faults_propagate(tmp_path: Path, control: Path) -> None:
    journal = StateJournal(tmp_path / "journal")
    journal.save_many({"g": HardState(1, None, 0)})
    _set(control, {"write": "EIO", "fsync": "EIO"})
    with pytest.raises(StorageFailed) as caught:
        journal.save_many({"g": HardState(5, "x", 0)})
    assert caught.value.errno == errno.EIO
    _set(control, {})
    with pytest.raises(StorageFailed):
        journal.save_many({"g": HardState(5, "x", 0)})
    journal.close()
    assert StateJournal(tmp_path / "journal").load("g") == HardState(1, None, 0)


def test_an_invalid_control_file_injects_nothing(tmp_path: Path, control: Path) -> None:
    control.write_text('{"fsync": "EBADNESS"}')
    with SegmentedLog(tmp_path / "log", CONFIG, handles=FileHandles(16)) as log:
        log.append(b"a", 1, 1, 0)
        assert log.durable_index == 1


_CHILD = textwrap.dedent(
    """
    import sys
    from storage import LogConfig, SegmentedLog, StorageFailed
    from storage.disk import OS_DISK
    assert OS_DISK.faults is not None
    log = SegmentedLog(sys.argv[1], LogConfig())
    try:
        log.append(b"x", 1, 1, 0)
    except StorageFailed as error:
        print("failed", error.errno)
        sys.exit(75)
    print("appended", log.durable_index)
    """
)


@pytest.mark.parametrize(
    ("content", "expected"), [({}, "appended 1"), ({"fsync": "EIO"}, "failed 5")]
)
def test_the_environment_variable_arms_the_hook_in_a_new_process(
    tmp_path: Path, content: dict[str, str], expected: str
) -> None:
    control = tmp_path / "faults.json"
    control.write_text(json.dumps(content))
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "log")],
        env={**os.environ, faults.ENV_VAR: str(control), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.stdout.strip() == expected, child.stderr
