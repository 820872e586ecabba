"""The committed generated modules match the .proto files (`make proto` regenerates them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def generate(into: Path) -> None:
    (into / "proto").mkdir(parents=True, exist_ok=True)
    sources = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "proto").glob("*.proto"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            str(ROOT),
            f"--python_out={into}",
            f"--grpc_python_out={into}",
            f"--pyi_out={into}",
            *sources,
        ],
        check=True,
    )


def stale_files(fresh: Path) -> list[str]:
    stale = []
    for proto in sorted((ROOT / "proto").glob("*.proto")):
        for suffix in GENERATED:
            name = proto.stem + suffix
            committed = ROOT / "proto" / name
            if (
                not committed.exists()
                or committed.read_bytes() != (fresh / "proto" / name).read_bytes()
            ):
                stale.append(name)
    return stale


def test_generated_modules_are_fresh(tmp_path: Path) -> None:
    generate(tmp_path)
    assert stale_files(tmp_path) == [], "run `make proto` and commit the result"


def test_a_stale_module_is_caught(tmp_path: Path) -> None:
    generate(tmp_path)
    target = tmp_path / "proto" / "peer_pb2.py"
    target.write_bytes(target.read_bytes() + b"\n# edited by hand\n")
    assert stale_files(tmp_path) == ["peer_pb2.py"]
