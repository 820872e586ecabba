"""Is our Toxiproxy stand-in a bottleneck? Throughput and round trips, proxied vs direct.

Run:  python -m bench.toxiproxy [--rounds 3] [--megabytes 64] [--round-trips 2000]

One echo server (its own process) and one Toxiproxy server (its own process, a proxy without
toxics in front of the echo server). The client, in this process, measures on the same machine
in the same run, alternating direct and proxied so drift hits both alike:
- throughput: MB/s of payload echoed back (one connection, a sender thread, 256 KiB writes);
- round trip: median time for a 64-byte message to come back, one message in flight.
Prints a table, then, last, one JSON line with `throughput_vs_direct` (proxied / direct, higher
is better, 1.0 = free) and `rtt_vs_direct` (proxied / direct, lower is better, 1.0 = free).
Bounded: every measurement stops at its size or count and at a time limit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

_REPOSITORY = Path(__file__).resolve().parents[1]
_WRITE_BYTES = 256 * 1024
_MESSAGE = b"m" * 64
_TIME_LIMIT_S = 4.0  # per measurement
_START_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class Sample:
    mb_per_s: float
    rtt_median_us: float
    rtt_p99_us: float


@contextlib.contextmanager
def _server_process(module: str) -> Iterator[str]:
    """Run `python -m module --port 0`; yield the address from its first line; stop it."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=_REPOSITORY,
        env={**os.environ, "PYTHONPATH": str(_REPOSITORY)},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"{module} did not start")
        match = re.search(r"listening on (?:http://)?(\S+)", line)
        if match is None:
            raise RuntimeError(f"{module} printed {line!r}, not its address")
        yield match.group(1)
    finally:
        process.terminate()
        try:
            process.wait(_START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(_START_TIMEOUT_S)
        if process.stdout is not None:
            process.stdout.close()


def _connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=_TIME_LIMIT_S * 2)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _throughput_mb_per_s(address: str, total_bytes: int) -> float:
    block = os.urandom(_WRITE_BYTES)
    deadline = time.monotonic() + _TIME_LIMIT_S
    with _connect(address) as sock:
        stop_sending = threading.Event()
        sent = [0]

        def send() -> None:
            try:
                while sent[0] < total_bytes and not stop_sending.is_set():
                    sock.sendall(block)
                    sent[0] += len(block)
            except OSError:
                pass

        sender = threading.Thread(target=send, name="bench-sender")
        started = time.monotonic()
        sender.start()
        received = 0
        buffer = bytearray(1024 * 1024)
        try:
            while received < total_bytes and time.monotonic() < deadline:
                count = sock.recv_into(buffer)
                if count == 0:
                    break
                received += count
        finally:
            elapsed_s = time.monotonic() - started
            stop_sending.set()
            sock.shutdown(socket.SHUT_RDWR)
            sender.join(_TIME_LIMIT_S)
    return received / elapsed_s / 1e6


def _round_trips_us(address: str, count: int) -> list[float]:
    samples: list[float] = []
    deadline = time.monotonic() + _TIME_LIMIT_S
    with _connect(address) as sock:
        for _ in range(count):
            started = time.perf_counter()
            sock.sendall(_MESSAGE)
            got = 0
            while got < len(_MESSAGE):
                piece = sock.recv(len(_MESSAGE) - got)
                if not piece:
                    raise RuntimeError("connection closed during the round-trip test")
                got += len(piece)
            samples.append((time.perf_counter() - started) * 1e6)
            if time.monotonic() > deadline:
                break
    return samples


def _measure(address: str, total_bytes: int, round_trips: int) -> Sample:
    mb_per_s = _throughput_mb_per_s(address, total_bytes)
    rtts = sorted(_round_trips_us(address, round_trips))
    return Sample(mb_per_s, statistics.median(rtts), rtts[int(len(rtts) * 0.99) - 1])


def _summarize(samples: list[Sample]) -> Sample:
    """Each figure's median over the rounds."""
    return Sample(
        statistics.median(sample.mb_per_s for sample in samples),
        statistics.median(sample.rtt_median_us for sample in samples),
        statistics.median(sample.rtt_p99_us for sample in samples),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.toxiproxy", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="direct/proxied pairs (median)")
    parser.add_argument("--megabytes", type=int, default=64, help="payload per throughput run")
    parser.add_argument("--round-trips", type=int, default=2000, help="messages per RTT run")
    parser.add_argument(
        "--toxiproxy",
        metavar="HOST:PORT",
        help="measure an already running Toxiproxy API (e.g. the real server) instead of ours",
    )
    arguments = parser.parse_args(argv)
    total_bytes = arguments.megabytes * 1024 * 1024
    with contextlib.ExitStack() as stack:
        echo_address = stack.enter_context(_server_process("chaos.toxiproxy.echo_server"))
        api_address = arguments.toxiproxy or stack.enter_context(_server_process("chaos.toxiproxy"))
        requests.delete(f"http://{api_address}/proxies/bench", timeout=_START_TIMEOUT_S)
        created = requests.post(
            f"http://{api_address}/proxies",
            json={"name": "bench", "listen": "127.0.0.1:0", "upstream": echo_address},
            timeout=_START_TIMEOUT_S,
        )
        created.raise_for_status()
        proxy_address = created.json()["listen"]
        _measure(echo_address, total_bytes // 8, 200)  # warm-up
        _measure(proxy_address, total_bytes // 8, 200)
        direct: list[Sample] = []
        proxied: list[Sample] = []
        for _ in range(arguments.rounds):
            direct.append(_measure(echo_address, total_bytes, arguments.round_trips))
            proxied.append(_measure(proxy_address, total_bytes, arguments.round_trips))
        requests.delete(f"http://{api_address}/proxies/bench", timeout=_START_TIMEOUT_S)

    direct_summary, proxied_summary = _summarize(direct), _summarize(proxied)
    print(f"{'path':<10} {'MB/s':>9} {'RTT median µs':>14} {'RTT p99 µs':>11}")
    for label, row in (("direct", direct_summary), ("via proxy", proxied_summary)):
        print(
            f"{label:<10} {row.mb_per_s:>9.1f} {row.rtt_median_us:>14.1f} {row.rtt_p99_us:>11.1f}"
        )
    result = {
        "throughput_vs_direct": round(proxied_summary.mb_per_s / direct_summary.mb_per_s, 3),
        "rtt_vs_direct": round(proxied_summary.rtt_median_us / direct_summary.rtt_median_us, 3),
        "direct_mb_per_s": round(direct_summary.mb_per_s, 1),
        "proxy_mb_per_s": round(proxied_summary.mb_per_s, 1),
        "direct_rtt_median_us": round(direct_summary.rtt_median_us, 1),
        "proxy_rtt_median_us": round(proxied_summary.rtt_median_us, 1),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
