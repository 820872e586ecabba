"""Generates the two reference pages that must never drift from the code:

- `docs/configuration.md` from `cluster.config.NodeConfig`: every field, its type, default, TOML
  key, environment variable and flag, and its meaning from the field's docstring or comment;
- `docs/cli.md` from the argparse parser that `flotilla.cli.main` builds.

    python -m scripts.gen_docs           # rewrite both (what `make docs` runs)
    python -m scripts.gen_docs --check   # exit 1 naming each stale page; changes nothing

`tests/test_docs_generated.py` runs the check, so a changed default, a new setting or a new
option fails the suite until the pages are regenerated. The output depends on nothing but the
code: `FLOTILLA_*` variables are hidden while the parser is built (a default read from the
environment would otherwise leak into the page) and the usage lines are wrapped at a fixed width.

Why one module of ~530 lines: it is a build tool with one pipeline (read the code, render both
pages, write them or name the stale ones), and its tests load it as one file by path; its parts
are short functions in two runs, the configuration page's and then the CLI page's.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import difflib
import importlib
import inspect
import io
import json
import os
import re
import sys
import tokenize
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
CONFIG_PAGE = "docs/configuration.md"
CLI_PAGE = "docs/cli.md"
REGENERATE = "make docs"  # the one command the pages name
USAGE_COLUMNS = 100

__all__ = ["Setting", "cli_md", "cli_parser", "configuration_md", "main", "render", "settings"]


class DocsError(RuntimeError):
    """The code cannot be documented as it stands (e.g. a setting without a description)."""


# -- configuration ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    name: str
    type: str
    default: str
    description: str
    section: str


# Settings cluster/config.py declares without a comment (that file belongs to the cluster
# package): their meaning until a comment there says it; `settings` refuses an entry here once the
# source documents the field itself, so this table can only shrink.
UNCOMMENTED: Mapping[str, str] = {
    "segment_bytes": "A partition's active log segment is sealed, and a new one started, once "
    "it reaches this size; retention removes whole sealed segments only.",
    "max_inflight_request_bytes": "Produce admission (cluster.ingress): bytes of produce calls "
    "admitted at once, each call counting as max_message_bytes until its message has arrived; "
    "beyond: RESOURCE_EXHAUSTED with the reason OVERLOADED (the SDK backs off and retries).",
    "default_replication_factor": "Replication factor of a topic created without one "
    "(a create request with replication factor 0).",
}

_SECTION = re.compile(r"^[A-Za-z][A-Za-z ]*$")  # a short heading comment such as "# Raft"


def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """line number -> (comment text, whether the line holds nothing but the comment)."""
    found: dict[int, tuple[str, bool]] = {}
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, column = token.start
            text = token.string.lstrip("#").strip()
            found[row] = (text, not lines[row - 1][:column].strip())
    return found


def _is_section(text: str) -> bool:
    return bool(_SECTION.match(text)) and len(text.split()) <= 4


def _default_text(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    return _toml_value(field.name, value)


def _toml_value(name: str, value: object) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, int):
        return f"`{value}`{_unit_hint(name, value)}"
    if isinstance(value, float):
        return f"`{value}`"
    if isinstance(value, tuple | list):
        return "`[]`" if not value else f"`{list(value)}`"
    if isinstance(value, Mapping):
        return "`{}`" if not value else f"`{dict(value)}`"
    return f"`{value!r}`"


def toml_literal(value: object) -> str:
    """`value` written as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string of printable text is a TOML basic string
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = ", ".join(f"{k} = {toml_literal(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise DocsError(f"no TOML form for {value!r}")


def _default_value(field: dataclasses.Field[Any]) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise DocsError(f"setting {field.name} has no default")


def example_toml(cls: type) -> str:
    """A node.toml naming every setting at its default, each commented out."""
    lines = [
        "# node.toml: every setting at its default; uncomment a line to change it.",
        "# node_id and data_dir have no useful default: set them here or by flag.",
    ]
    for field in dataclasses.fields(cls):
        if field.name == "cluster_secret":
            lines.append("# cluster_secret: set FLOTILLA_CLUSTER_SECRET rather than write it here")
            continue
        lines.append(f"# {field.name} = {toml_literal(_default_value(field))}")
    return "\n".join(lines)


def _unit_hint(name: str, value: int) -> str:
    if name.endswith("_bytes") and value >= 1024:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value % size == 0:
                return f" ({value // size} {unit})"
    if name.endswith("_ms") and value >= 1000 and value % 1000 == 0:
        seconds = value // 1000
        for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
            if seconds % size == 0 and seconds >= size:
                count = seconds // size
                return f" ({count} {unit}{'s' if unit == 'day' and count > 1 else ''})"
        return f" ({seconds} s)"
    return ""


def settings(cls: type, source: str, fallback: Mapping[str, str] | None = None) -> list[Setting]:
    """The fields of dataclass `cls`, documented from `source` (the module that defines it).

    A field's meaning is its attribute docstring (a string right after it), else its trailing
    comment and the comment lines right above it. A one-line comment of at most four words
    (`# Raft`) above a field opens a section. A field the source leaves without a word takes its
    entry in `fallback` (`UNCOMMENTED` for NodeConfig), which may hold only such fields. Raises
    DocsError naming every field left without a meaning, and every `fallback` entry the source
    has made needless."""
    fallback = fallback or {}
    tree = ast.parse(source)
    node = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__), None
    )
    if node is None:
        raise DocsError(f"class {cls.__name__} is not defined in the source given")
    comments = _comments(source)
    types_by_name: dict[str, str] = {}
    documented: dict[str, tuple[str, str]] = {}
    section = ""
    previous_end = node.lineno
    body = node.body
    for position, statement in enumerate(body):
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            previous_end = statement.end_lineno or statement.lineno
            continue
        name = statement.target.id
        types_by_name[name] = ast.unparse(statement.annotation)
        above: list[str] = []
        row = statement.lineno - 1
        while row > previous_end and row in comments and comments[row][1]:
            above.insert(0, comments[row][0])
            row -= 1
        end = statement.end_lineno or statement.lineno
        trailing = [
            comments[r][0]
            for r in range(statement.lineno, end + 1)
            if r in comments and not comments[r][1]
        ]
        if above and _is_section(above[0]):
            section = above.pop(0)
        docstring = ""
        following = body[position + 1] if position + 1 < len(body) else None
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docstring = inspect.cleandoc(following.value.value)
        text = docstring or " ".join(above + trailing)
        documented[name] = (_sentence(text), section)
        previous_end = end
    missing = []
    needless = sorted(n for n in fallback if documented.get(n, ("", ""))[0] or n not in documented)
    found = []
    for field in dataclasses.fields(cls):
        text, heading = documented.get(field.name, ("", ""))
        text = text or fallback.get(field.name, "")
        if not text:
            missing.append(field.name)
            continue
        found.append(
            Setting(
                field.name,
                types_by_name.get(field.name, str(field.type)),
                _default_text(field),
                text,
                heading,
            )
        )
    if needless:
        raise DocsError(
            f"fallback description(s) for {needless} (scripts/gen_docs.py UNCOMMENTED): the "
            "source now documents those fields or no longer has them: delete the entries"
        )
    if missing:
        raise DocsError(
            f"{cls.__name__} field(s) {missing} have no docstring or comment: say what each "
            "means (unit, default, valid values) where it is declared"
        )
    return found


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    if not text:
        return ""
    first = text.split()[0].rstrip(",.;:")
    if first.isalpha() and first.islower():  # not `gRPC`, `HOST:PORT`, `[A-Z]...`
        text = text[0].upper() + text[1:]
    return text if text.endswith((".", ")", "`")) else text + "."


