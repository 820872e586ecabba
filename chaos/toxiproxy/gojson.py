"""JSON decoding and encoding that answer like Toxiproxy's Go `encoding/json` does.

Contract (the behaviour of Go 1.17+ `json.Decoder.Decode` into a struct, which Toxiproxy v2.4.0
uses for every request body):

- only the first JSON value of a body is read; trailing bytes are ignored; an empty body is the
  error "EOF";
- object keys match struct fields exactly, else case-insensitively; unknown keys are ignored;
- `null` leaves a field as it was;
- a value of the wrong JSON kind, a fraction or exponent for an integer field, or an integer out
  of range is an error (HTTP 400 "bad request body: ...").

Encoding is compact (`,` and `:` without spaces), keeps insertion order, escapes `<`, `>` and `&`
as Go does, and writes floats the way Go writes a float32 (`1` not `1.0`).
"""

from __future__ import annotations

import enum
import json
import math
import re
import secrets
import struct
from collections.abc import Mapping

from chaos.toxiproxy.errors import bad_request_body

__all__ = [
    "FieldKind",
    "decode_body",
    "decode_struct",
    "encode",
    "float32_text",
    "kind_of",
    "to_float32",
]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_FLOAT32_MAX = 3.4028234663852886e38


class FieldKind(enum.Enum):
    STRING = "string"
    BOOL = "bool"
    INT64 = "int64"
    FLOAT32 = "float32"
    ANY = "any"  # kept as decoded; the caller checks it


def decode_body(body: bytes) -> object:
    """The first JSON value of `body`, or ApiError 400 "bad request body: ..."."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise bad_request_body(f"invalid UTF-8: {error}") from None
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        raise bad_request_body("EOF")
    try:
        value, _end = json.JSONDecoder().raw_decode(stripped)
    except json.JSONDecodeError as error:
        raise bad_request_body(str(error)) from None
    return value


def kind_of(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_error(value: object, where: str, kind: FieldKind) -> Exception:
    shown = kind_of(value)
    if shown == "number" and kind in (FieldKind.INT64, FieldKind.FLOAT32):
        shown = f"number {json.dumps(value)}"  # Go shows the literal only when it cannot fit
    return bad_request_body(f"json: cannot unmarshal {shown} into {where} of type {kind.value}")


def _convert(value: object, kind: FieldKind, where: str) -> object:
    if kind is FieldKind.ANY:
        return value
    if kind is FieldKind.STRING and isinstance(value, str):
        return value
    if kind is FieldKind.BOOL and isinstance(value, bool):
        return value
    if (
        kind is FieldKind.INT64
        and isinstance(value, int)
        and not isinstance(value, bool)
        and _INT64_MIN <= value <= _INT64_MAX
    ):
        return value
    if (
        kind is FieldKind.FLOAT32
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and abs(value) <= _FLOAT32_MAX
    ):
        return to_float32(float(value))
    raise _type_error(value, where, kind)


def decode_struct(
    value: object,
    fields: Mapping[str, FieldKind],
    go_type: str,
    defaults: Mapping[str, object],
    field_path: str = "",
) -> dict[str, object]:
    """Decode a JSON object into `defaults` updated with the fields it sets (Go semantics).

    `field_path` names where the struct sits in the body (e.g. "ToxicWrapper.attributes"),
    for error messages; empty for the top level.
    """
    result = dict(defaults)
    if value is None:
        return result
    if not isinstance(value, dict):
        where = f"Go struct field {field_path}" if field_path else "Go value"
        raise bad_request_body(
            f"json: cannot unmarshal {kind_of(value)} into {where} of type {go_type}"
        )
    prefix = field_path.split(".", 1)[1] + "." if "." in field_path else ""
    folded = {name.casefold(): name for name in fields}
    for key, item in value.items():
        name = key if key in fields else folded.get(key.casefold())
        if name is None or item is None:
            continue
        where = f"Go struct field {go_type.rsplit('.', 1)[-1]}.{prefix}{name}"
        result[name] = _convert(item, fields[name], where)
    return result


def to_float32(value: float) -> float:
    """`value` rounded to the nearest IEEE-754 single, as Go's float32 stores it."""
    packed: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return packed


def float32_text(value: float) -> str:
    """The shortest text that reads back as the same float32 (Go's `'f'`/`'e'`, -1, 32)."""
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if to_float32(float(text)) == value:
            return text
    return repr(value)


_FLOAT_TOKEN = f"f32-{secrets.token_hex(8)}:"
_FLOAT_TOKEN_PATTERN = re.compile('"' + re.escape(_FLOAT_TOKEN) + '([-+.0-9eE]+)"')


def encode(value: object) -> bytes:
    """Compact JSON in Go's style; floats are written as float32 (the only floats we send)."""
    text = json.dumps(_mark_floats(value), separators=(",", ":"), ensure_ascii=False)
    text = _FLOAT_TOKEN_PATTERN.sub(r"\1", text)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.encode("utf-8")


def _mark_floats(value: object) -> object:
    if isinstance(value, dict):
        return {key: _mark_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_mark_floats(item) for item in value]
    if isinstance(value, float):
        return _FLOAT_TOKEN + float32_text(value)
    return value
