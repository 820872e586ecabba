"""bench.profile's map from samples to stages of the produce path: a sample counts for the
innermost frame of ours (a library called from our code counts for the stage that called it),
a node's entry point for none, and a sample with no frame of ours for the library it is in."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

from bench.profile import flame_svg, stage_of, summarize

ENTRY = "main (flotilla/cli.py:279);_run_node (flotilla/cli_node.py:232);Runner.run (asyncio/runners.py:118)"


def test_samples_count_for_the_innermost_frame_of_ours() -> None:
    sender = (
        f"{ENTRY};PeerTransport._sender (cluster/transport.py:257);_write (grpc/aio/_call.py:500)"
    )
    assert stage_of(sender.split(";")) == "6 peers: transport, frames"
    # the raw link's receiver and the storage thread's hand-off count for their stages too
    link = f"{ENTRY};_Receiver.data_received (cluster/raft_link.py:300)"
    assert stage_of(link.split(";")) == "6 peers: transport, frames"
    handoff = f"{ENTRY};StorageThread.run (cluster/storage_thread.py:45)"
    assert stage_of(handoff.split(";")) == "5 disk: persist, log, segment"
    check = (
        f"{ENTRY};ClientService._produce (cluster/service.py:239);check_body (proto/records.py:193)"
    )
    assert stage_of(check.split(";")).endswith("proto/")
    # the node's entry point is under every sample: it names no stage
    assert stage_of(ENTRY.split(";")) == "asyncio loop"
    client = "Client.produce (flotilla/client.py:233);_blocking (grpc/_channel.py:1136)"
    assert stage_of(client.split(";")) == "1 SDK: producer, plan, router"
    assert stage_of(["_worker (concurrent/futures/thread.py:81)"]) == "threads, queues, futures"


def test_summary_shares_and_flame_graph(tmp_path: Path) -> None:
    raw = tmp_path / "leader.txt"
    raw.write_text(
        f"{ENTRY};MultiRaft._run_round (cluster/multiraft.py:522) 30\n"
        f"{ENTRY};Segment.append (storage/segment.py:90) 10\n"
        f"{ENTRY} 60\n"
    )
    text = summarize(raw)
    assert "100 samples" in text
    assert " 30.0%  4 raft + multiraft" in text and " 10.0%  5 disk" in text
    assert " 60.0%  asyncio loop" in text
    svg = tmp_path / "leader.svg"
    flame_svg(raw, svg, "test")
    titles = [t.text for t in ElementTree.parse(svg).iter("{http://www.w3.org/2000/svg}title")]
    assert "MultiRaft._run_round (cluster/multiraft.py:522) (30 samples, 30.0%)" in titles
    assert any(t and t.startswith("main (flotilla/cli.py:279) (100 samples") for t in titles)
