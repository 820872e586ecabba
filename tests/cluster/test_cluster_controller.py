"""The control plane: replicated topic metadata among real pysyncobj controllers on loopback."""

from __future__ import annotations

import collections
import contextlib
import gzip
import os
import pickle
import socket
import stat
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import free_port, wait_until
from pysyncobj import pickle as syncobj_pickle
from pysyncobj import serializer as syncobj_serializer
from pysyncobj.journal import FileJournal
from pysyncobj.transport import TCPTransport

from cluster import controller
from cluster.controller import (
    ControlPlaneError,
    CreateOutcome,
    MetadataStore,
    TopicSpec,
    UpdateOutcome,
)
from cluster.controller_journal import DurableDumps, DurableJournal, JournalCorrupt
from cluster.failstop import FAIL_STOP_EXIT_CODE

SECRET = "test-secret"


@pytest.fixture
def controllers(tmp_path: Path) -> Iterator[dict[str, MetadataStore]]:
    addresses = {f"c{n}": f"127.0.0.1:{free_port()}" for n in range(1, 4)}
    stores = {
        node: MetadataStore(node, addresses, SECRET, str(tmp_path / node), election_timeout_s=0.2)
        for node in addresses
    }
    try:
        wait_until(lambda: all(s.has_leader for s in stores.values()), what="a controller leader")
        yield stores
    finally:
        for store in stores.values():
            store.close()


def _spec(name: str, partitions: int = 3) -> TopicSpec:
    return TopicSpec(name, partitions, 3, assignment=(("n1", "n2", "n3"),) * partitions, uid="u1")


def test_topics_replicate_create_is_idempotent_and_conflicts_are_refused(
    controllers: dict[str, MetadataStore],
) -> None:
    c1, c2, c3 = controllers.values()
    assert c1.create_topic(_spec("orders")).result(10) is CreateOutcome.CREATED
    wait_until(lambda: all("orders" in s.topics() for s in (c1, c2, c3)), what="replication")
    assert c3.topics()["orders"] == _spec("orders")
    assert c2.create_topic(_spec("orders")).result(10) is CreateOutcome.EXISTS
    assert c2.create_topic(_spec("orders", partitions=5)).result(10) is CreateOutcome.CONFLICT
    assert c3.delete_topic("orders").result(10) is True
    assert c3.delete_topic("orders").result(10) is False
    wait_until(lambda: not any("orders" in s.topics() for s in (c1, c2, c3)), what="deletion")


def test_a_majority_of_controllers_keeps_working(controllers: dict[str, MetadataStore]) -> None:
    stores = list(controllers.values())
    stores[0].close()
    wait_until(lambda: stores[1].has_leader and stores[2].has_leader, what="a new leader")
    assert stores[1].create_topic(_spec("events")).result(15) is CreateOutcome.CREATED
    wait_until(lambda: "events" in stores[2].topics(), what="replication to the survivor")


def test_unauthenticated_traffic_is_dropped_unread(
    controllers: dict[str, MetadataStore], tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str, str]]:
            return (open, (str(marker), "w"))

    payload = zlib.compress(pickle.dumps(Evil()))
    host, port = next(iter(controllers.values()))._sync.selfNode.address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack("i", len(payload)) + payload)
        sock.settimeout(10)
        try:
            assert sock.recv(1024) == b""  # the controller hung up on us
        except ConnectionResetError:
            pass
    assert not marker.exists()
    assert all(not store.topics() for store in controllers.values())


def test_a_store_refuses_to_start_without_a_secret(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match="FLOTILLA_CLUSTER_SECRET"):
        MetadataStore("c1", {"c1": "127.0.0.1:1"}, "", str(tmp_path))
    with pytest.raises(ControlPlaneError, match="is not among the controllers"):
        MetadataStore("c9", {"c1": "127.0.0.1:1"}, SECRET, str(tmp_path))


