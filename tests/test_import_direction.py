"""The import fences, read from the source with `ast` (nothing is imported or run):

- imports flow one way between our packages (DESIGN §1): a backward arrow fails;
- no import cycle between modules: every `import` counts, at module level, inside a function
  (a deferred import hides a cycle, it does not remove it) or under `TYPE_CHECKING` (a type-only
  cycle still ties two modules into one unit of change); a failure names the cycle;
- the cores are pure (STYLE habit 1): `raft/` and `membership/`, outside their `sim/` packages,
  import no socket, file, thread, process or clock module (`CORE_FORBIDDEN` says which and why);
- no `_private` name or module of one top-level package is imported by another;
- the Toxiproxy-compatible server (`chaos/toxiproxy/`) is a product of its own: it imports
  nothing of ours outside itself, and the chaos harness runs it as a process, never imports it.

Each fence has a test in which a deliberately broken tree (written to `tmp_path`) makes it fail.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS = {
    "proto", "storage", "raft", "membership", "consumers", "timers", "cluster", "flotilla",
    "chaos", "bench",
}  # fmt: skip

# package -> the packages of ours it may import
ALLOWED: dict[str, set[str]] = {
    "proto": set(),
    # the timer index (storage/timer_index.py) stores the timer core's vocabulary (timers.types),
    # a leaf that imports nothing of ours
    "storage": {"timers"},
    "membership": set(),
    "raft": {"storage"},
    "consumers": set(),
    "timers": set(),
    "cluster": {"proto", "storage", "raft", "membership", "consumers", "timers"},
    "flotilla": {"proto", "cluster"},  # the CLI may start a node through cluster/
    "chaos": {
        "proto",
        "flotilla",
        "cluster",
        "storage",
        "raft",
        "membership",
        "consumers",
        "timers",
    },
    "bench": OURS - {"bench"},
}

# Import cycles that exist today and that another change of issue 23 is removing. Each entry is
# the set of modules in the cycle. The lead empties this at merge: an entry whose cycle is gone
# fails `test_no_import_cycles_between_modules` too, so the list cannot go stale.
KNOWN_CYCLES: dict[frozenset[str], str] = {}

# What the cores may not import, outside their simulators (`raft/sim`, `membership/sim`, which
# drive the cores from a seed and so may use processes, files and the standard streams). Each
# module is I/O of some kind: the network (socket, ssl, select, selectors, asyncio, socketserver,
# http, urllib), files (os, io, pathlib, shutil, tempfile, mmap, fcntl, glob), threads and
# processes (threading, _thread, multiprocessing, concurrent, subprocess, signal), the clock
# (time, datetime: a core counts ticks), and the process's streams and exit (sys). Allowed, on
# purpose: `random` (for the `random.Random` a core is handed, seeded by its caller), `logging`
# (nothing in the cores uses it; a core that must report does so through return values or a
# logger its shell configures, as etcd-io/raft takes a Logger), pure codecs (struct, msgpack), and
# our `storage` (raft may import it: `raft.storage_log` is the sanctioned bridge to the segmented
# log, whose every file operation goes through a `storage.disk.Disk`).
CORE_FORBIDDEN = frozenset(
    {
        "socket", "ssl", "select", "selectors", "asyncio", "socketserver", "http", "urllib",
        "os", "io", "pathlib", "shutil", "tempfile", "mmap", "fcntl", "glob",
        "threading", "_thread", "multiprocessing", "concurrent", "subprocess", "signal",
        "time", "datetime",
        "sys",
    }
)  # fmt: skip
CORES = ("raft", "membership", "consumers")

TOXIPROXY = "chaos.toxiproxy"


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & OURS


def violations(root: Path) -> list[str]:
    problems = []
    for package, allowed in ALLOWED.items():
        for path in sorted((root / package).rglob("*.py")):
            for target in imported_packages(path) - allowed - {package}:
                problems.append(f"{path.relative_to(root)} imports {target}")
    return problems


# -- the module graph --------------------------------------------------------------------------


def modules(root: Path) -> dict[str, Path]:
    """Every module of our packages under `root`: dotted name -> file (`a/__init__.py` is `a`)."""
    found: dict[str, Path] = {}
    for package in sorted(OURS):
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


@cache
def _imports(name: str, path: Path) -> tuple[tuple[str, str | None], ...]:
    """(module, imported name or None) for every import statement of module `name`, anywhere in
    it, with relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.extend((module, alias.name) for alias in node.names)
    return tuple(found)


