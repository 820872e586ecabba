"""Every relative link in README.md and docs/*.md leads to a file of this repository (and, with
`#anchor`, to a heading of it): nothing points outside the checkout, e.g. `../shared/...`, which a
reader who cloned the repository does not have. A path written in backticks that climbs out of
its directory (`../x`) counts as a link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
_CLIMBING_PATH = re.compile(r"`(\.\./[^`\s]*)`")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:, ...


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        base = slug(heading)
        name, number = base, 1
        while name in found:  # a repeated heading gets -1, -2, ...
            name, number = f"{base}-{number}", number + 1
        found.add(name)
    return found


def broken_links(page: Path, root: Path) -> list[str]:
    """What is wrong with each relative link of `page` (empty: every link resolves in `root`)."""
    text = page.read_text(encoding="utf-8")
    prose = _FENCE.sub("", text)
    targets = _LINK.findall(prose) + _REFERENCE.findall(prose)
    targets += _CLIMBING_PATH.findall(prose)
    problems = []
    for target in targets:
        if _EXTERNAL.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page.resolve()
        shown = f"{page.relative_to(root)}: {target}"
        if not resolved.is_relative_to(root.resolve()):
            problems.append(f"{shown} points outside the repository ({resolved})")
        elif not resolved.exists():
            problems.append(f"{shown} does not exist")
        elif (
            anchor
            and resolved.suffix == ".md"
            and anchor not in anchors(resolved.read_text(encoding="utf-8"))
        ):
            problems.append(f"{shown}: no heading has the anchor #{anchor}")
    return problems


def test_the_docs_folder_holds_the_pages_the_readme_promises() -> None:
    names = {page.name for page in PAGES}
    expected = {
        "quickstart.md",
        "concepts.md",
        "configuration.md",
        "cli.md",
        "operations.md",
        "durability.md",
        "troubleshooting.md",
    }
    assert expected <= names, f"missing from docs/: {sorted(expected - names)}"
    readme = (ROOT / "README.md").read_text()
    unlinked = sorted(n for n in expected if f"](docs/{n}" not in readme)
    assert not unlinked, f"README.md does not link {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(page: Path) -> None:
    assert broken_links(page, ROOT) == []


def test_the_checker_catches_links_that_leave_or_miss(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("# A page\n\n## Some part\n")
    page = root / "README.md"
    page.write_text(
        "The map is `../shared/DESIGN.md`; see [design](../shared/DESIGN.md),\n"
        "[gone](docs/gone.md), [part](docs/a.md#no-such-part), [ok](docs/a.md#some-part),\n"
        "[web](https://example.com/x) and [here](#top).\n\n# Top\n\n"
        "```sh\n[not a link](../inside/a/code/block)\n```\n"
    )
    assert broken_links(page, root) == [
        f"README.md: ../shared/DESIGN.md points outside the repository "
        f"({(tmp_path / 'shared' / 'DESIGN.md').resolve()})",
        "README.md: docs/gone.md does not exist",
        "README.md: docs/a.md#no-such-part: no heading has the anchor #no-such-part",
        f"README.md: ../shared/DESIGN.md points outside the repository "
        f"({(tmp_path / 'shared' / 'DESIGN.md').resolve()})",
    ]


def test_anchors_follow_githubs_rules() -> None:
    text = "# `flotilla topic create`\n## What it guarantees\n## Spark\n## Spark\n"
    assert anchors(text) == {"flotilla-topic-create", "what-it-guarantees", "spark", "spark-1"}