def test_retention_is_updated_everywhere_and_method_numbers_stay(
    controllers: dict[str, MetadataStore],
) -> None:
    store = controllers["c1"]
    assert store.create_topic(_spec("kept")).result(timeout=10) is CreateOutcome.CREATED
    updated = UpdateOutcome.UPDATED
    assert store.update_topic("kept", retention_ms=60_000).result(timeout=10) is updated
    assert store.update_topic("kept", retention_bytes=1 << 20).result(timeout=10) is updated
    missing = store.update_topic("missing", retention_ms=1).result(timeout=10)
    assert missing is UpdateOutcome.MISSING
    # partitions are only added; of the assignment given, only the added ones' is taken
    wider = (("x", "y", "z"),) * 5
    grown = store.update_topic("kept", partitions=5, assignment=wider).result(timeout=10)
    assert grown is updated
    fewer = store.update_topic("kept", partitions=4, retention_ms=1).result(timeout=10)
    assert fewer is UpdateOutcome.FEWER

    def changed(each: MetadataStore) -> bool:
        spec = each.topics().get("kept")
        return spec is not None and (spec.retention_ms, spec.retention_bytes, spec.partitions) == (
            60_000,
            1 << 20,
            5,
        )

    wait_until(
        lambda: all(changed(each) for each in controllers.values()),
        what="the changes on every controller",
    )
    spec = store.topics()["kept"]
    assert (spec.partitions, spec.uid) == (5, "u1")
    assert spec.assignment == _spec("kept").assignment + (("x", "y", "z"),) * 2
    # pysyncobj's journal names replicated methods by number, in name order: a method added
    # later must not renumber those a journal written before it holds
    numbers = store._sync._methodToID
    assert numbers == {
        "create_topic_v0": 0,
        "delete_topic_v0": 1,
        "update_topic_v0": 2,
        "write_security_v0": 3,
    }


