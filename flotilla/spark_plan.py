"""Options and planning of the Spark data source: which offsets of which partitions, on which replicas.

No Spark here, so it is testable and importable without PySpark. Guarantees:
- every option is validated before any record is read; a bad one raises `SparkOptionError`
  whose message names the option, the bad value and what would be valid;
- planned ranges satisfy `log_start <= start <= end <= high_watermark` as seen at planning time,
  so a task never asks for a record above the commit index the cluster reported;
- each range carries its replicas in preference order (the `replica` option), rotated by the
  range's position so that tasks spread across replicas.

Offsets JSON is the Kafka source's: `{"topic": {"0": 42, "1": -2}}` where -2 means earliest and
-1 latest. `startingOffsets` may also be `group:<name>`: consumer group <name>'s committed offsets
(looked up by the driver, `group_offsets`), earliest where the group committed none.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from flotilla._checks import check_group
from flotilla._credentials import Credentials
from flotilla.errors import InvalidArgument
from flotilla.types import PartitionInfo, TopicInfo

__all__ = [
    "EARLIEST",
    "GROUP_PREFIX",
    "LATEST",
    "OffsetRange",
    "SparkOptionError",
    "SparkOptions",
    "group_of",
    "parse_options",
    "plan_ranges",
    "replica_order",
    "resolve_offsets",
    "split_range",
]

EARLIEST = -2
LATEST = -1
GROUP_PREFIX = "group:"  # startingOffsets "group:<name>": that consumer group's committed offsets
REPLICA_CHOICES = ("any", "leader", "followers")
SECURITY_OPTIONS = ("tls_ca", "tls_cert", "tls_key", "token")  # as `flotilla.Client`'s
DEFAULT_MAX_RECORDS_PER_REQUEST = 5000
DEFAULT_REPLICA_TIMEOUT_MS = 2000

Offsets = dict[str, dict[int, int]]  # topic -> partition -> offset (or EARLIEST / LATEST)


class SparkOptionError(InvalidArgument):
    """A data source option is missing or malformed; the message names the option."""


@dataclass(frozen=True, slots=True)
class SparkOptions:
    """The data source's options, parsed; plain data, so readers pickle to Spark workers."""

    bootstrap: tuple[str, ...]
    topics: tuple[str, ...]
    starting_offsets: str  # "earliest", "latest", "group:<name>" or the JSON text
    ending_offsets: str
    min_partitions: int
    replica: str  # one of REPLICA_CHOICES
    max_records_per_request: int
    max_offsets_per_trigger: int  # 0 = no limit
    arrow: bool  # yield pyarrow RecordBatches (when pyarrow is importable)
    replica_timeout_ms: int  # how long one replica is retried before failing over
    # TLS and token, passed to every client the driver and the executors make (None: the
    # process's FLOTILLA_* variable, as `flotilla.Client`); files are read where the client is
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records `start <= offset < end` of one partition, and the replicas to read them from."""

    topic: str
    partition: int
    start: int
    end: int
    replicas: tuple[str, ...]
    addresses: tuple[str, ...] = ()  # of the replicas' nodes, at planning: tasks need no bootstrap

    @property
    def size(self) -> int:
        return self.end - self.start


def _positive_int(options: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    text = options.get(name.lower())
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise SparkOptionError(f"option {name!r}={text!r}: give an integer >= {minimum}")
    return value


def group_of(spec: str) -> str | None:
    """The consumer group an offsets option names ("group:<name>"), else None."""
    return spec[len(GROUP_PREFIX) :] if spec.startswith(GROUP_PREFIX) else None


def _offsets_spec(options: Mapping[str, str], name: str, default: str) -> str:
    text = options.get(name, default).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    if text.startswith(GROUP_PREFIX):
        if name != "startingOffsets":
            raise SparkOptionError(
                f"option {name!r}={text!r}: a group's offsets are where a read starts; use it "
                "in 'startingOffsets'"
            )
        try:
            check_group(group_of(text))
        except InvalidArgument as error:
            raise SparkOptionError(f"option {name!r}={text!r}: {error}") from None
        return text
    _parse_offsets_json(name, text)  # validates early; resolved against metadata later
    return text


def _parse_offsets_json(name: str, text: str) -> Offsets:
    hint = 'use "earliest", "latest" or JSON like {"topic": {"0": 42, "1": -2}} (-2 earliest, -1 latest)'
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise SparkOptionError(
            f"option {name!r}={text!r} is malformed JSON ({error}); {hint}"
        ) from None
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise SparkOptionError(f"option {name!r}={text!r} is not an object of objects; {hint}")
    parsed: Offsets = {}
    for topic, partitions in raw.items():
        parsed[topic] = {}
        for partition, offset in partitions.items():
            valid_partition = isinstance(partition, str) and partition.isdigit()
            if not valid_partition or not isinstance(offset, int) or offset < EARLIEST:
                raise SparkOptionError(
                    f"option {name!r}: {topic}/{partition} -> {offset!r} is not a partition "
                    f"number and an offset >= -2; {hint}"
                )
            parsed[topic][int(partition)] = offset
    return parsed


def _arrow_available() -> bool:
    try:
        import pyarrow  # noqa: F401, PLC0415 (optional dependency)
    except ImportError:
        return False
    return True


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> SparkOptions:
    """Parses and checks the options Spark passes (keys are case-insensitive in Spark)."""
    lowered = {key.lower(): value for key, value in options.items()}

    def get(name: str) -> str | None:
        return lowered.get(name.lower())

    bootstrap = tuple(a.strip() for a in (get("bootstrap") or "").split(",") if a.strip())
    if not bootstrap:
        raise SparkOptionError(
            "option 'bootstrap' is required: a comma list of node addresses, e.g. 127.0.0.1:7001"
        )
    topic, topic_list = get("topic"), get("topics")
    if (topic is None) == (topic_list is None):
        raise SparkOptionError(
            "give exactly one of option 'topic' (a name) or 'topics' (a comma list)"
        )
    names = (
        (topic,) if topic is not None else tuple(t.strip() for t in (topic_list or "").split(","))
    )
    if not all(names) or len(set(names)) != len(names):
        raise SparkOptionError(f"option 'topics'={topic_list!r}: give distinct, non-empty names")
    by_name = {name.lower(): name for name in ("startingOffsets", "endingOffsets")}
    sized = {k: v for k, v in lowered.items() if k not in by_name}
    sized.update({by_name[k]: v for k, v in lowered.items() if k in by_name})
    starting = _offsets_spec(sized, "startingOffsets", "latest" if streaming else "earliest")
    ending = _offsets_spec(sized, "endingOffsets", "latest")
    if streaming and get("endingOffsets") is not None:
        raise SparkOptionError("option 'endingOffsets' is for batch reads; a stream has no end")
    replica = (get("replica") or "any").lower()
    if replica not in REPLICA_CHOICES:
        raise SparkOptionError(f"option 'replica'={replica!r}: use one of {REPLICA_CHOICES}")
    arrow_text = (get("arrow") or "true").lower()
    if arrow_text not in ("true", "false"):
        raise SparkOptionError(f"option 'arrow'={arrow_text!r}: use true or false")
    tls_ca, tls_cert, tls_key, token = (get(name) for name in SECURITY_OPTIONS)
    try:  # a missing file, a certificate without its key, a token in clear: named now
        credentials = Credentials.load(tls_ca, tls_cert, tls_key, token)
        for address in bootstrap:
            credentials.check_address(address)
    except InvalidArgument as error:
        raise SparkOptionError(f"security options: {error}") from None
    return SparkOptions(
        bootstrap=bootstrap,
        topics=names,
        starting_offsets=starting,
        ending_offsets=ending,
        min_partitions=_positive_int(lowered, "minPartitions", 1),
        replica=replica,
        max_records_per_request=_positive_int(
            lowered, "maxRecordsPerRequest", DEFAULT_MAX_RECORDS_PER_REQUEST
        ),
        max_offsets_per_trigger=_positive_int(lowered, "maxOffsetsPerTrigger", 0, minimum=0),
        arrow=arrow_text == "true" and _arrow_available(),
        replica_timeout_ms=_positive_int(lowered, "replicaTimeoutMs", DEFAULT_REPLICA_TIMEOUT_MS),
        tls_ca=tls_ca,
        tls_cert=tls_cert,
        tls_key=tls_key,
        token=token,
    )


def resolve_offsets(
    name: str,
    spec: str,
    topics: Mapping[str, TopicInfo],
    committed: Mapping[tuple[str, int], int] | None = None,
) -> dict[str, dict[int, int]]:
    """Concrete offsets for every partition of `topics` from an offsets option. Partitions the JSON
    does not name start at earliest (startingOffsets) or end at latest (endingOffsets), as Kafka.
    "group:<name>": the group's `committed` offsets (which the caller looked up), earliest where
    it has none; one that retention has since removed starts at the log start."""
    if group_of(spec) is not None:
        return _group_offsets(topics, committed or {})
    default = EARLIEST if name == "startingOffsets" else LATEST
    given = {} if spec in ("earliest", "latest") else _parse_offsets_json(name, spec)
    if spec in ("earliest", "latest"):
        default = EARLIEST if spec == "earliest" else LATEST
    for topic, partitions in given.items():
        if topic not in topics:
            raise SparkOptionError(
                f"option {name!r} names topic {topic!r}, which is not read; read: {sorted(topics)}"
            )
        count = len(topics[topic].partitions)
        for partition in partitions:
            if partition >= count:
                raise SparkOptionError(
                    f"option {name!r}: partition {topic}/{partition} does not exist; valid partitions are 0..{count - 1}"
                )
    resolved: dict[str, dict[int, int]] = {}
    for topic, info in topics.items():
        resolved[topic] = {}
        for p in info.partitions:
            offset = given.get(topic, {}).get(p.index, default)
            concrete = (
                p.log_start
                if offset == EARLIEST
                else p.high_watermark
                if offset == LATEST
                else offset
            )
            if not p.log_start <= concrete <= p.high_watermark:
                raise SparkOptionError(
                    f"option {name!r}: offset {offset} of {topic}/{p.index} is outside the partition's committed range [{p.log_start}, {p.high_watermark}]"
                )
            resolved[topic][p.index] = concrete
    return resolved


def _group_offsets(
    topics: Mapping[str, TopicInfo], committed: Mapping[tuple[str, int], int]
) -> dict[str, dict[int, int]]:
    return {
        topic: {
            p.index: min(
                max(committed.get((topic, p.index), p.log_start), p.log_start), p.high_watermark
            )
            for p in info.partitions
        }
        for topic, info in topics.items()
    }


def replica_order(partition: PartitionInfo, choice: str, rotation: int) -> tuple[str, ...]:
    """Replicas in the order a task tries them. `leader`: the leader, then the followers;
    `followers`: the followers (rotated), then the leader as a last resort; `any`: all, rotated."""
    replicas = list(partition.replicas) or ([partition.leader] if partition.leader else [])
    followers = [r for r in replicas if r != partition.leader]
    leader = [partition.leader] if partition.leader in replicas else []

    def rotated(items: list[str]) -> list[str]:
        if not items:
            return items
        shift = rotation % len(items)
        return items[shift:] + items[:shift]

    if choice == "leader":
        return tuple(leader + rotated(followers))
    if choice == "followers":
        return tuple(rotated(followers) + leader)
    return tuple(rotated(replicas))


def split_range(offset_range: OffsetRange, parts: int) -> list[OffsetRange]:
    """`parts` contiguous ranges covering `offset_range` (fewer if it has fewer records)."""
    parts = max(1, min(parts, offset_range.size))
    step = math.ceil(offset_range.size / parts)
    return [
        OffsetRange(
            offset_range.topic,
            offset_range.partition,
            start,
            min(start + step, offset_range.end),
            offset_range.replicas,
            offset_range.addresses,
        )
        for start in range(offset_range.start, offset_range.end, step)
    ]


def plan_ranges(
    topics: Mapping[str, TopicInfo],
    start: Mapping[str, Mapping[int, int]],
    end: Mapping[str, Mapping[int, int]],
    options: SparkOptions,
    *,
    ending_option: str = "endingOffsets",
    addresses: Mapping[str, str] | None = None,
) -> list[OffsetRange]:
    """Non-empty ranges from `start` to `end`, split so there are about `minPartitions` of them,
    each with its replicas in preference order (rotated per range: tasks spread over replicas)."""
    whole: list[tuple[OffsetRange, PartitionInfo]] = []
    for topic, info in topics.items():
        for p in info.partitions:
            first, last = start[topic][p.index], end[topic][p.index]
            if last < first:
                raise SparkOptionError(
                    f"option {ending_option!r}: {topic}/{p.index} ends at {last}, before startingOffsets {first}"
                )
            if last > first:
                whole.append((OffsetRange(topic, p.index, first, last, ()), p))
    total = sum(r.size for r, _ in whole)
    planned: list[OffsetRange] = []
    for offset_range, partition in whole:
        parts = 1
        if options.min_partitions > len(whole):
            parts = math.ceil(offset_range.size * options.min_partitions / total)
        for piece in split_range(offset_range, parts):
            order = replica_order(partition, options.replica, len(planned))
            known = addresses or {}
            where = tuple(known[r] for r in order if r in known)
            planned.append(
                OffsetRange(piece.topic, piece.partition, piece.start, piece.end, order, where)
            )
    return planned