def _nearest(module: str, known: dict[str, Path]) -> str | None:
    while module and module not in known:
        module = module.rpartition(".")[0]
    return module or None


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of ours it imports (`from a.b import c` counts a.b.c when c is a
    module, else a.b). Importing a submodule also runs its parent packages' `__init__`; that
    implicit edge is left out, since a package importing its own submodules is no cycle."""
    known = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets: set[str] = set()
        for module, imported in _imports(name, path):
            if imported is not None and f"{module}.{imported}" in known:
                targets.add(f"{module}.{imported}")
            else:
                nearest = _nearest(module, known)
                if nearest is not None:
                    targets.add(nearest)
        targets.discard(name)
        graph[name] = targets
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative; the components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return components


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module, as a path that ends where it began."""
    first = min(component)
    previous: dict[str, str] = {}
    frontier = [first]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node] & component):
                if successor == first:
                    path = [node]
                    while path[-1] != first:
                        path.append(previous[path[-1]])
                    return [*reversed(path), first]
                if successor not in previous:
                    previous[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def import_cycles(root: Path) -> dict[frozenset[str], str]:
    """Every import cycle: its modules -> one cycle through them, `a -> b -> a`."""
    graph = import_graph(root)
    return {
        frozenset(component): " -> ".join(_one_cycle(graph, component))
        for component in _strongly_connected(graph)
    }


def cycle_problems(root: Path, known: dict[frozenset[str], str]) -> list[str]:
    found = import_cycles(root)
    problems = [
        f"import cycle: {cycle}" for members, cycle in found.items() if members not in known
    ]
    problems += [
        f"allowlisted cycle {sorted(members)} ({why}) is gone: remove it from KNOWN_CYCLES"
        for members, why in known.items()
        if members not in found
    ]
    return sorted(problems)


# -- purity, privacy, the Toxiproxy server's boundary --------------------------------------------


def impure_imports(root: Path) -> list[str]:
    problems = []
    for name, path in modules(root).items():
        parts = name.split(".")
        if parts[0] not in CORES or (len(parts) > 1 and parts[1] == "sim"):
            continue
        for module, _ in _imports(name, path):
            top = module.split(".")[0]
            if top in CORE_FORBIDDEN:
                problems.append(f"{path.relative_to(root)} imports {module} (I/O in a pure core)")
    return sorted(set(problems))


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def private_imports(root: Path) -> list[str]:
    problems = []
    for name, path in modules(root).items():
        for module, imported in _imports(name, path):
            parts = module.split(".")
            if parts[0] not in OURS or parts[0] == name.split(".")[0]:
                continue
            dotted = f"{module}.{imported}" if imported is not None else module
            if any(_private(part) for part in dotted.split(".")):
                problems.append(
                    f"{path.relative_to(root)} imports {dotted} (private to {parts[0]})"
                )
    return sorted(set(problems))


def toxiproxy_crossings(root: Path) -> list[str]:
    problems = []
    for name, path in modules(root).items():
        inside = name == TOXIPROXY or name.startswith(TOXIPROXY + ".")
        for module, imported in _imports(name, path):
            dotted = f"{module}.{imported}" if imported is not None else module
            target_inside = dotted == TOXIPROXY or dotted.startswith(TOXIPROXY + ".")
            ours = module.split(".")[0] in OURS
            if inside and ours and not target_inside:
                problems.append(f"{path.relative_to(root)} imports {dotted} (outside the server)")
            elif not inside and target_inside:
                problems.append(f"{path.relative_to(root)} imports {dotted} (run it as a process)")
    return sorted(set(problems))


# -- the tests -----------------------------------------------------------------------------------


def test_imports_flow_one_way() -> None:
    assert violations(ROOT) == []


def test_a_backward_import_is_caught(tmp_path: Path) -> None:
    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "bad.py").write_text("from raft.core import RaftNode\n")
    (tmp_path / "raft").mkdir()
    (tmp_path / "raft" / "ok.py").write_text("import storage\n")
    assert violations(tmp_path) == ["storage/bad.py imports raft"]