def _flags_by_dest(parser: argparse.ArgumentParser) -> dict[str, str]:
    return {
        action.dest: ", ".join(f"`{option}`" for option in action.option_strings)
        for action in parser._actions
        if action.option_strings and action.help != argparse.SUPPRESS
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def configuration_md(
    config_module: types.ModuleType, node_parser: argparse.ArgumentParser | None
) -> str:
    config_cls = config_module.NodeConfig
    found = settings(config_cls, inspect.getsource(config_module), UNCOMMENTED)
    flags = _flags_by_dest(node_parser) if node_parser is not None else {}
    intro = inspect.cleandoc(config_module.__doc__ or "")
    out = [
        "# Configuration reference",
        "",
        f"<!-- generated by `{REGENERATE}` (scripts/gen_docs.py) from {config_module.__name__}."
        f"{config_cls.__name__}: do not edit by hand -->",
        "",
        "Every setting of a node (`flotilla node`), grouped as `cluster/config.py` declares them.",
        "",
        "- **TOML** (`--config node.toml`): keys named as in the first column, e.g. "
        "`replace_after_s = 60.0`; `join` is a list of strings, `controllers` a table "
        '(`controllers = { n1 = "10.0.0.1:7101" }`).',
        "- **Environment**: `FLOTILLA_` and the name in upper case, e.g. "
        "`FLOTILLA_REPLACE_AFTER_S=60`; `join` and `controllers` take the comma lists their "
        "flags take.",
        "- **Flags**: only the settings below that name one; see [the CLI reference](cli.md).",
        "",
        "A value that does not validate stops the node at start with a message naming the "
        "setting, the bad value and what is valid; nothing is started.",
    ]
    for paragraph in intro.split("\n\n")[1:]:
        out += ["", paragraph.replace("\n", " ")]
    sections: dict[str, list[Setting]] = {}
    for setting in found:
        sections.setdefault(setting.section or "General", []).append(setting)
    for heading, rows in sections.items():
        out += [
            "",
            f"## {heading[0].upper()}{heading[1:]}",
            "",
            "| setting | type | default | flag / environment | meaning |",
            "|---|---|---|---|---|",
        ]
        for s in rows:
            where = flags.get(s.name, "—") + f"<br>`FLOTILLA_{s.name.upper()}`"
            out.append(
                f"| `{s.name}` | `{_cell(s.type)}` | {_cell(s.default)} | {where} | "
                f"{_cell(s.description)} |"
            )
    out += ["", "## Example", "", "```toml", example_toml(config_cls), "```"]
    return "\n".join(out) + "\n"


# -- command line ----------------------------------------------------------------------------------
class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser captured")
        self.parser = parser


@contextlib.contextmanager
def _fixed_environment() -> Iterator[None]:
    """No FLOTILLA_* variables and a fixed terminal width, for output that depends on code only."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("FLOTILLA_") or k == "COLUMNS"}
    for key in saved:
        del os.environ[key]
    os.environ["COLUMNS"] = str(USAGE_COLUMNS + 2)  # argparse wraps at COLUMNS - 2
    try:
        yield
    finally:
        del os.environ["COLUMNS"]
        os.environ.update(saved)


def cli_parser() -> argparse.ArgumentParser:
    """The parser `flotilla.cli.main` builds: `flotilla.cli.build_parser()` where it exists,
    else the one `main` calls `parse_args` on (caught there, so nothing runs)."""
    from flotilla import cli  # noqa: PLC0415 (the generator must import without the SDK)

    with _fixed_environment():
        build: Callable[[], argparse.ArgumentParser] | None = getattr(cli, "build_parser", None)
        if build is not None:
            return build()

        def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
            raise _Captured(self)

        with mock.patch.object(argparse.ArgumentParser, "parse_args", capture):
            try:
                cli.main([])
            except _Captured as captured:
                return captured.parser
    raise DocsError("flotilla.cli.main([]) returned without parsing its arguments")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand of `parser`, in registration order."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def _argument_row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            metavar = formatter._format_args(action, action.dest.upper())
            name = f"{name} {metavar}"
    else:
        name = formatter._format_args(action, action.dest)
    help_text = formatter._expand_help(action) if action.help else ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        choices = ", ".join(f"`{c}`" for c in action.choices)
        help_text = f"{help_text} (one of {choices})".strip()
    if action.required:
        default = "required"
    elif action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        default = "—"
    else:
        default = f"`{action.default}`"
    return f"| `{_cell(name)}` | {default} | {_cell(help_text)} |"


def _render_command(
    out: list[str], path: str, summary: str, parser: argparse.ArgumentParser
) -> None:
    subcommands = _subcommands(parser)
    out += ["", f"## `{path}`", ""]
    description = parser.description or summary
    if description:
        out += [_sentence(description), ""]
    if subcommands:
        out += [
            f"- [`{path} {name}`](#{slug(f'{path} {name}')}): {text}"
            for name, text, _ in subcommands
        ]
    else:
        out += ["```", parser.format_usage().strip(), "```"]
        rows = [
            _argument_row(parser, action)
            for action in parser._actions
            if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)
        ]
        if rows:
            out += ["", "| argument | default | meaning |", "|---|---|---|", *rows]
    for name, help_text, sub in subcommands:
        _render_command(out, f"{path} {name}", help_text, sub)


def cli_md(parser: argparse.ArgumentParser) -> str:
    with _fixed_environment():
        out = [
            "# CLI reference",
            "",
            f"<!-- generated by `{REGENERATE}` (scripts/gen_docs.py) from the parser that "
            "flotilla.cli.main builds: do not edit by hand -->",
            "",
            "Every `flotilla` command, its arguments, their defaults and what they do "
            "(`flotilla COMMAND --help` prints the same). Settings of a node that have no flag "
            "are in the [configuration reference](configuration.md).",
            "",
            "```",
            parser.format_usage().strip(),
            "```",
        ]
        if parser.description:
            out += ["", _sentence(parser.description)]
        top_options = [
            _argument_row(parser, action)
            for action in parser._actions
            if action.option_strings
            and action.help != argparse.SUPPRESS
            and not isinstance(action, argparse._HelpAction)
        ]
        if top_options:
            out += ["", "| argument | default | meaning |", "|---|---|---|", *top_options]
        out += ["", "Commands:", ""]
        for name, help_text, _ in _subcommands(parser):
            out.append(f"- [`{parser.prog} {name}`](#{slug(f'{parser.prog} {name}')}): {help_text}")
        for name, help_text, sub in _subcommands(parser):
            _render_command(out, f"{parser.prog} {name}", help_text, sub)
    return "\n".join(out) + "\n"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces
    to `-`."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


# -- the pages -------------------------------------------------------------------------------------
def _node_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser | None:
    return next((sub for name, _, sub in _subcommands(parser) if name == "node"), None)


def render(
    config_module: types.ModuleType | None = None,
    parser: argparse.ArgumentParser | None = None,
) -> dict[str, str]:
    """{page path relative to the repository: its text}; arguments replace what is documented
    (the tests pass altered ones to show that a change makes a page stale)."""
    if config_module is None:
        config_module = importlib.import_module("cluster.config")
    if parser is None:
        parser = cli_parser()
    return {
        CONFIG_PAGE: configuration_md(config_module, _node_parser(parser)),
        CLI_PAGE: cli_md(parser),
    }


def stale(root: Path, pages: Mapping[str, str]) -> list[str]:
    """The pages whose committed text differs from `pages` (missing ones included)."""
    found = []
    for path, text in pages.items():
        target = root / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            found.append(path)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.gen_docs",
        description="Regenerate docs/configuration.md and docs/cli.md from the code.",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 naming each stale page; write nothing"
    )
    args = parser.parse_args(argv)
    try:
        pages = render()
    except DocsError as error:
        print(f"gen_docs: {error}", file=sys.stderr)
        return 1
    outdated = stale(ROOT, pages)
    if args.check:
        for path in outdated:
            old = (ROOT / path).read_text(encoding="utf-8") if (ROOT / path).is_file() else ""
            diff = difflib.unified_diff(
                old.splitlines(), pages[path].splitlines(), path, "generated", lineterm="", n=0
            )
            print(f"{path} is stale: run `{REGENERATE}`", file=sys.stderr)
            print("\n".join(list(diff)[:20]), file=sys.stderr)
        return 1 if outdated else 0
    for path in outdated:
        (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / path).write_text(pages[path], encoding="utf-8")
        print(f"wrote {path}")
    if not outdated:
        print("docs/configuration.md and docs/cli.md are up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