# -- durability: what a controller says reaches the disk first ----------------------------------
class _DiskImage:
    """What an OS crash would leave: a file's content as of its last fsync/fdatasync, under the
    names its directory had at the directory's last fsync. Unsynced writes are simply absent."""

    def __init__(self) -> None:
        self.files: dict[int, bytes] = {}  # inode -> content at its last fsync
        self.dirs: dict[str, dict[str, int]] = {}  # directory -> name -> inode at its last fsync
        self.lock = threading.Lock()

    def synced(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        info = os.fstat(fd)
        with self.lock:
            if stat.S_ISDIR(info.st_mode):
                self.dirs[path] = {e.name: e.inode() for e in os.scandir(path)}
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as file:
                    self.files[info.st_ino] = file.read()

    def read(self, path: Path) -> bytes | None:
        with self.lock:
            inode = self.dirs.get(str(path.parent), {}).get(path.name)
            return None if inode is None else self.files.get(inode)


def _journal_last_index(image: bytes | None, scratch: Path) -> int:
    """The last index in a crash image of a journal, read by pysyncobj's own journal reader."""
    if image is None:
        return 0
    scratch.write_bytes(image)
    journal = FileJournal(str(scratch))
    try:
        return int(journal[-1][1]) if len(journal) else 0
    finally:
        journal._destroy()


def _hard_state(image: bytes | None) -> tuple[int, object]:
    meta = syncobj_pickle.loads(image) if image else {}
    return meta.get("currentTerm", 0), meta.get("votedForNodeId")


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> _DiskImage:
    """Every fsync/fdatasync in this process (pysyncobj's threads included) is traced."""
    image = _DiskImage()
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def traced(fd: int, real: Callable[[int], None] = real) -> None:
            real(fd)
            image.synced(fd)

        monkeypatch.setattr(os, name, traced)
    return image


def test_votes_terms_and_appends_are_fsynced_before_a_controller_acts_on_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk: _DiskImage
) -> None:
    """Crash images taken at the moment a controller sends a vote request, a vote or an append's
    acknowledgement, and when a change is answered, must already hold what the message claims."""
    addresses = {f"c{n}": f"127.0.0.1:{free_port()}" for n in range(1, 4)}
    directory = {address: tmp_path / node for node, address in addresses.items()}
    violations: list[str] = []
    checked: collections.Counter[str] = collections.Counter()
    real_send = TCPTransport.send

    def send(transport: TCPTransport, node: Any, message: dict[str, Any]) -> Any:
        sender = transport._selfNode.address
        root = directory[sender]
        kind = message.get("type")
        if kind in ("request_vote", "response_vote"):
            voted = sender if kind == "request_vote" else node.id
            saved = _hard_state(disk.read(root / "controller.journal.meta"))
            checked[kind] += 1
            if saved != (message["term"], voted):
                violations.append(
                    f"{sender} sent {kind} at term {message['term']} for "
                    f"{voted}; a crash now leaves term/vote {saved}"
                )
        elif kind == "next_node_idx" and message["success"]:
            image = disk.read(root / "controller.journal")
            last = _journal_last_index(image, tmp_path / f"scratch-{sender.rsplit(':')[-1]}")
            checked[kind] += 1
            if last < message["next_node_idx"] - 1:
                violations.append(
                    f"{sender} acknowledged up to {message['next_node_idx'] - 1}"
                    f"; a crash now leaves its journal at {last}"
                )
        return real_send(transport, node, message)

    monkeypatch.setattr(TCPTransport, "send", send)
    stores = {
        node: MetadataStore(node, addresses, SECRET, str(tmp_path / node), election_timeout_s=0.2)
        for node in addresses
    }
    try:
        wait_until(lambda: all(s.has_leader for s in stores.values()), what="a controller leader")
        answered: list[str] = []

        def on_answer(_: object) -> None:  # runs on the leader's pysyncobj thread, as it answers
            leader = next(s for s in stores.values() if s._sync._isLeader())
            commit = leader._sync.getStatus()["commit_idx"]
            holding = [
                node
                for node, address in addresses.items()
                if _journal_last_index(
                    disk.read(directory[address] / "controller.journal"),
                    tmp_path / f"scratch-answer-{node}",
                )
                >= commit
            ]
            answered.append(commit)
            if len(holding) < 2:
                violations.append(
                    f"change answered at commit {commit}; a crash now leaves it on {holding} only"
                )

        for n in range(3):
            future = stores["c1"].create_topic(_spec(f"durable{n}"))
            future.add_done_callback(on_answer)
            assert future.result(15) is CreateOutcome.CREATED
        wait_until(lambda: len(answered) == 3, what="the answer callbacks")  # run after result()
    finally:
        for store in stores.values():
            store.close()
    assert checked["request_vote"] >= 1 and checked["response_vote"] >= 1, checked
    assert checked["next_node_idx"] >= 3 and len(answered) == 3, (checked, answered)
    assert not violations, "\n".join(violations[:8])


ACL = {"principal": "bob", "operation": "produce", "resource": "orders.*", "permission": "allow"}
TOKEN = {
    "op": "add_token",
    "hash": "0f" * 32,
    "principal": "bob",
    "token_id": "abc",
    "created_ms": 7,
}


