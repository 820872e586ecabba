"""The chaos network: one Toxiproxy proxy per directed node-to-node link (two where the target has
a raw Raft port: its gRPC port's and its Raft port's, cut and slowed together), and the node
dial maps.

`ChaosNetwork.attach(cluster)` must run before the nodes start: it starts our Toxiproxy server
(`python -m chaos.toxiproxy`, its own process so that the workload's threads do not slow the
proxies), renders the local topology (chaos/topology.py) on the cluster's own ports, creates every
proxy and writes each node's dial map, and adds `--dial-map` to each node's flags.

Link faults are proxy states: a cut link is a disabled proxy (its connections are closed and new
ones refused); toxics (latency, timeout, reset_peer, bandwidth) are added per link and removed by
`heal()`, which also re-enables every proxy. Only the data plane (Raft, SWIM) crosses the proxies;
the control plane and the clients dial nodes directly.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import requests

from chaos.topology import LocalPorts, Rendering, Topology, raft_proxy_name, render_local
from cluster.local import LocalCluster, free_port

__all__ = ["ChaosNetwork", "NetworkError"]

API_TIMEOUT_S = 5.0


class NetworkError(RuntimeError):
    """The Toxiproxy server did not start or refused a request; the message says which."""


class ChaosNetwork:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.process: subprocess.Popen[bytes] | None = None
        self.rendering: Rendering | None = None
        self.url = ""
        self._session = requests.Session()
        self.cut: set[tuple[str, str]] = set()
        self.toxics: list[tuple[str, str]] = []  # (proxy name, toxic name)

    # -- setup -----------------------------------------------------------------------------------
    def attach(self, cluster: LocalCluster) -> None:
        topology = Topology(len(cluster.nodes), len(cluster.controller_ids))
        api_port = free_port("127.0.0.1")
        raft = {n: spec.raft_port for n, spec in cluster.nodes.items() if spec.raft_port}
        ports = LocalPorts(
            grpc={n: spec.port for n, spec in cluster.nodes.items()},
            control={n: spec.control_port for n, spec in cluster.nodes.items()},
            proxies={link.proxy_name: free_port("127.0.0.1") for link in topology.links},
            toxiproxy_api=api_port,
            raft=raft,
            raft_proxies={
                raft_proxy_name(link): free_port("127.0.0.1")
                for link in topology.links
                if link.target in raft
            },
        )
        self.rendering = render_local(topology, ports)
        self._start_server(api_port)
        self._call("POST", "/populate", self.rendering.populate())
        maps = self.root / "dial-maps"
        maps.mkdir(parents=True, exist_ok=True)
        for node_id, spec in cluster.nodes.items():
            path = maps / f"{node_id}.json"
            path.write_text(json.dumps(self.rendering.dial_map(node_id), indent=2))
            spec.extra_args += ["--dial-map", str(path)]

    def _start_server(self, port: int) -> None:
        log = open(self.root / "toxiproxy.log", "ab")  # noqa: SIM115 (the child keeps it)
        command = [sys.executable, "-m", "chaos.toxiproxy", "--port", str(port)]
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NetworkError(f"toxiproxy server exited; see {self.root / 'toxiproxy.log'}")
            with contextlib.suppress(requests.RequestException):
                if self._session.get(f"{self.url}/version", timeout=1).ok:
                    return
            time.sleep(0.05)
        raise NetworkError(f"toxiproxy server not answering on {self.url} after 20 s")

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()  # by pid: the process this object started
            self.process.wait(timeout=10)
        self._session.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        response = self._session.request(method, self.url + path, json=body, timeout=API_TIMEOUT_S)
        if response.status_code >= 300:
            raise NetworkError(f"{method} {path} -> {response.status_code}: {response.text}")
        return response.json() if response.content else None

    # -- faults ----------------------------------------------------------------------------------
    @property
    def node_ids(self) -> tuple[str, ...]:
        assert self.rendering is not None, "attach() first"
        return self.rendering.topology.node_ids

    def _proxies_of(self, source: str, target: str) -> list[str]:
        """The proxies of the link: to the target's gRPC port, and to its raw Raft port (if it
        has one: the link's Raft frames cross that one)."""
        assert self.rendering is not None, "attach() first"
        return [
            p.name
            for p in self.rendering.proxies
            if p.link.source == source and p.link.target == target
        ]

    def set_link(self, source: str, target: str, enabled: bool) -> None:
        for name in self._proxies_of(source, target):
            self._call("POST", f"/proxies/{name}", {"enabled": enabled})
        if enabled:
            self.cut.discard((source, target))
        else:
            self.cut.add((source, target))

    def partition(self, groups: Iterable[Iterable[str]]) -> None:
        """Cuts every link between nodes that share no group (a node may be in several: a bridge)."""
        sets = [set(group) for group in groups]
        for a in self.node_ids:
            for b in self.node_ids:
                if a != b and not any(a in g and b in g for g in sets):
                    self.set_link(a, b, False)

    def cut_links(self, links: Iterable[tuple[str, str]]) -> None:
        for source, target in links:
            self.set_link(source, target, False)

    def add_toxic(self, source: str, target: str, kind: str, attributes: dict[str, int], *,
                  toxicity: float = 1.0, stream: str = "downstream") -> None:  # fmt: skip
        name = f"{kind}-{stream}-{len(self.toxics)}"
        body = {"name": name, "type": kind, "stream": stream, "toxicity": toxicity}
        for proxy in self._proxies_of(source, target):
            self._call("POST", f"/proxies/{proxy}/toxics", {**body, "attributes": attributes})
            self.toxics.append((proxy, name))

    def heal(self) -> None:
        """Removes every toxic and re-enables every link (idempotent)."""
        for proxy, name in self.toxics:
            with contextlib.suppress(NetworkError):
                self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")
        self.toxics.clear()
        for source, target in sorted(self.cut):
            self.set_link(source, target, True)
