"""What one leader-follower message exchange costs in CPU: a grpc.aio bidirectional stream (how
the nodes talk today, `cluster/transport.py`) against a bare TCP connection on the same event
loop, in one run.

    python -m bench.peer_hop [--exchanges 3000] [--rounds 3] [--bytes 1200]

One exchange: the client writes one frame of `--bytes` (a 1 KiB record's AppendRequest is about
1.2 KB) and waits for a 2-byte answer (an AppendResponse is a few dozen bytes), one in flight,
as a synchronous produce does for each follower. Both servers run in one other process on the
same loop kind as a node (uvloop where installed). Each round measures gRPC, then TCP (the
order alternates), so load from elsewhere on the machine weighs on both alike; figures are
medians over the rounds: the CPU (user + system, every thread) each side spends per exchange,
and the p50 round trip. The ratio is what this measures: under a synchronous produce the
leader makes two such exchanges (one per follower) and each follower one, so per-message cost
on the peer link is paid three times per request.

Plaintext only: TLS would add the same record-layer cost to both.
Prints a table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from bench.idle import cpu_seconds
from cluster.local import free_port
from flotilla.cli_node import EVENT_LOOPS

_METHOD = "/bench.PeerHop/Stream"
_LENGTH = struct.Struct(">I")
_ANSWER = b"ok"


# -- the server process ---------------------------------------------------------------------------
async def _serve(grpc_port: int, tcp_port: int) -> None:
    async def stream(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for _ in requests:
            yield _ANSWER

    handler = grpc.method_handlers_generic_handler(
        "bench.PeerHop", {"Stream": grpc.stream_stream_rpc_method_handler(stream)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await server.start()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
                await reader.readexactly(size)
                writer.write(_ANSWER)
        except asyncio.IncompleteReadError:
            writer.close()

    tcp = await asyncio.start_server(connection, "127.0.0.1", tcp_port)
    print("ready", flush=True)
    async with tcp:
        await server.wait_for_termination()


# -- the client ---------------------------------------------------------------------------------
def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(
    exchange: Callable[[], Awaitable[None]], count: int, server_pid: int
) -> tuple[float, float, float]:
    """(client CPU µs, server CPU µs, p50 round trip µs) per exchange over `count` exchanges."""
    for _ in range(50):  # warm up
        await exchange()
    latencies = []
    client_before, server_before = _own_cpu_s(), cpu_seconds(server_pid)
    for _ in range(count):
        started = time.perf_counter()
        await exchange()
        latencies.append(time.perf_counter() - started)
    client_us = (_own_cpu_s() - client_before) / count * 1e6
    server_us = (cpu_seconds(server_pid) - server_before) / count * 1e6
    return client_us, server_us, statistics.median(latencies) * 1e6


async def _rounds(args: argparse.Namespace, grpc_port: int, tcp_port: int, server_pid: int) -> dict[str, list[tuple[float, float, float]]]:  # fmt: skip
    frame = os.urandom(args.bytes)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        call = channel.stream_stream(_METHOD)()

        async def grpc_exchange() -> None:
            await call.write(frame)
            await call.read()

        reader, writer = await asyncio.open_connection("127.0.0.1", tcp_port)
        framed = _LENGTH.pack(len(frame)) + frame

        async def tcp_exchange() -> None:
            writer.write(framed)
            await writer.drain()
            await reader.readexactly(len(_ANSWER))

        cases = {"grpc stream": grpc_exchange, "tcp": tcp_exchange}
        figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
        for number in range(args.rounds):
            order = list(cases) if number % 2 == 0 else list(reversed(cases))
            for name in order:
                figures[name].append(await _measure(cases[name], args.exchanges, server_pid))
        await call.done_writing()
        writer.close()
    return figures


def _run(coroutine: Any, loop_kind: str) -> Any:
    if loop_kind == "uvloop":
        import uvloop

        return uvloop.run(coroutine)
    return asyncio.run(coroutine)


def _loop_kind(choice: str) -> str:
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise
        return "asyncio"
    return "uvloop"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=3000, help="per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bytes", type=int, default=1200, help="the frame a client writes")
    parser.add_argument("--event-loop", choices=EVENT_LOOPS, default="auto")
    parser.add_argument("--serve", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    loop_kind = _loop_kind(args.event_loop)
    if args.serve:
        _run(_serve(*args.serve), loop_kind)
        return 0
    grpc_port, tcp_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    command = [sys.executable, "-m", "bench.peer_hop", "--event-loop", loop_kind]
    server = subprocess.Popen(
        [*command, "--serve", str(grpc_port), str(tcp_port)],
        stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
        figures = _run(_rounds(args, grpc_port, tcp_port, server.pid), loop_kind)
    finally:
        server.kill()
        server.wait(timeout=10)
    medians = {
        name: tuple(statistics.median(value[i] for value in values) for i in range(3))
        for name, values in figures.items()
    }
    print(f"{'one exchange (' + loop_kind + ')':<24}{'client µs':>12}{'server µs':>12}"
          f"{'total µs':>12}{'p50 rtt µs':>12}")  # fmt: skip
    for name, (client_us, server_us, rtt_us) in medians.items():
        total = client_us + server_us
        print(f"{name:<24}{client_us:>12.0f}{server_us:>12.0f}{total:>12.0f}{rtt_us:>12.0f}")
    grpc_total = sum(medians["grpc stream"][:2])
    tcp_total = sum(medians["tcp"][:2])
    print(json.dumps({
        "event_loop": loop_kind, "frame_bytes": args.bytes,
        "grpc_cpu_us_per_exchange": {"client": round(medians["grpc stream"][0]),
                                     "server": round(medians["grpc stream"][1])},
        "tcp_cpu_us_per_exchange": {"client": round(medians["tcp"][0]),
                                    "server": round(medians["tcp"][1])},
        "grpc_rtt_p50_us": round(medians["grpc stream"][2]), "tcp_rtt_p50_us": round(medians["tcp"][2]),
        "grpc_over_tcp_cpu": round(grpc_total / tcp_total, 2),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
