"""The SDK's public surface documents itself: every export of `flotilla` (and the asyncio client,
the producer and its futures) has a class docstring of its own, and so does each public method;
`flotilla.__version__` and `py.typed` ship with it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import flotilla
from flotilla import aio
from flotilla.producer import Producer, RecordFuture

ROOT = Path(__file__).resolve().parents[2]


def undocumented(obj: object) -> list[str]:
    """Names of `obj` (a class or function) and of a class's public methods that lack a
    docstring of their own. A dataclass's generated text ("Name(field: type, ...)") and an
    inherited one do not count."""
    name = getattr(obj, "__qualname__", repr(obj))
    missing: list[str] = []
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else obj.__doc__
    if not doc or not doc.strip() or doc.startswith(f"{getattr(obj, '__name__', '')}("):
        missing.append(name)
    if not isinstance(obj, type):
        return missing
    for attribute, value in vars(obj).items():
        if attribute.startswith("_") and attribute not in (
            "__enter__",
            "__exit__",
            "__aenter__",
            "__aexit__",
        ):
            continue
        function = value.fget if isinstance(value, property) else value
        if isinstance(function, staticmethod | classmethod):
            function = function.__func__
        if not inspect.isfunction(function):
            continue
        if not (function.__doc__ or "").strip():
            missing.append(f"{name}.{attribute}")
    return missing


def public_surface() -> list[object]:
    """What a user of the SDK calls: `flotilla`'s exports, the asyncio client, the producers."""
    exported = [getattr(flotilla, name) for name in flotilla.__all__ if name != "__version__"]
    return [*exported, aio.Client, aio.AsyncProducer, Producer, RecordFuture]


def test_every_public_sdk_call_has_a_docstring() -> None:
    missing = [name for obj in public_surface() for name in undocumented(obj)]
    assert missing == [], f"public SDK calls without a docstring: {missing}"


def test_the_checker_catches_a_missing_docstring() -> None:
    """The checker itself fails on deliberately undocumented calls."""

    class Documented:
        """Has one."""

        def fine(self) -> None:
            """Has one."""

        def bare(self) -> None:
            pass

        def _private(self) -> None:
            pass

    @dataclass(frozen=True)
    class Generated:  # a dataclass gets "Generated(value: int)" as its __doc__
        value: int

    class Inherits(Documented):
        def more(self) -> None:
            """Has one."""

    assert undocumented(Documented) == [f"{Documented.__qualname__}.bare"]
    assert undocumented(Generated) == [Generated.__qualname__]
    assert undocumented(Inherits) == [Inherits.__qualname__]  # the parent's text is not its own
    assert undocumented(public_surface) == []
    assert undocumented(lambda: None) == [
        "test_the_checker_catches_a_missing_docstring.<locals>.<lambda>"
    ]


def test_version_and_py_typed_ship() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    declared = pyproject.split('version = "', 1)[1].split('"', 1)[0]
    assert flotilla.__version__ == declared
    assert (ROOT / "flotilla" / "py.typed").is_file()
    assert 'flotilla = ["py.typed"]' in pyproject
