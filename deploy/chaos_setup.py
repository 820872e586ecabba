"""Arm the compose `chaos` profile: create the Toxiproxy proxies, then publish the dial maps.

    python chaos_setup.py --toxiproxy http://toxiproxy:8474 --populate toxiproxy.json \
        --dial-maps dial-maps/ --routes /routes

Order matters: the proxies exist (POST /populate answered 201) before any dial map appears in
`--routes`, because a node re-reads its dial map on change and then dials the proxies at once.
Each map is written to a temporary name and renamed, so a node never reads half a file.
It waits for the Toxiproxy API up to `--wait-s` (the container may still be starting) and exits
0 when armed, 1 with a one-line reason otherwise. Standard library only: it runs in the node image.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

USER_AGENT = "flotilla-chaos-setup"


def _request(url: str, body: bytes | None, timeout_s: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    request.add_header("User-Agent", USER_AGENT)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()


def wait_for_api(base_url: str, wait_s: float) -> str:
    """Returns Toxiproxy's version once `GET /version` answers 200; raises TimeoutError."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            status, body = _request(f"{base_url}/version", None, timeout_s=2.0)
            if status == 200:
                return body.decode(errors="replace").strip()
        except OSError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise TimeoutError(f"Toxiproxy API at {base_url} not answering after {wait_s} s")
        time.sleep(0.25)


def populate(base_url: str, populate_file: Path) -> int:
    """POSTs the file to /populate; returns how many proxies Toxiproxy reports."""
    body = populate_file.read_bytes()
    expected = json.loads(body)
    status, answer = _request(f"{base_url}/populate", body, timeout_s=10.0)
    if status != 201:
        raise RuntimeError(f"POST {base_url}/populate answered {status}: {answer[:300]!r}")
    proxies = json.loads(answer).get("proxies") or []
    if len(proxies) != len(expected):
        raise RuntimeError(f"/populate made {len(proxies)} proxies, expected {len(expected)}")
    return len(proxies)


def publish_dial_maps(source: Path, routes: Path) -> list[str]:
    """Copies every <id>.json from `source` into `routes` atomically; returns the file names."""
    names = []
    for path in sorted(source.glob("*.json")):
        json.loads(path.read_text())  # refuse to publish a malformed map
        temporary = routes / f".{path.name}.tmp"
        temporary.write_bytes(path.read_bytes())
        os.replace(temporary, routes / path.name)
        names.append(path.name)
    if not names:
        raise RuntimeError(f"no dial maps (*.json) in {source}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Create Toxiproxy proxies, then the dial maps.")
    parser.add_argument("--toxiproxy", required=True, help="base URL of the Toxiproxy API")
    parser.add_argument("--populate", type=Path, required=True, help="JSON body for /populate")
    parser.add_argument("--dial-maps", type=Path, required=True, help="directory of <id>.json")
    parser.add_argument("--routes", type=Path, required=True, help="where the nodes read them")
    parser.add_argument("--wait-s", type=float, default=60.0, help="wait for the API (seconds)")
    args = parser.parse_args(argv)
    base_url = args.toxiproxy.rstrip("/")
    try:
        version = wait_for_api(base_url, args.wait_s)
        count = populate(base_url, args.populate)
        names = publish_dial_maps(args.dial_maps, args.routes)
    except (OSError, ValueError, RuntimeError) as error:  # TimeoutError is an OSError
        print(f"chaos setup failed: {error}", file=sys.stderr)
        return 1
    print(f"toxiproxy {version}: {count} proxies; dial maps {', '.join(names)} in {args.routes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