def test_after_an_os_crash_the_controllers_keep_every_topic_change_and_compaction_is_safe(
    tmp_path: Path, disk: _DiskImage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Topic changes, one controller's journal compacted into a full dump; then every unsynced
    byte is dropped (the controllers restart on their crash images): every change is there.
    And no dump is renamed into place before its content is durable (a file system may make
    the rename durable before the data: the name would then hold an empty dump)."""
    early = tmp_path / "renamed-early.txt"  # appended to, so that a forked dump writer can say so
    real_replace = syncobj_serializer.atomicReplace

    def replace(source: str, target: str) -> Any:
        with open(source, "rb") as file:
            content = file.read()
        if disk.files.get(os.stat(source).st_ino) != content:
            with open(early, "a") as out:
                out.write(f"{source} renamed to {target} before its content was fsynced\n")
        return real_replace(source, target)

    monkeypatch.setattr(syncobj_serializer, "atomicReplace", replace)
    addresses = {f"c{n}": f"127.0.0.1:{free_port()}" for n in range(1, 4)}
    stores = {
        node: MetadataStore(node, addresses, SECRET, str(tmp_path / node), election_timeout_s=0.2)
        for node in addresses
    }
    try:
        wait_until(lambda: all(s.has_leader for s in stores.values()), what="a controller leader")
        for n in range(4):
            assert stores["c2"].create_topic(_spec(f"kept{n}")).result(15) is CreateOutcome.CREATED
        assert stores["c3"].delete_topic("kept0").result(15) is True
        # ACLs and tokens live beside the topics: kept by the dump and the journal alike
        assert stores["c2"].change_security({"op": "add_acl", "acl": ACL}).result(15) == 1
        wait_until(lambda: all(len(s.topics()) == 3 for s in stores.values()), what="replication")
        before = {node: s._sync.getStatus()["log_len"] for node, s in stores.items()}
        for store in stores.values():
            store._sync.forceLogCompaction()
        wait_until(
            lambda: all(s._sync.getStatus()["log_len"] < before[n] for n, s in stores.items()),
            what="compaction on every controller",
            detail=lambda: {n: s._sync.getStatus()["log_len"] for n, s in stores.items()},
        )
        assert stores["c1"].create_topic(_spec("after")).result(15) is CreateOutcome.CREATED
        assert stores["c1"].change_security(TOKEN).result(15) == 1
    finally:
        for store in stores.values():
            store.close()
    crashed = tmp_path / "crashed"
    for node in addresses:
        (crashed / node).mkdir(parents=True)
        for name in ("controller.journal", "controller.journal.meta", "controller.dump"):
            image = disk.read(tmp_path / node / name)
            if image is not None:
                (crashed / node / name).write_bytes(image)
    restarted = {
        node: MetadataStore(node, addresses, SECRET, str(crashed / node), election_timeout_s=0.2)
        for node in addresses
    }
    try:
        expected = {"kept1", "kept2", "kept3", "after"}
        wait_until(
            lambda: all(set(s.topics()) == expected for s in restarted.values()),
            what="every topic change after the crash",
            detail=lambda: {n: sorted(s.topics()) for n, s in restarted.items()},
        )
        wanted = ([ACL], {TOKEN["hash"]: ["bob", "abc", 7]})
        wait_until(
            lambda: all(s.security()[1:] == wanted for s in restarted.values()),
            what="the ACL and the token after the crash",
            detail=lambda: {n: s.security() for n, s in restarted.items()},
        )
    finally:
        for store in restarted.values():
            store.close()
    assert all((crashed / node / "controller.dump").exists() for node in addresses)
    assert not early.exists(), early.read_text()


def test_a_journal_written_by_pysyncobj_opens_and_ours_reads_back_in_pysyncobj(
    tmp_path: Path,
) -> None:
    theirs = FileJournal(str(tmp_path / "theirs"))
    for index in range(1, 6):
        theirs.add(b"\x01command" + bytes([index]), index, 2)
    theirs.deleteEntriesFrom(4)
    theirs.setCurrentTerm(3, "127.0.0.1:1")
    theirs._destroy()
    ours = DurableJournal(str(tmp_path / "theirs"), None)
    assert [ours[i] for i in range(len(ours))] == [
        (b"\x01command" + bytes([index]), index, 2) for index in range(1, 5)
    ]
    assert (ours.getCurrentTerm(), ours.getVotedForNodeId()) == (3, "127.0.0.1:1")
    ours.add(b"\x01more", 5, 3)
    ours.deleteEntriesTo(2)
    ours.setCurrentTerm(4, None)
    ours._destroy()
    again = FileJournal(str(tmp_path / "theirs"))
    assert [again[i][1:] for i in range(len(again))] == [(3, 2), (4, 2), (5, 3)]
    assert again[2][0] == b"\x01more"
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (4, None)
    again._destroy()


def test_a_store_refuses_to_run_on_a_journal_that_is_not_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should a pysyncobj make its journal some other way, the store says so and stops."""
    monkeypatch.setattr(controller, "durable_journal_installed", lambda _: contextlib.nullcontext())
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ControlPlaneError, match="FileJournal, not our DurableJournal"):
        MetadataStore("c1", {"c1": address}, SECRET, str(tmp_path))


