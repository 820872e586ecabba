"""The compose `certs` step: a cluster CA, node and client certificates in a shared volume.

    python compose_certs.py --ca-dir /ca --dir /certs --node n1 n2 n3 --client admin

docker-compose.yml runs it as the one-shot service `certs` before any node starts (every node
`depends_on` it completing). The CA (its key) stays in `--ca-dir`, a volume only this step
mounts; `--dir` gets the CA certificate and the issued certificates and keys, and the nodes and
the `client` service mount it read-only. Made once, then reused: a CA already in `--ca-dir` is
kept (so are the certificates it signed), and only what is missing is issued, so a later `up`
(or the added node of deploy/add-node.yml) finds the files in place. Each node certificate names its id and its compose host name (`n1`, the
name peers and clients dial) besides what `flotilla.certs` always puts in (loopback, `localhost`,
`flotilla-node`). Exits 0 with one line per file made, 1 with a one-line reason.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path


def ensure(
    ca_dir: Path, directory: Path, nodes: Sequence[str], clients: Sequence[str]
) -> list[str]:
    """Makes what is missing (in `ca_dir`) and publishes it to `directory` without the CA's
    key; the names of the files it made."""
    from flotilla import certs  # noqa: PLC0415 (the image's venv has it; this file is a script)

    clash = sorted({"ca"} & {*nodes, *clients})
    if clash:  # its files would be the CA's: ca.key must never reach `directory`
        raise ValueError(f"name(s) {clash} are the CA's files' names: name the nodes otherwise")
    made: list[str] = []
    ca_dir.mkdir(parents=True, exist_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    if not (ca_dir / "ca.pem").exists():
        certs.init_ca(ca_dir)
        made.append("ca.pem")
    for node_id in nodes:
        if not (ca_dir / f"{node_id}.pem").exists():
            certs.issue_node(ca_dir, node_id, hosts=(node_id,))
            made.append(f"{node_id}.pem")
    for name in clients:
        if not (ca_dir / f"{name}.pem").exists():
            certs.issue_client(ca_dir, name)
            made.append(f"{name}.pem")
    published = ["ca.pem"] + [f"{n}.{kind}" for n in (*nodes, *clients) for kind in ("pem", "key")]
    for name in published:
        shutil.copy2(ca_dir / name, directory / name)  # keys keep their 0600
    return made


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compose_certs.py", description=__doc__.splitlines()[0])
    parser.add_argument("--ca-dir", type=Path, required=True, help="where the CA lives")
    parser.add_argument("--dir", type=Path, required=True, help="where certificates go")
    parser.add_argument("--node", nargs="+", default=[], help="node ids")
    parser.add_argument("--client", nargs="+", default=[], help="client names")
    args = parser.parse_args(argv)
    try:
        made = ensure(args.ca_dir, args.dir, args.node, args.client)
    except (OSError, ValueError) as error:
        print(f"compose_certs: {error}", file=sys.stderr)
        return 1
    for name in made:
        print(f"compose_certs: made {args.ca_dir / name}")
    if not made:
        print(f"compose_certs: every certificate is in {args.dir} already")
    return 0


if __name__ == "__main__":
    sys.exit(main())
