"""Conformance checks: drive a Toxiproxy API with `toxiproxy-python` and demand v2.4.0's answers.

Run against any server (ours or the real binary; it DESTROYS EVERY PROXY on the target):

    python -m chaos.toxiproxy.conformance [--host 127.0.0.1] [--port 8474]

Each check resets the server (`destroy_all`), makes the client calls a chaos run makes, and
raises `ConformanceFailure` naming the call, what v2.4.0 answers and what came back. The
expected answers were taken from Toxiproxy v2.4.0's api.go, proxy.go, proxy_collection.go,
toxic_collection.go and api_test.go, and every check passed against the real v2.4.0 server
(built from its source) as well as against ours.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import requests
import toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from chaos.toxiproxy.errors import ChaosError

__all__ = ["CHECKS", "ConformanceFailure", "Target", "run_checks"]

_HTTP_TIMEOUT_S = 10.0
_PROXY_KEYS = ["name", "listen", "upstream", "enabled", "toxics"]
_TOXIC_KEYS = ["attributes", "name", "type", "stream", "toxicity"]


class ConformanceFailure(ChaosError):
    """A server answered differently from Toxiproxy v2.4.0."""


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    upstream: str = "127.0.0.1:9"  # proxies forward here; it need not accept connections

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def _expect(what: str, expected: object, actual: object) -> None:
    if expected != actual:
        raise ConformanceFailure(f"{what}: v2.4.0 answers {expected!r}, got {actual!r}")


def _raw(target: Target, method: str, path: str, body: Any = None) -> requests.Response:
    return requests.request(method, target.url + path, json=body, timeout=_HTTP_TIMEOUT_S)


def _expect_error(response: requests.Response, status: int, message: str, what: str) -> None:
    _expect(f"{what}: status", status, response.status_code)
    _expect(f"{what}: body", {"error": message, "status": status}, response.json())
    _expect(f"{what}: body ends with newline", True, response.text.endswith("\n"))


@contextlib.contextmanager
def _raises(kind: type[Exception], what: str) -> Iterator[None]:
    try:
        yield
    except kind:
        return
    raise ConformanceFailure(f"{what}: v2.4.0 makes the client raise {kind.__name__}")


def _port_accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        return probe.connect_ex((host, int(port))) == 0


def _client(target: Target) -> Any:
    client = toxiproxy.Toxiproxy()
    client.update_api_consumer(target.host, target.port)
    client.destroy_all()
    return client


def check_version(target: Target) -> None:
    client = _client(target)
    _expect("Toxiproxy.version()", b"2.4.0", client.version())
    _expect(
        "GET /version content type",
        "text/plain;charset=utf-8",
        _raw(target, "GET", "/version").headers.get("Content-Type"),
    )


def check_create_proxy(target: Target) -> None:
    client = _client(target)
    response = _raw(
        target,
        "POST",
        "/proxies",
        {"name": "c1", "upstream": target.upstream, "listen": "127.0.0.1:0"},
    )
    _expect("POST /proxies status", 201, response.status_code)
    body = response.json()
    _expect("proxy JSON keys", _PROXY_KEYS, list(body))
    _expect("new proxy enabled", True, body["enabled"])
    _expect("listen port 0 replaced by the bound port", False, body["listen"].endswith(":0"))
    _expect("new proxy toxics", [], body["toxics"])
    proxy = client.create(upstream=target.upstream, name="c2", enabled=False)
    _expect("disabled proxy keeps listen as given", "127.0.0.1:0", proxy.listen)
    _expect("Proxy.enabled", False, proxy.enabled)
    _expect("Toxiproxy.proxies() names", {"c1", "c2"}, set(client.proxies()))
    _expect("GET /proxies/c1", body, _raw(target, "GET", "/proxies/c1").json())


def check_proxy_errors(target: Target) -> None:
    client = _client(target)
    client.create(upstream=target.upstream, name="dup")
    duplicate = {"name": "dup", "upstream": target.upstream, "listen": "127.0.0.1:0"}
    with _raises(ProxyExists, "POST /proxies with a used name"):
        APIConsumer.post("/proxies", json=duplicate)
    _expect_error(
        _raw(target, "POST", "/proxies", duplicate), 409, "proxy already exists", "duplicate proxy"
    )
    _expect_error(
        _raw(target, "POST", "/proxies", {"upstream": target.upstream}),
        400,
        "missing required field: name",
        "proxy without name",
    )
    _expect_error(
        _raw(target, "POST", "/proxies", {"name": "x"}),
        400,
        "missing required field: upstream",
        "proxy without upstream",
    )
    with _raises(NotFound, "GET /proxies/missing"):
        APIConsumer.get("/proxies/missing")
    _expect_error(_raw(target, "GET", "/proxies/missing"), 404, "proxy not found", "get missing")
    bad = requests.post(target.url + "/proxies", data=b"{", timeout=_HTTP_TIMEOUT_S)
    _expect("bad JSON status", 400, bad.status_code)
    _expect("bad JSON message", True, bad.json()["error"].startswith("bad request body: "))
    _expect("error content type", "text/plain; charset=utf-8", bad.headers.get("Content-Type"))
    unknown = _raw(target, "GET", "/nowhere")
    _expect("unknown route", (404, "404 page not found\n"), (unknown.status_code, unknown.text))
    _expect("wrong method status", 405, _raw(target, "PUT", "/proxies").status_code)


def check_enable_disable(target: Target) -> None:
    client = _client(target)
    proxy = client.create(upstream=target.upstream, name="switch")
    _expect("enabled proxy accepts", True, _port_accepts(proxy.listen))
    proxy.disable()
    shown = _raw(target, "GET", "/proxies/switch").json()
    _expect("disabled: enabled", False, shown["enabled"])
    _expect("disabled: listen unchanged", proxy.listen, shown["listen"])
    _expect("disabled proxy refuses connections", False, _port_accepts(proxy.listen))
    proxy.enable()
    _expect("re-enabled: enabled", True, _raw(target, "GET", "/proxies/switch").json()["enabled"])
    _expect("re-enabled proxy accepts on the same address", True, _port_accepts(proxy.listen))
    with proxy.down():
        _expect("Proxy.down() disables", False, _port_accepts(proxy.listen))
    _expect(
        "POST /proxies/{p} status",
        200,
        _raw(target, "POST", "/proxies/switch", {"enabled": True}).status_code,
    )
    _expect_error(
        _raw(target, "POST", "/proxies/nope", {"enabled": True}),
        404,
        "proxy not found",
        "update missing proxy",
    )


def check_toxics(target: Target) -> None:
    client = _client(target)
    proxy = client.create(upstream=target.upstream, name="tox")
    proxy.add_toxic(type="latency", attributes={"latency": 100})
    toxic = proxy.get_toxic("latency_downstream")
    _expect("default toxic name <type>_<stream> exists", True, toxic is not None)
    _expect("toxic stream default", "downstream", toxic.stream)
    _expect("toxic toxicity default", 1, toxic.toxicity)
    _expect("toxic attributes", {"latency": 100, "jitter": 0}, toxic.attributes)
    created = _raw(
        target,
        "POST",
        "/proxies/tox/toxics",
        {"type": "bandwidth", "stream": "upstream", "toxicity": 0.5},
    )
    _expect("POST /proxies/{p}/toxics status (200, not 201)", 200, created.status_code)
    _expect(
        "toxic JSON",
        {
            "attributes": {"rate": 0},
            "name": "bandwidth_upstream",
            "type": "bandwidth",
            "stream": "upstream",
            "toxicity": 0.5,
        },
        created.json(),
    )
    _expect("toxic JSON keys", _TOXIC_KEYS, list(created.json()))
    listed = [each["name"] for each in _raw(target, "GET", "/proxies/tox/toxics").json()]
    _expect("toxics listed upstream first", ["bandwidth_upstream", "latency_downstream"], listed)
    with _raises(ProxyExists, "adding a toxic with a used name"):
        proxy.add_toxic(type="latency")
    _expect_error(
        _raw(target, "POST", "/proxies/tox/toxics", {"type": "latency"}),
        409,
        "toxic already exists",
        "duplicate toxic",
    )
    with _raises(InvalidToxic, "adding a toxic of unknown type"):
        proxy.add_toxic(type="nosuch")
    _expect_error(
        _raw(target, "POST", "/proxies/tox/toxics", {"type": "nosuch"}),
        400,
        "invalid toxic type",
        "unknown toxic type",
    )
    _expect_error(
        _raw(target, "POST", "/proxies/tox/toxics", {"type": "latency", "stream": "x"}),
        400,
        "stream was invalid, can be either upstream or downstream",
        "bad stream",
    )
    for kind, attributes in (
        ("timeout", {"timeout": 0}),
        ("reset_peer", {"timeout": 0}),
        ("slow_close", {"delay": 0}),
        ("limit_data", {"bytes": 0}),
        ("slicer", {"average_size": 0, "size_variation": 0, "delay": 0}),
    ):
        answer = _raw(target, "POST", "/proxies/tox/toxics", {"type": kind, "name": kind}).json()
        _expect(f"{kind} default attributes", attributes, answer["attributes"])
    _expect("Proxy.toxics() count", 7, len(proxy.toxics()))


def check_toxic_update_and_delete(target: Target) -> None:
    client = _client(target)
    proxy = client.create(upstream=target.upstream, name="upd")
    proxy.add_toxic(type="latency", name="lag", attributes={"latency": 100, "jitter": 10})
    updated = _raw(target, "POST", "/proxies/upd/toxics/lag", {"attributes": {"latency": 5}})
    _expect("toxic update status", 200, updated.status_code)
    _expect("update merges attributes", {"latency": 5, "jitter": 10}, updated.json()["attributes"])
    toxicity = _raw(target, "POST", "/proxies/upd/toxics/lag", {"toxicity": 0.25}).json()
    _expect(
        "update sets toxicity, keeps attributes",
        (0.25, {"latency": 5, "jitter": 10}),
        (toxicity["toxicity"], toxicity["attributes"]),
    )
    _expect_error(
        _raw(target, "POST", "/proxies/upd/toxics/none", {"toxicity": 1}),
        404,
        "toxic not found",
        "update missing toxic",
    )
    _expect_error(
        _raw(target, "GET", "/proxies/upd/toxics/none"), 404, "toxic not found", "get missing toxic"
    )
    _expect("Proxy.destroy_toxic()", True, proxy.destroy_toxic("lag"))
    _expect("toxics after delete", {}, proxy.toxics())
    with _raises(NotFound, "deleting a missing toxic"):
        proxy.destroy_toxic("lag")
    _expect(
        "DELETE toxic of missing proxy",
        404,
        _raw(target, "DELETE", "/proxies/none/toxics/lag").status_code,
    )


def check_populate(target: Target) -> None:
    client = _client(target)
    existing = client.create(upstream=target.upstream, name="keep")
    existing.add_toxic(type="latency")
    entries = [
        {"name": "keep", "upstream": target.upstream, "listen": existing.listen},
        {"name": "new", "upstream": target.upstream, "listen": "127.0.0.1:0", "enabled": False},
    ]
    response = _raw(target, "POST", "/populate", entries)
    _expect("POST /populate status", 201, response.status_code)
    answered = response.json()["proxies"]
    _expect(
        "populate answers every proxy in order",
        ["keep", "new"],
        [each["name"] for each in answered],
    )
    _expect(
        "populate answers an unchanged proxy as a fresh copy (v2.4.0 quirk)",
        (False, []),
        (answered[0]["enabled"], answered[0]["toxics"]),
    )
    kept = _raw(target, "GET", "/proxies/keep").json()
    _expect(
        "unchanged proxy kept running with its toxics",
        (True, 1),
        (kept["enabled"], len(kept["toxics"])),
    )
    _expect("populate enabled=false", False, _raw(target, "GET", "/proxies/new").json()["enabled"])
    _expect("populate of []", {"proxies": None}, _raw(target, "POST", "/populate", []).json())
    bad = _raw(target, "POST", "/populate", [{"name": "a", "upstream": "x:1"}, {"upstream": "y:1"}])
    _expect(
        "populate with a nameless proxy",
        (400, {"error": "missing required field: name at proxy 2", "status": 400, "proxies": None}),
        (bad.status_code, bad.json()),
    )
    _expect("failed populate creates nothing", False, "a" in client.proxies())
    made = client.populate([{"name": "viaclient", "upstream": target.upstream, "listen": None}])
    _expect(
        "Toxiproxy.populate() creates through POST /proxies",
        ["viaclient"],
        [proxy.name for proxy in made],
    )


def check_reset(target: Target) -> None:
    client = _client(target)
    first = client.create(upstream=target.upstream, name="r1")
    second = client.create(upstream=target.upstream, name="r2")
    first.add_toxic(type="latency")
    second.add_toxic(type="timeout", stream="upstream")
    second.disable()
    _expect("Toxiproxy.reset()", True, client.reset())
    _expect("POST /reset status", 204, _raw(target, "POST", "/reset").status_code)
    for name, shown in _raw(target, "GET", "/proxies").json().items():
        _expect(f"after reset {name} enabled", True, shown["enabled"])
        _expect(f"after reset {name} toxics", [], shown["toxics"])


def check_destroy(target: Target) -> None:
    client = _client(target)
    proxy = client.create(upstream=target.upstream, name="gone")
    listen = proxy.listen
    _expect("Proxy.destroy()", True, proxy.destroy())
    _expect("destroyed proxy is not listed", False, "gone" in client.proxies())
    _expect("destroyed proxy stops listening", False, _port_accepts(listen))
    client.create(upstream=target.upstream, name="gone2")
    _expect("DELETE status", 204, _raw(target, "DELETE", "/proxies/gone2").status_code)
    _expect_error(_raw(target, "DELETE", "/proxies/gone2"), 404, "proxy not found", "delete twice")
    with _raises(NotFound, "Proxy.destroy() of a deleted proxy"):
        proxy.destroy()


CHECKS: dict[str, Callable[[Target], None]] = {
    "version": check_version,
    "create_proxy": check_create_proxy,
    "proxy_errors": check_proxy_errors,
    "enable_disable": check_enable_disable,
    "toxics": check_toxics,
    "toxic_update_and_delete": check_toxic_update_and_delete,
    "populate": check_populate,
    "reset": check_reset,
    "destroy": check_destroy,
}


def run_checks(target: Target, names: list[str] | None = None) -> list[str]:
    """Run the named checks (all by default); the names that passed; raises on a failure."""
    selected = list(CHECKS) if names is None else names
    for name in selected:
        try:
            CHECKS[name](target)
        finally:
            with contextlib.suppress(Exception):
                _client(target)  # leave the server empty
    return selected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.toxiproxy.conformance", description=__doc__
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8474)
    arguments = parser.parse_args(argv)
    target = Target(arguments.host, arguments.port)
    failures = 0
    for name in CHECKS:
        try:
            run_checks(target, [name])
            print(f"PASS {name}")
        except (ConformanceFailure, AssertionError) as failure:
            failures += 1
            print(f"FAIL {name}: {failure}")
    print(f"{len(CHECKS) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