def test_a_dump_in_pysyncobj_s_own_layout_loads(tmp_path: Path) -> None:
    """pysyncobj's own dumps hold the object's attribute dict first; ours, our state."""
    internal: tuple[object, ...] = ((b"\x00", 7, 2), (b"\x00", 6, 2), set())
    state = {"topics": {"t": _spec("t").to_wire()}, "version": 4, "_SyncObj__other": 1}
    path = tmp_path / "controller.dump"
    path.write_bytes(gzip.compress(syncobj_pickle.dumps((state, *internal))))
    loaded: list[dict[str, Any]] = []
    dumps = DurableDumps()
    dumps.bind(lambda: {"topics": {}, "version": 9}, loaded.append)
    assert dumps.read(str(path)) == internal and loaded == [state]
    dumps.write(str(path), internal)
    assert syncobj_pickle.loads(gzip.decompress(path.read_bytes())) == (
        {"topics": {}, "version": 9},
        *internal,
    )


def test_an_unreadable_term_vote_record_refuses_to_start(tmp_path: Path) -> None:
    """Read as empty it would mean term 0, no vote: a second vote in a term already voted in."""
    DurableJournal(str(tmp_path / "journal"), None)._destroy()
    (tmp_path / "journal.meta").write_bytes(b"")
    with pytest.raises(JournalCorrupt, match=r"journal\.meta.*vote twice"):
        DurableJournal(str(tmp_path / "journal"), None)


@pytest.mark.parametrize(
    ("operation", "expected"),
    [
        ("vote", "No space left on device"),  # a real ENOSPC: the file written is /dev/full
        ("append", "No space left on device"),
        ("fsync", "Input/output error"),  # the test harness's hook (FLOTILLA_DISK_FAULTS)
    ],
)
def test_a_failed_journal_write_stops_the_process_with_exit_75(
    tmp_path: Path, operation: str, expected: str
) -> None:
    """The process logs one CRITICAL line naming the file and exits 75 instead of going on as if
    the write had succeeded."""
    faults = tmp_path / "faults.json"
    script = f"""
import logging, os, sys
from cluster.controller_journal import DurableJournal
logging.basicConfig(level=logging.INFO)
journal = DurableJournal({str(tmp_path / "journal")!r}, None)
if {operation!r} == "vote":
    os.symlink("/dev/full", {str(tmp_path / "journal.meta.tmp")!r})
    journal.setCurrentTerm(7, "127.0.0.1:1")
elif {operation!r} == "append":
    os.close(journal._fd)
    journal._fd = os.open("/dev/full", os.O_WRONLY)
    journal.add(b"x", 1, 1)
else:
    open({str(faults)!r}, "w").write('{{"fsync": "EIO"}}')
    journal.add(b"x", 1, 1)
print("went on")
"""
    faults.write_text("{}")
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "FLOTILLA_DISK_FAULTS": str(faults)},
    )
    assert done.returncode == FAIL_STOP_EXIT_CODE, (done.returncode, done.stdout, done.stderr)
    assert "went on" not in done.stdout
    critical = [line for line in done.stderr.splitlines() if line.startswith("CRITICAL")]
    assert len(critical) == 1, done.stderr
    assert expected in critical[0] and "journal" in critical[0], critical[0]