def test_no_import_cycles_between_modules() -> None:
    assert cycle_problems(ROOT, KNOWN_CYCLES) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_an_import_cycle_is_caught_and_named(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "storage/__init__.py": "from storage.a import A\n",
            "storage/a.py": "from storage.b import B\nA = 1\n",
            # relative, deferred and type-only imports count as well
            "storage/b.py": "def f():\n    from .c import C\nB = 2\n",
            "storage/c.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from storage import a\nC = 3\n",
            "storage/d.py": "import storage.a\n",  # imports into the cycle, not part of it
            "raft/x.py": "from raft import y\n",
            "raft/y.py": "from raft.x import X\n",
        },
    )
    assert cycle_problems(tmp_path, {}) == [
        "import cycle: raft.x -> raft.y -> raft.x",
        "import cycle: storage.a -> storage.b -> storage.c -> storage.a",
    ]
    known = {frozenset({"raft.x", "raft.y"}): "why", frozenset({"proto.p", "proto.q"}): "gone"}
    assert cycle_problems(tmp_path, known) == [
        "allowlisted cycle ['proto.p', 'proto.q'] (gone) is gone: remove it from KNOWN_CYCLES",
        "import cycle: storage.a -> storage.b -> storage.c -> storage.a",
    ]


def test_the_cores_import_no_io() -> None:
    assert impure_imports(ROOT) == []


def test_an_io_import_in_a_core_is_caught(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "raft/bad.py": "import random\nimport threading\n",
            "raft/worse.py": "def now():\n    from time import monotonic\n    return monotonic()\n",
            "membership/bad.py": "import os.path\nimport asyncio\n",
            "raft/sim/ok.py": "import os\nimport time\n",  # the simulator may
            "cluster/ok.py": "import socket\n",  # the shell may
        },
    )
    assert impure_imports(tmp_path) == [
        "membership/bad.py imports asyncio (I/O in a pure core)",
        "membership/bad.py imports os.path (I/O in a pure core)",
        "raft/bad.py imports threading (I/O in a pure core)",
        "raft/worse.py imports time (I/O in a pure core)",
    ]


def test_no_private_name_crosses_packages() -> None:
    assert private_imports(ROOT) == []


def test_a_private_import_across_packages_is_caught(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "cluster/x.py": "def _y(): ...\n",
            "cluster/_hidden.py": "Z = 1\n",
            "cluster/ok.py": "from cluster.x import _y\nfrom ._hidden import Z\n",  # same package
            "flotilla/bad.py": "from cluster.x import _y\nfrom cluster._hidden import Z\n",
            "chaos/bad.py": "from __future__ import annotations\nimport cluster._hidden\n",
        },
    )
    assert private_imports(tmp_path) == [
        "chaos/bad.py imports cluster._hidden (private to cluster)",
        "flotilla/bad.py imports cluster._hidden.Z (private to cluster)",
        "flotilla/bad.py imports cluster.x._y (private to cluster)",
    ]


def test_the_toxiproxy_server_is_its_own_product() -> None:
    assert toxiproxy_crossings(ROOT) == []


def test_a_crossing_into_or_out_of_the_toxiproxy_server_is_caught(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "chaos/toxiproxy/__init__.py": "",
            "chaos/toxiproxy/proxy.py": "from chaos.toxiproxy import errors\nimport socket\n",
            "chaos/toxiproxy/bad.py": "from chaos.history import Event\n",
            "chaos/nemesis.py": "from chaos.toxiproxy.proxy import Proxy\n",
            "chaos/network.py": "COMMAND = ['-m', 'chaos.toxiproxy']\n",  # a process: fine
        },
    )
    assert toxiproxy_crossings(tmp_path) == [
        "chaos/nemesis.py imports chaos.toxiproxy.proxy.Proxy (run it as a process)",
        "chaos/toxiproxy/bad.py imports chaos.history.Event (outside the server)",
    ]
