"""The node's hard-state journal: replay, the last record wins, torn tails, compaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import DamagedLog, HardState, StateJournal


def test_states_survive_reopen_and_the_last_record_wins(tmp_path: Path) -> None:
    journal = StateJournal(tmp_path / "j")
    journal.save_many({"t/0": HardState(1, "n1", 0), "t/1": HardState(2, None, 0)})
    journal.save_many({"t/0": HardState(3, "n2", 7)})
    journal.forget(["t/1"])
    journal.close()
    reopened = StateJournal(tmp_path / "j")
    assert reopened.states() == {"t/0": HardState(3, "n2", 7)}
    assert reopened.load("t/1") == HardState()
    assert reopened.truncated_bytes == 0


def test_a_torn_or_corrupt_tail_is_cut_and_earlier_records_kept(tmp_path: Path) -> None:
    journal = StateJournal(tmp_path / "j")
    journal.save_many({"a": HardState(1, "n1", 0)})
    journal.save_many({"b": HardState(5, "n3", 0)})
    journal.close()
    raw = (tmp_path / "j").read_bytes()
    for damaged in (raw[:-3], raw[:-1] + bytes([raw[-1] ^ 0x40])):
        (tmp_path / "j").write_bytes(damaged)
        reopened = StateJournal(tmp_path / "j")
        assert reopened.states() == {"a": HardState(1, "n1", 0)}  # the damaged record is not served
        assert reopened.truncated_bytes > 0
        reopened.save_many({"c": HardState(2, None, 0)})  # and the journal is writable again
        reopened.close()
        assert StateJournal(tmp_path / "j").states() == {
            "a": HardState(1, "n1", 0),
            "c": HardState(2, None, 0),
        }


def test_compaction_keeps_one_record_per_group(tmp_path: Path) -> None:
    journal = StateJournal(tmp_path / "j", compact_factor=2, compact_slack=4)
    for term in range(1, 50):
        journal.save_many({"g": HardState(term, "n1", 0), "h": HardState(term, None, 0)})
    size_after = (tmp_path / "j").stat().st_size
    journal.close()
    assert size_after < 20 * 40  # rewritten, not 98 records
    assert StateJournal(tmp_path / "j").states() == {
        "g": HardState(49, "n1", 0),
        "h": HardState(49, None, 0),
    }


def test_a_damaged_record_with_valid_records_after_it_is_refused(tmp_path: Path) -> None:
    # cutting there, as at a torn tail, would take back durable terms and votes (a node could
    # then vote twice in a term): the journal is damaged and the node must not start on it
    journal = StateJournal(tmp_path / "j")
    for term in range(1, 11):
        journal.save_many({"g": HardState(term, "n1", 0)})
    journal.close()
    raw = bytearray((tmp_path / "j").read_bytes())
    record = len(raw) // 10
    raw[3 * record + 14] ^= 0x04  # inside the 4th record's body
    (tmp_path / "j").write_bytes(raw)
    with pytest.raises(DamagedLog) as caught:
        StateJournal(tmp_path / "j")
    assert caught.value.position == 3 * record
    assert (tmp_path / "j").read_bytes() == raw  # left as it was


def test_a_new_journal_in_a_new_directory_survives_a_crash_after_its_first_save() -> None:
    """A vote saved in a journal just created in a directory just made (a fresh node's data
    directory) survives power loss: the journal's name, its directory's and every ancestor's
    entries are durable before the first save returns. Before, only the journal's own directory
    was fsynced, so the whole directory could vanish with the vote (the Raft simulator on a
    simulated disk found two leaders in one term this way)."""
    import random

    from storage.simdisk import SimDisk

    lost = []
    for seed in range(40):
        disk = SimDisk(random.Random(seed))
        disk.makedirs("/data/n1")  # as `os.makedirs(data_dir)`: nothing fsynced
        journal = StateJournal("/data/n1/raft-state.journal", disk=disk)
        journal.save_many({"t/0": HardState(1, "n3", 0)})
        disk.crash()
        if disk.kind("/data/n1/raft-state.journal") is None:
            lost.append(seed)
            continue
        reopened = StateJournal("/data/n1/raft-state.journal", disk=disk)
        if reopened.load("t/0") != HardState(1, "n3", 0):
            lost.append(seed)
    assert lost == [], f"the saved vote was lost after a crash on seeds {lost}"
