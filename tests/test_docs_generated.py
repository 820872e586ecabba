"""docs/configuration.md and docs/cli.md are generated (scripts/gen_docs.py, `make docs`): they
must equal what the generator makes from the code now, and the check must notice a change of the
code it documents (a default, a new setting, an option)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


gen = _load("flotilla_gen_docs", ROOT / "scripts" / "gen_docs.py")


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    built: argparse.ArgumentParser = gen.cli_parser()
    return built


def _source(module: types.ModuleType) -> str:
    return Path(str(module.__file__)).read_text()


def _config_variant(tmp_path: Path, old: str, new: str) -> types.ModuleType:
    """cluster/config.py with `old` replaced by `new`, loaded as a module of its own."""
    source = (ROOT / "cluster" / "config.py").read_text()
    assert source.count(old) == 1, f"{old!r} is not in cluster/config.py once"
    path = tmp_path / "altered_config.py"
    path.write_text(source.replace(old, new))
    return _load(f"altered_config_{abs(hash(new))}", path)


def test_generated_pages_are_fresh(parser: argparse.ArgumentParser) -> None:
    outdated = gen.stale(ROOT, gen.render(parser=parser))
    assert not outdated, f"{outdated} differ from the code: run `make docs` and commit the result"


def test_check_command_passes_on_the_committed_pages() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scripts.gen_docs", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_changed_default_makes_the_configuration_page_stale(
    tmp_path: Path, parser: argparse.ArgumentParser
) -> None:
    altered = _config_variant(
        tmp_path, "replace_after_s: float = 30.0", "replace_after_s: float = 45.0"
    )
    pages = gen.render(config_module=altered, parser=parser)
    assert gen.stale(ROOT, pages) == [gen.CONFIG_PAGE]
    assert "| `replace_after_s` | `float` | `45.0` |" in pages[gen.CONFIG_PAGE]


def test_a_new_setting_must_say_what_it_means(tmp_path: Path) -> None:
    anchor = "    default_replication_factor: int = 3\n"
    documented = _config_variant(
        tmp_path, anchor, anchor + "    linger_ms: int = 7  # how long a node waits for more\n"
    )
    source = _source(documented)
    found = {s.name: s for s in gen.settings(documented.NodeConfig, source, gen.UNCOMMENTED)}
    assert found["linger_ms"].default == "`7`"
    assert found["linger_ms"].description == "How long a node waits for more."
    bare = _config_variant(tmp_path, anchor, anchor + "    linger_ms: int = 7\n")
    with pytest.raises(gen.DocsError, match=r"\['linger_ms'\] have no docstring or comment"):
        gen.settings(bare.NodeConfig, _source(bare), gen.UNCOMMENTED)


def test_an_attribute_docstring_documents_a_setting(tmp_path: Path) -> None:
    path = tmp_path / "docstring_config.py"
    path.write_text(
        "import dataclasses\n"
        "@dataclasses.dataclass\n"
        "class NodeConfig:\n"
        "    # Raft\n"
        "    tick_ms: int = 50\n"
        '    """One Raft tick, in milliseconds."""\n'
    )
    module = _load("docstring_config", path)
    (setting,) = gen.settings(module.NodeConfig, path.read_text())
    assert (setting.section, setting.description) == ("Raft", "One Raft tick, in milliseconds.")


def test_a_fallback_description_is_refused_once_the_source_has_one(tmp_path: Path) -> None:
    from cluster.config import NodeConfig

    assert set(gen.UNCOMMENTED) <= {f.name for f in dataclasses.fields(NodeConfig)}
    name = next(iter(gen.UNCOMMENTED))
    declaration = next(
        line
        for line in (ROOT / "cluster" / "config.py").read_text().splitlines()
        if line.strip().startswith(f"{name}:")
    )
    commented = _config_variant(
        tmp_path, declaration + "\n", f"{declaration}  # now said where it is declared\n"
    )
    with pytest.raises(gen.DocsError, match=f"fallback description\\(s\\) for \\['{name}'\\]"):
        gen.settings(commented.NodeConfig, _source(commented), gen.UNCOMMENTED)


def test_a_changed_option_makes_the_cli_page_stale(parser: argparse.ArgumentParser) -> None:
    altered = gen.cli_parser()
    dev = next(sub for name, _, sub in gen._subcommands(altered) if name == "dev")
    nodes = next(a for a in dev._actions if a.dest == "nodes")
    nodes.default = 5
    pages = gen.render(parser=altered)
    assert gen.stale(ROOT, pages) == [gen.CLI_PAGE]
    assert "| `--nodes NODES` | `5` |" in pages[gen.CLI_PAGE]
    # the committed page still holds the real default
    assert "| `--nodes NODES` | `3` |" in (ROOT / gen.CLI_PAGE).read_text()


def test_the_pages_do_not_depend_on_the_environment(
    monkeypatch: pytest.MonkeyPatch, parser: argparse.ArgumentParser
) -> None:
    monkeypatch.setenv("FLOTILLA_BOOTSTRAP", "10.9.9.9:7001")
    monkeypatch.setenv("COLUMNS", "40")
    assert gen.render(parser=gen.cli_parser()) == gen.render(parser=parser)


def test_the_example_node_toml_loads_and_holds_the_defaults(tmp_path: Path) -> None:
    from cluster.config import NodeConfig

    text = (ROOT / gen.CONFIG_PAGE).read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    settings = [line[2:] for line in example.splitlines() if re.match(r"# \w+ = ", line)]
    assert len(settings) == len(dataclasses.fields(NodeConfig)) - 1  # all but the secret
    path = tmp_path / "node.toml"
    path.write_text("\n".join(settings).replace('node_id = ""', 'node_id = "n1"') + "\n")
    path.write_text(path.read_text().replace('data_dir = ""', f'data_dir = "{tmp_path}"'))
    loaded = NodeConfig.load(file=str(path), environ={})
    assert loaded == NodeConfig(node_id="n1", data_dir=str(tmp_path))
