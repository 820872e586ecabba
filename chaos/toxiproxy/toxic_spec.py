"""What a toxic is, as the API sees it: type, stream, toxicity, attributes; parsed and rendered.

Taken from Toxiproxy v2.4.0 (toxic_collection.go `AddToxicJson`/`UpdateToxicJson`,
toxics/*.go struct tags, README "Toxic fields"):

- JSON shape, in this order: `{"attributes": {...}, "name", "type", "stream", "toxicity"}`.
- Create defaults: stream "downstream", toxicity 1, name `<type>_<stream>` (with the stream as the
  client spelled it), attributes all zero. Checks, in order: body decodes (400), stream is
  upstream/downstream in any letter case (400), type is known (400), the name is free in both
  directions (409), attributes decode for that type (400).
- Update reads only `attributes` (merged into the current ones) and `toxicity` (kept if absent).
- Toxicity is a float32 and is not range-checked: < 0 never applies, >= 1 always applies.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass

from chaos.toxiproxy.errors import invalid_stream, invalid_toxic_type, toxic_already_exists
from chaos.toxiproxy.gojson import FieldKind, decode_struct

__all__ = ["Stream", "ToxicSpec", "ToxicType", "parse_toxic_create", "parse_toxic_update"]


class Stream(enum.Enum):
    """Link direction: upstream = client -> server, downstream = server -> client."""

    UPSTREAM = "upstream"
    DOWNSTREAM = "downstream"


class ToxicType(enum.Enum):
    NOOP = "noop"
    LATENCY = "latency"
    BANDWIDTH = "bandwidth"
    SLOW_CLOSE = "slow_close"
    TIMEOUT = "timeout"
    RESET_PEER = "reset_peer"
    SLICER = "slicer"
    LIMIT_DATA = "limit_data"


# Attribute names (JSON, in Go struct order) and units, per type:
#   latency: latency ms, jitter ms          bandwidth: rate KB/s (1 KB = 1000 bytes; <= 0: no limit)
#   slow_close: delay ms                    timeout: timeout ms (0: never close, drop data)
#   reset_peer: timeout ms                  limit_data: bytes
#   slicer: average_size bytes, size_variation bytes, delay µs
ATTRIBUTE_NAMES: Mapping[ToxicType, tuple[str, ...]] = {
    ToxicType.NOOP: (),
    ToxicType.LATENCY: ("latency", "jitter"),
    ToxicType.BANDWIDTH: ("rate",),
    ToxicType.SLOW_CLOSE: ("delay",),
    ToxicType.TIMEOUT: ("timeout",),
    ToxicType.RESET_PEER: ("timeout",),
    ToxicType.SLICER: ("average_size", "size_variation", "delay"),
    ToxicType.LIMIT_DATA: ("bytes",),
}

# Go struct names, for error messages that read like the real server's.
_GO_TYPE_NAMES: Mapping[ToxicType, str] = {
    ToxicType.NOOP: "toxics.NoopToxic",
    ToxicType.LATENCY: "toxics.LatencyToxic",
    ToxicType.BANDWIDTH: "toxics.BandwidthToxic",
    ToxicType.SLOW_CLOSE: "toxics.SlowCloseToxic",
    ToxicType.TIMEOUT: "toxics.TimeoutToxic",
    ToxicType.RESET_PEER: "toxics.ResetToxic",
    ToxicType.SLICER: "toxics.SlicerToxic",
    ToxicType.LIMIT_DATA: "toxics.LimitDataToxic",
}

# Bytes a stage may queue before its predecessor waits. v2.4.0 gives latency a buffer of 1024
# reads of up to 32 KiB (so up to 32 MiB in flight) and other toxics none (1 byte: one chunk).
_INPUT_CAPACITY_BYTES: Mapping[ToxicType, int] = {ToxicType.LATENCY: 1024 * 32 * 1024}


@dataclass(frozen=True, slots=True)
class ToxicSpec:
    """One toxic of a proxy. `attributes` holds exactly ATTRIBUTE_NAMES[type], in that order."""

    name: str
    type: ToxicType
    stream_text: str  # as the client spelled it; the real server echoes it unchanged
    stream: Stream
    toxicity: float  # a float32 value
    attributes: tuple[tuple[str, int], ...]

    def attribute(self, name: str) -> int:
        for key, value in self.attributes:
            if key == name:
                return value
        raise KeyError(f"toxic type {self.type.value} has no attribute {name!r}")

    @property
    def input_capacity_bytes(self) -> int:
        return _INPUT_CAPACITY_BYTES.get(self.type, 1)

    def to_json(self) -> dict[str, object]:
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type.value,
            "stream": self.stream_text,
            "toxicity": self.toxicity,
        }


def _decode_attributes(
    toxic_type: ToxicType, value: object, current: Mapping[str, object], field_path: str
) -> tuple[tuple[str, int], ...]:
    names = ATTRIBUTE_NAMES[toxic_type]
    decoded = decode_struct(
        value,
        dict.fromkeys(names, FieldKind.INT64),
        _GO_TYPE_NAMES[toxic_type],
        current,
        field_path,
    )
    result: list[tuple[str, int]] = []
    for name in names:
        number = decoded[name]
        assert isinstance(number, int)
        result.append((name, number))
    return tuple(result)


_WRAPPER_FIELDS: Mapping[str, FieldKind] = {
    "attributes": FieldKind.ANY,
    "name": FieldKind.STRING,
    "type": FieldKind.STRING,
    "stream": FieldKind.STRING,
    "toxicity": FieldKind.FLOAT32,
}


def parse_toxic_create(document: object, name_taken: set[str]) -> ToxicSpec:
    """A new toxic from a decoded POST /proxies/{proxy}/toxics body, with the real checks."""
    wrapper = decode_struct(
        document,
        _WRAPPER_FIELDS,
        "toxics.ToxicWrapper",
        {"attributes": None, "name": "", "type": "", "stream": "downstream", "toxicity": 1.0},
    )
    attributes = wrapper["attributes"]
    if attributes is not None and not isinstance(attributes, dict):
        # Go decodes the attributes once into an empty struct before it knows the type.
        decode_struct(attributes, {}, "toxics.NoopToxic", {}, "ToxicWrapper.attributes")
    stream_text = str(wrapper["stream"])
    try:
        stream = Stream(stream_text.lower())
    except ValueError:
        raise invalid_stream() from None
    type_text = str(wrapper["type"])
    name = str(wrapper["name"]) or f"{type_text}_{stream_text}"
    try:
        toxic_type = ToxicType(type_text)
    except ValueError:
        raise invalid_toxic_type() from None
    if name in name_taken:
        raise toxic_already_exists()
    zeros = dict.fromkeys(ATTRIBUTE_NAMES[toxic_type], 0)
    toxicity = wrapper["toxicity"]
    assert isinstance(toxicity, float)
    return ToxicSpec(
        name=name,
        type=toxic_type,
        stream_text=stream_text,
        stream=stream,
        toxicity=toxicity,
        attributes=_decode_attributes(toxic_type, attributes, zeros, "ToxicWrapper.attributes"),
    )


def parse_toxic_update(document: object, current: ToxicSpec) -> ToxicSpec:
    """`current` changed by a decoded POST /proxies/{proxy}/toxics/{toxic} body."""
    update = decode_struct(
        document,
        {"attributes": FieldKind.ANY, "toxicity": FieldKind.FLOAT32},
        "struct { Attributes interface {}; Toxicity float32 }",
        {"attributes": None, "toxicity": current.toxicity},
    )
    attributes = _decode_attributes(
        current.type, update["attributes"], dict(current.attributes), ".attributes"
    )
    toxicity = update["toxicity"]
    assert isinstance(toxicity, float)
    return dataclasses.replace(current, toxicity=toxicity, attributes=attributes)
