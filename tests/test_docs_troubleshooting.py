"""docs/troubleshooting.md explains every error a user can meet by name: each `ErrorReason` a node
attaches to a refusal (proto/reasons.py) and each error class the SDK raises (flotilla.errors).
A new reason or error class fails this test until the page says what it means and what to do."""

from __future__ import annotations

import inspect
import re
import types
from pathlib import Path

import flotilla.errors
import proto.reasons

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "troubleshooting.md"


def error_names(errors: types.ModuleType, reasons: types.ModuleType) -> set[str]:
    """The names a user sees: ErrorReason values and FlotillaError subclasses."""
    found = {
        getattr(reasons, name)
        for name in reasons.__all__
        if name != "REASON_KEY" and isinstance(getattr(reasons, name), str)
    }
    base = errors.FlotillaError
    found |= {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, base) and value is not base
    }
    return found


def undocumented(names: set[str], page_text: str) -> list[str]:
    """Names that do not appear in a table row of the page as `name`."""
    rows = "\n".join(line for line in page_text.splitlines() if line.startswith("| `"))
    return sorted(name for name in names if not re.search(rf"^\| `{name}` \|", rows, re.MULTILINE))


def test_every_reason_and_error_class_is_explained() -> None:
    names = error_names(flotilla.errors, proto.reasons)
    assert {"OFFSET_NOT_AVAILABLE", "Timeout", "TopicNotFound"} <= names
    assert undocumented(names, PAGE.read_text(encoding="utf-8")) == []


def test_the_check_catches_a_new_error_class() -> None:
    errors = types.ModuleType("errors_with_one_more")
    errors.__dict__.update(vars(flotilla.errors))

    class ReplicaFenced(flotilla.errors.FlotillaError):
        """A made-up error the page does not mention."""

    errors.ReplicaFenced = ReplicaFenced  # type: ignore[attr-defined]
    reasons = types.ModuleType("reasons_with_one_more")
    reasons.__dict__.update(vars(proto.reasons))
    reasons.__all__ = [*proto.reasons.__all__, "FENCED"]  # type: ignore[attr-defined]
    reasons.FENCED = "FENCED"  # type: ignore[attr-defined]
    names = error_names(errors, reasons)
    assert undocumented(names, PAGE.read_text(encoding="utf-8")) == ["FENCED", "ReplicaFenced"]
