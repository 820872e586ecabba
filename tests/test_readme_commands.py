"""Each command block of README.md and docs/quickstart.md (fenced `sh`, `bash`, `shell` or
`console`) either runs here, as written, against the real cluster it starts, or says why it does
not, on the line right above it:

    <!-- not-run: needs Docker (make compose-check runs these) -->

How a block runs: each command (a line, with `\\` continuations joined; in a `console` block the
lines starting with `$ `) runs in bash, in a scratch directory, with `.venv/bin/` meaning this
interpreter's directory and no `FLOTILLA_*` variable set but those an earlier command of the page
exported or sourced (`. .flotilla-dev/client.env`: the session's variables carry over, as in the
reader's shell); it must exit 0 without a traceback, and
where the README says what it prints (`EXPECTED_OUTPUT`), print that. A command ending in `&` is
a server: it starts in its own process group, and its README comment must say what to wait for
(`# wait for "... is up"`), which the test waits for in its output (what a reader does). After
the block each server gets SIGTERM (the README's `kill %1`) and must stop cleanly, with every
process it started gone; whatever is left is killed by pid.

The blocks of one page run as one session, in order: a server one block starts serves the next
ones, as for a reader going down the page. `make demo` and `make test` are marked not-run: each
takes minutes, and CI runs both anyway.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness import wait_until

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RUN_LANGUAGES = {"sh", "bash", "shell", "console"}
COMMAND_TIMEOUT_S = 40.0
SERVER_READY_S = 60.0
SERVER_STOP_S = 40.0
LEFT_BEHIND_GRACE_S = 10.0  # for a server's children to exit once it has

# what a command prints, where the README says so (command pattern -> whole-stdout pattern)
EXPECTED_OUTPUT: dict[str, str] = {
    r"\bflotilla produce orders --key customer-7\b": r"(\d+ \d+\n){2}",  # "partition offset"
    r"\bflotilla consume orders\b.*--from-beginning": r"one\ntwo\n",
    r"\bflotilla topic create orders\b": r"(?s).*\borders\b.*",
    r"\bflotilla status\b": r"(?s).*\borders\b.*",
}
# the addresses `flotilla dev --nodes 3` takes (cli_node.DEV_BASE_PORT, control plane + 100)
DEV_ADDRESSES = [(f"127.0.0.{i}", port) for i in (1, 2, 3) for port in (7001, 7101)]

_FENCE_OPEN = re.compile(r"^(\s*)```(\w*)\s*$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(.*?)\s*-->\s*$")
_WAIT_FOR = re.compile(r'wait for "([^"]+)"')


@dataclass(frozen=True, slots=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    not_run: str  # the reason given, or "" when the block runs


def command_blocks(text: str) -> list[Block]:
    """The fenced blocks in a language a shell runs, with the not-run reason written above each."""
    lines = text.splitlines()
    found = []
    index = 0
    while index < len(lines):
        opening = _FENCE_OPEN.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, language = opening.groups()
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        previous = next((ln for ln in reversed(lines[:index]) if ln.strip()), "")
        marker = _NOT_RUN.match(previous)
        body = "\n".join(ln.removeprefix(indent) for ln in lines[index + 1 : end])
        if language in RUN_LANGUAGES:
            found.append(Block(index + 1, language, body, marker.group(1) if marker else ""))
        index = end + 1
    return found


def commands(block: Block) -> list[str]:
    """The commands of a block, continuations joined, comment-only lines dropped (in a `console`
    block: the lines after a `$ ` prompt and their continuations; the rest is output)."""
    found: list[str] = []
    pending = ""
    for raw in block.text.splitlines():
        line = raw
        if block.language == "console" and not pending:
            if not raw.startswith("$ "):
                continue
            line = raw[2:]
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        found.append(pending + line)
        pending = ""
    if pending:
        found.append(pending)
    return found


def split_comment(command: str) -> tuple[str, str]:
    """(code, comment): the comment starts at the first ` #` outside quotes."""
    quote = ""
    for position, char in enumerate(command):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or command[position - 1].isspace()):
            return command[:position].rstrip(), command[position + 1 :].strip()
    return command.rstrip(), ""


# -- processes ---------------------------------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> set[int]:
    tree = _children()
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in tree.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _kill_group_of(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(os.getpgid(pid), signal.SIGKILL)


@dataclass
class Server:
    command: str
    process: subprocess.Popen[bytes]
    output: Path
    started: set[int]  # the processes it had started once ready


def _ports_free(timeout_s: float) -> None:
    """`flotilla dev` takes fixed ports: wait (bounded) while another run holds them."""

    def taken() -> list[str]:
        held = []
        for host, port in DEV_ADDRESSES:
            with socket.socket() as probe:
                # as a server binds: a closed connection's TIME_WAIT does not hold the port
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((host, port))
                except OSError:
                    held.append(f"{host}:{port}")
        return held

    wait_until(lambda: not taken(), timeout_s, "the dev cluster's addresses to be free", taken)


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


# what bash itself sets: never carried from one command to the next
_SHELL_OWN = {"PWD", "OLDPWD", "SHLVL", "_"}


def _carried(env_file: Path, before: dict[str, str]) -> dict[str, str]:
    """The environment a command left (`env -0` at its end), minus what bash sets itself."""
    if not env_file.exists():
        return before
    after = dict(entry.split("=", 1) for entry in env_file.read_text().split("\0") if "=" in entry)
    return {k: v for k, v in after.items() if k not in _SHELL_OWN} | {
        k: before[k] for k in _SHELL_OWN if k in before
    }


def _localise(code: str) -> str:
    return code.replace(".venv/bin/", f"{Path(sys.executable).parent}/")


def _logs(cwd: Path) -> str:
    """The last lines of every log a server wrote under `cwd` (a dev cluster's node logs)."""
    shown = []
    for log in sorted(cwd.rglob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-5:]
        shown.append(f"--- {log.relative_to(cwd)}:\n" + "\n".join(tail))
    return "\n".join(shown)


def _start_server(code: str, comment: str, cwd: Path, env: dict[str, str]) -> Server:
    wanted = _WAIT_FOR.search(comment)
    assert wanted, (
        f'server command {code!r}: its comment must say what to wait for (wait for "...")'
    )
    output = cwd / f"server-{time.monotonic_ns()}.out"
    with open(output, "wb") as sink:
        process = subprocess.Popen(
            ["bash", "-c", "exec " + _localise(code.removesuffix("&").strip())],
            cwd=cwd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = Server(code, process, output, set())

    def ready() -> bool:
        assert process.poll() is None, (
            f"{code!r} exited with {process.returncode} before printing {wanted.group(1)!r}:\n"
            + output.read_text(errors="replace")
            + _logs(cwd)
        )
        return wanted.group(1) in output.read_text(errors="replace")

    wait_until(
        ready,
        SERVER_READY_S,
        f"{code!r} to print {wanted.group(1)!r}",
        lambda: output.read_text(errors="replace") + _logs(cwd),
    )
    server.started = descendants(process.pid)
    return server


def _stop_server(server: Server) -> list[str]:
    """SIGTERM, then what went wrong: a non-zero exit, a process left behind."""
    problems = []
    server.started |= descendants(server.process.pid)
    with contextlib.suppress(ProcessLookupError):
        server.process.send_signal(signal.SIGTERM)
    try:
        code = server.process.wait(timeout=SERVER_STOP_S)
        if code != 0:
            problems.append(f"{server.command!r} exited with {code} on SIGTERM")
    except subprocess.TimeoutExpired:
        problems.append(f"{server.command!r} did not stop within {SERVER_STOP_S} s of SIGTERM")
    with contextlib.suppress(AssertionError):  # what is still alive then is reported below
        wait_until(
            lambda: not any(_alive(pid) for pid in server.started),
            LEFT_BEHIND_GRACE_S,
            "the server's processes to exit",
        )
    left = sorted(pid for pid in server.started if _alive(pid))
    if left:
        problems.append(f"{server.command!r} left processes {left} running")
    return problems


def _clean_up(server: Server) -> None:
    for pid in server.started | descendants(server.process.pid):
        if _alive(pid):
            _kill_group_of(pid)
    if server.process.poll() is None:
        _kill_group_of(server.process.pid)
        server.process.wait(timeout=10)


@contextlib.contextmanager
def servers() -> Iterator[list[Server]]:
    running: list[Server] = []
    try:
        yield running
    finally:
        for server in running:
            _clean_up(server)


def run_blocks(blocks: list[Block], cwd: Path, page: str = "README.md") -> list[tuple[str, str]]:
    """Runs every command of `blocks` in order, as one session (a server started in one block
    serves the next ones, as for a reader going down the page); (command, stdout) of each
    foreground command."""
    env = _environment()
    results = []
    with servers() as running:
        for block in blocks:
            for command in commands(block):
                code, comment = split_comment(command)
                if code.endswith("&"):
                    if "flotilla dev" in code:
                        _ports_free(60)
                    running.append(_start_server(code, comment, cwd, env))
                    continue
                env_file = cwd / f"env-{time.monotonic_ns()}"
                script = f"{_localise(code)}\nstatus=$?; env -0 > {env_file}; exit $status"  # the variables it exported or sourced carry over to the next command
                done = subprocess.run(
                    ["bash", "-o", "pipefail", "-c", script],
                    cwd=cwd,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_TIMEOUT_S,
                    start_new_session=True,
                    check=False,
                )
                shown = f"{page} line {block.line}: `{code}`"
                assert done.returncode == 0, (
                    f"{shown} exited with {done.returncode}\nstdout:\n{done.stdout}\n"
                    f"stderr:\n{done.stderr}"
                )
                assert "Traceback" not in done.stderr, (
                    f"{shown} printed a traceback:\n{done.stderr}"
                )
                results.append((code, done.stdout))
                env = _carried(env_file, env)
                env_file.unlink(missing_ok=True)
        problems = [problem for server in running for problem in _stop_server(server)]
        assert not problems, problems
    return results


def run_block(block: Block, cwd: Path) -> list[tuple[str, str]]:
    return run_blocks([block], cwd)


# -- the tests -----------------------------------------------------------------------------------------
PAGES = [README, ROOT / "docs" / "quickstart.md"]  # the pages a new user follows command by command
BLOCKS = {page: command_blocks(page.read_text(encoding="utf-8")) for page in PAGES}
RUN = {page: [b for b in blocks if not b.not_run] for page, blocks in BLOCKS.items()}


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_block_runs_or_says_why_not(page: Path) -> None:
    assert BLOCKS[page], f"{_name(page)} has no command block"
    assert RUN[page], f"every command block of {_name(page)} is marked not-run"
    for block in BLOCKS[page]:
        if block.not_run:
            assert len(block.not_run) >= 10, (
                f"line {block.line}: give a reason, not {block.not_run!r}"
            )


@pytest.mark.integration
@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_the_command_blocks_run(page: Path, tmp_path: Path) -> None:
    results = run_blocks(RUN[page], tmp_path, _name(page))
    for command_pattern, output_pattern in EXPECTED_OUTPUT.items():
        for code, stdout in results:
            if re.search(command_pattern, code):
                assert re.fullmatch(output_pattern, stdout), (
                    f"{_name(page)}: `{code}` printed {stdout!r}, which does not match "
                    f"{output_pattern!r}"
                )


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_expected_output_names_a_command_that_runs(page: Path) -> None:
    ran = [split_comment(c)[0] for block in RUN[page] for c in commands(block)]
    unmatched = [p for p in EXPECTED_OUTPUT if not any(re.search(p, _strip(c)) for c in ran)]
    assert not unmatched, (
        f"EXPECTED_OUTPUT patterns that match no command of {_name(page)}: {unmatched}"
    )


def _strip(code: str) -> str:
    return code.replace(".venv/bin/", "")


# -- the runner itself, on small made-up READMEs --------------------------------------------------------
def test_the_parser_reads_blocks_markers_and_continuations() -> None:
    text = (
        "<!-- not-run: needs Docker, which CI lacks -->\n"
        "```sh\ndocker compose up -d\n```\n\n"
        "```console\n$ echo a \\\n    b   # joined\nan output line\n```\n"
        "```python\nprint('not a shell block')\n```\n"
        "- item:\n\n  ```bash\n  # only a comment\n  true\n  ```\n"
    )
    found = command_blocks(text)
    assert [(b.line, b.language, b.not_run) for b in found] == [
        (2, "sh", "needs Docker, which CI lacks"),
        (6, "console", ""),
        (16, "bash", ""),
    ]
    assert commands(found[1]) == ["echo a      b   # joined"]
    assert commands(found[2]) == ["true"]


def test_an_exported_or_sourced_variable_carries_over_to_the_next_command(tmp_path: Path) -> None:
    (tmp_path / "client.env").write_text("export FLOTILLA_TLS_CA=/x/ca.pem\n")
    block = Block(1, "sh", '. ./client.env\nexport B=2\necho "$FLOTILLA_TLS_CA $B"', "")
    assert run_block(block, tmp_path)[-1] == ('echo "$FLOTILLA_TLS_CA $B"', "/x/ca.pem 2\n")


def test_a_failing_command_still_fails_when_its_environment_is_kept(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="exited with 3"):
        run_block(Block(1, "sh", "export A=1; (exit 3)", ""), tmp_path)
    assert split_comment("printf 'a # b' | wc -c  # counts") == ("printf 'a # b' | wc -c", "counts")


def test_the_runner_fails_a_command_that_fails(tmp_path: Path) -> None:
    block = Block(7, "sh", "true\nls /no/such/dir   # the README is wrong here\n", "")
    with pytest.raises(AssertionError, match=r"line 7: `ls /no/such/dir` exited with 2"):
        run_block(block, tmp_path)


def test_the_runner_fails_a_traceback(tmp_path: Path) -> None:
    block = Block(3, "sh", "python -c 'import sys; sys.stderr.write(\"Traceback (most\")'\n", "")
    with pytest.raises(AssertionError, match="printed a traceback"):
        run_block(block, tmp_path)


def test_the_runner_waits_for_a_server_and_stops_it(tmp_path: Path) -> None:
    script = (
        "import signal, subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '60'])\n"
        "signal.signal(signal.SIGTERM, lambda *_: (child.terminate(), child.wait(), sys.exit(0)))\n"
        "time.sleep(0.3); print('server is up', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    (tmp_path / "server.py").write_text(script)
    block = Block(
        1, "sh", f'python {tmp_path}/server.py &   # wait for "is up"\necho talking\n', ""
    )
    assert run_block(block, tmp_path) == [("echo talking", "talking\n")]


def test_the_runner_fails_a_server_that_leaves_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "LEFT_BEHIND_GRACE_S", 0.5)
    script = (
        "import subprocess, time\n"
        "subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "print('server is up', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    (tmp_path / "leaky.py").write_text(script)
    block = Block(1, "sh", f'python {tmp_path}/leaky.py &   # wait for "is up"\n', "")
    with pytest.raises(AssertionError, match="left processes"):
        run_block(block, tmp_path)


def test_the_runner_needs_to_know_what_to_wait_for(tmp_path: Path) -> None:
    block = Block(1, "sh", "sleep 30 &   # runs in the background\n", "")
    with pytest.raises(AssertionError, match="must say what to wait for"):
        run_block(block, tmp_path)
