"""`bench.ab`'s exported side runs the exported code, not this tree's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.ab import side_env

ROOT = Path(__file__).resolve().parent.parent


def test_a_node_started_here_with_the_side_env_runs_the_exported_tree(tmp_path: Path) -> None:
    # a stand-in tree whose `flotilla` package says where it is; the node command is this
    # tree's (`python -m flotilla ...`), started in this tree's directory as LocalCluster does
    package = tmp_path / "flotilla"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("print('exported tree')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    ran = subprocess.run(
        [sys.executable, "-m", "flotilla", "--version"],
        cwd=ROOT, env={**env, **side_env(tmp_path)}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert ran.stdout.strip() == "exported tree", (ran.stdout, ran.stderr)
