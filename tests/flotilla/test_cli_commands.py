"""The client CLI on a real 3-node cluster (one for the module): produce (keys per line, headers,
acks, a file, the summary), consume (every partition merged, the tail by default, each start
option, formats, --max, --idle-timeout, -e, Ctrl-C), --bootstrap lists, topic list and describe
(under-replicated partitions marked once a node is down: the module's last test)."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from harness import free_port, wait_until

from cluster.local import LocalCluster
from flotilla import Client, cli

pytestmark = pytest.mark.integration
# replace_after_s: a dead node's replicas stay listed (as down) rather than being dropped
CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nreplace_after_s = 600\n"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cli"), 3, config_text=CONFIG) as local:
        local.start()
        with Client(local.bootstrap, timeout_s=30) as client:
            client.create_topic("three", partitions=3, replication_factor=3)
        yield local


class Cli:
    """Runs `flotilla` in this process (main(argv)) and hands back (status, stdout, stderr)."""

    def __init__(self, capsys: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch):
        self.capsys = capsys
        self.monkeypatch = monkeypatch

    def __call__(self, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
        import io

        self.capsys.readouterr()
        self.monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        status = cli.main(list(args))
        out, err = self.capsys.readouterr()
        assert b"Traceback" not in err
        return status, out.decode(errors="replace"), err.decode()


@pytest.fixture
def run(capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(capsysbinary, monkeypatch)


def test_produce_keys_per_line_headers_file_and_summary(
    cluster: LocalCluster, run: Cli, tmp_path: Path
) -> None:
    boot = ["--bootstrap", cluster.bootstrap]
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"alice:1\nbob:2\nalice:3\r\n")
    status, out, err = run(
        "produce", "three", str(lines), "--key-separator", ":", "-H", "src=file", "-H", "n=",
        "--acks", "leader", *boot,
    )  # fmt: skip
    assert status == 0, err
    placed = [tuple(map(int, line.split())) for line in out.splitlines()]
    assert len(placed) == 3 and placed[0][0] == placed[2][0]  # one key, one partition
    assert "produced 3 records, 16 bytes in" in err and "records/s" in err and "MB/s" in err
    with Client(cluster.bootstrap, timeout_s=30) as client:
        partition, offset = placed[2]
        (record,) = client.read("three", partition, offset, max_records=1)
    assert (record.key, record.value, record.headers) == (
        b"alice",
        b"3",
        (("src", b"file"), ("n", b"")),
    )

    status, out, err = run("produce", "three", "--partition", "1", *boot, stdin=b"x\ny\n")
    assert status == 0 and [line.split()[0] for line in out.splitlines()] == ["1", "1"]
    assert "produced 2 records, 2 bytes" in err


def test_produce_stops_at_a_line_without_the_key_separator(cluster: LocalCluster, run: Cli) -> None:
    status, out, err = run(
        "produce", "three", "--key-separator", "=", "--bootstrap", cluster.bootstrap,
        stdin=b"a=1\nbroken\nc=3\n",
    )  # fmt: skip
    assert status == 2
    assert "line 2 ('broken') has no key separator '='" in err
    assert len(out.splitlines()) == 1 and "produced 1 records" in err  # what came before: written


def _as_from_a_terminal() -> None:
    """In the child, before exec: SIGINT unblocked and at its default, as a shell starts a
    command (a test worker's threads may leave it blocked or ignored, and a child inherits
    both: the consumer then never saw the test's Ctrl-C)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _fill(cluster: LocalCluster, topic: str, per_partition: int) -> None:
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic(topic, partitions=3, replication_factor=3)
        for partition in range(3):
            client.produce_batch(
                topic, [f"p{partition}-{n}".encode() for n in range(per_partition)], partition
            )


def test_consume_merges_every_partition_and_each_start_option(
    cluster: LocalCluster, run: Cli
) -> None:
    _fill(cluster, "merged", 4)
    boot = ["--bootstrap", cluster.bootstrap]
    everything = {f"p{p}-{n}" for p in range(3) for n in range(4)}

    status, out, err = run("consume", "merged", "--from-beginning", "-e", *boot)
    assert status == 0, err
    assert set(out.splitlines()) == everything and len(out.splitlines()) == 12
    assert "consumed 12 records" in err
    status, out, _ = run("consume", "merged", "--partition", "1", "--from-beginning", "-e", *boot)
    assert out.splitlines() == [f"p1-{n}" for n in range(4)]
    status, out, _ = run("consume", "merged", "--offset", "2", "-e", *boot)
    assert sorted(out.splitlines()) == sorted(f"p{p}-{n}" for p in range(3) for n in (2, 3))
    status, out, _ = run("consume", "merged", "--last", "1", "-e", *boot)
    assert sorted(out.splitlines()) == ["p0-3", "p1-3", "p2-3"]
    status, out, _ = run("consume", "merged", "--last", "100", "-e", *boot)
    assert len(out.splitlines()) == 12  # at most what each partition has
    status, out, err = run(
        "consume", "merged", "--from-beginning", "--max", "5", "--idle-timeout", "10", *boot
    )
    assert status == 0 and len(out.splitlines()) == 5 and "consumed 5 records" in err
    # a bad offset for this topic: the cluster's error, named, exit 1
    for end in ([], ["-e"]):
        status, _, err = run("consume", "merged", "--offset", "99", *end, *boot)
        assert status == 1
        assert "--offset 99 is out of range for merged/0: valid offsets are 0..4" in err
    status, _, err = run("consume", "merged", "--partition", "3", *boot)
    assert status == 1 and "partition 3 of topic 'merged' does not exist" in err


def test_consume_since_a_time(cluster: LocalCluster, run: Cli) -> None:
    boot = ["--bootstrap", cluster.bootstrap]
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("timed", partitions=2, replication_factor=3)
        for n in range(6):
            client.produce("timed", f"old-{n}".encode(), partition=n % 2)
        # timestamps are the producer's clock in ms: the cut lies strictly between old and new
        before = time.time()
        wait_until(lambda: time.time() > before + 0.01, 5, "the clock moves on")
        cut = datetime.now(UTC)
        wait_until(lambda: datetime.now(UTC).timestamp() > cut.timestamp() + 0.01, 5)
        for n in range(4):
            client.produce("timed", f"new-{n}".encode(), partition=n % 2)
    iso = cut.isoformat().replace("+00:00", "Z")
    status, out, _ = run("consume", "timed", "--since", iso, "-e", *boot)
    assert status == 0 and sorted(out.splitlines()) == [f"new-{n}" for n in range(4)]
    status, out, _ = run("consume", "timed", "--since", "-1h", "-e", *boot)
    assert len(out.splitlines()) == 10
    future = str(int(time.time() * 1000) + 3_600_000)
    status, out, _ = run("consume", "timed", "--since", future, "-e", *boot)
    assert status == 0 and out == ""


def test_consume_formats(cluster: LocalCluster, run: Cli) -> None:
    boot = ["--bootstrap", cluster.bootstrap]
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("shaped", partitions=1, replication_factor=3)
        client.produce("shaped", b"v1", key=b"k1", headers=[("h", b"x")])
        client.produce("shaped", b"\xff", partition=0)
    status, out, _ = run(
        "consume", "shaped", "--from-beginning", "-e", "-f", "%k %v %p %o %h", *boot
    )
    assert status == 0 and out.splitlines()[0] == "k1 v1 0 0 h=x"
    status, out, _ = run("consume", "shaped", "--from-beginning", "-e", "--format", "json", *boot)
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["key"] == "k1" and first["value"] == "v1" and first["headers"] == [["h", "x"]]
    assert first["partition"] == 0 and first["offset"] == 0 and first["timestamp_ms"] > 0
    assert (
        second["key"] is None and second["value"] == "/w==" and second["value_encoding"] == "base64"
    )


def test_consume_idle_timeout_ends_a_quiet_tail(cluster: LocalCluster, run: Cli) -> None:
    _fill(cluster, "quiet", 1)
    started = time.monotonic()
    status, out, err = run(
        "consume", "quiet", "--idle-timeout", "1.5", "--bootstrap", cluster.bootstrap
    )
    took = time.monotonic() - started
    assert status == 0 and out == "" and "consumed 0 records" in err  # the tail: nothing new
    assert 1.4 <= took < 8, took


class Reader:
    """Lines of a process's stdout, as they come."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.lines: queue.Queue[bytes] = queue.Queue()
        assert process.stdout is not None
        self.stdout = process.stdout
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.stdout:
            self.lines.put(line)


def test_consume_follows_the_tail_by_default_and_stops_cleanly_on_ctrl_c(
    cluster: LocalCluster,
) -> None:
    _fill(cluster, "tail", 2)  # old records: not printed, the tail is where it starts
    process = subprocess.Popen(
        [sys.executable, "-m", "flotilla", "consume", "tail", "--bootstrap",
         f"127.0.0.1:{free_port()},{cluster.bootstrap}"],  # a dead address first: the list
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        preexec_fn=_as_from_a_terminal,  # noqa: PLW1509 (two signal calls, no lock taken)
    )  # fmt: skip
    try:
        reader = Reader(process)
        seen: list[bytes] = []
        with Client(cluster.bootstrap, timeout_s=30) as client:
            deadline = time.monotonic() + 60
            sent = 0
            while not seen and time.monotonic() < deadline:  # until the consumer is at the tail
                client.produce("tail", f"new-{sent}".encode(), partition=sent % 3)
                sent += 1
                try:
                    seen.append(reader.lines.get(timeout=1))
                except queue.Empty:
                    continue
            assert seen, "the consumer printed nothing new within 60 s"
            assert seen[0].startswith(b"new-")
            for partition in range(3):  # every partition is followed
                client.produce("tail", f"more-{partition}".encode(), partition=partition)
            more: set[bytes] = set()
            deadline = time.monotonic() + 30
            while len(more) < 3 and time.monotonic() < deadline:
                try:
                    line = reader.lines.get(timeout=1)
                except queue.Empty:
                    continue
                if line.startswith(b"more-"):
                    more.add(line.strip())
            assert more == {b"more-0", b"more-1", b"more-2"}
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 130, err
        assert b"Traceback" not in err and b"consumed" in err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_topic_list_shows_partitions_and_replication_factor(
    cluster: LocalCluster, run: Cli
) -> None:
    status, out, _ = run("topic", "list", "--bootstrap", f"{cluster.bootstrap},127.0.0.1:1")
    assert status == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NAME", "PARTITIONS", "REPLICATION-FACTOR"]
    assert ["three", "3", "3"] in rows and ["shaped", "1", "3"] in rows
    assert [row[0] for row in rows[1:]] == sorted(row[0] for row in rows[1:])


def test_topic_describe_marks_under_replicated_partitions(cluster: LocalCluster, run: Cli) -> None:
    """Last in the module: it stops a node."""
    boot = ["--bootstrap", cluster.bootstrap]

    def healthy() -> bool:
        _, shown, _ = run("topic", "describe", "three", *boot)
        return shown.count(" ok ") == 3 and "learners" in shown

    wait_until(healthy, 30, "every partition of 'three' ok (a leader and three live voters)")
    victim = "n3"
    cluster.kill(victim)

    def marked() -> bool:
        """Every partition lists the dead replica as down and is marked, and the count line
        says so, in one answer (the node that answers may not have seen the death yet: each
        node's membership learns it in its own time)."""
        status, shown, _ = run("topic", "describe", "three", *boot)
        rows = [line for line in shown.splitlines() if f"{victim}(down)" in line]
        return (
            status == 0
            and len(rows) == 3
            and all("UNDER-REPLICATED" in row for row in rows)
            and "3 of 3 partitions under-replicated or offline" in shown
        )

    wait_until(marked, 30, "describe marks partitions with a dead replica under-replicated")
