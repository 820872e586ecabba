from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemberState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_STATE_UNSPECIFIED: _ClassVar[MemberState]
    ALIVE: _ClassVar[MemberState]
    SUSPECT: _ClassVar[MemberState]
    DEAD: _ClassVar[MemberState]
    LEFT: _ClassVar[MemberState]

class Acks(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACKS_ALL: _ClassVar[Acks]
    ACKS_LEADER: _ClassVar[Acks]

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    OFFSET_NOT_AVAILABLE: _ClassVar[ErrorReason]
    REPLICA_CLOSED: _ClassVar[ErrorReason]
    UNKNOWN_PRODUCER_ID: _ClassVar[ErrorReason]
    OVERLOADED: _ClassVar[ErrorReason]
    NOT_COORDINATOR: _ClassVar[ErrorReason]
    COORDINATOR_LOADING: _ClassVar[ErrorReason]
    FENCED_MEMBER: _ClassVar[ErrorReason]
    GROUP_NOT_FOUND: _ClassVar[ErrorReason]
    GROUP_NOT_EMPTY: _ClassVar[ErrorReason]
    SEQUENCE_BEHIND: _ClassVar[ErrorReason]
    INCONSISTENT_TOPIC_UID: _ClassVar[ErrorReason]
    SEQUENCE_IN_FLIGHT: _ClassVar[ErrorReason]

class GroupKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_KIND_STREAM: _ClassVar[GroupKind]
    GROUP_KIND_QUEUE: _ClassVar[GroupKind]

class SettleAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SETTLE_ACK: _ClassVar[SettleAction]
    SETTLE_RELEASE: _ClassVar[SettleAction]
    SETTLE_REJECT: _ClassVar[SettleAction]
    SETTLE_EXTEND: _ClassVar[SettleAction]
MEMBER_STATE_UNSPECIFIED: MemberState
ALIVE: MemberState
SUSPECT: MemberState
DEAD: MemberState
LEFT: MemberState
ACKS_ALL: Acks
ACKS_LEADER: Acks
ERROR_REASON_UNSPECIFIED: ErrorReason
OFFSET_NOT_AVAILABLE: ErrorReason
REPLICA_CLOSED: ErrorReason
UNKNOWN_PRODUCER_ID: ErrorReason
OVERLOADED: ErrorReason
NOT_COORDINATOR: ErrorReason
COORDINATOR_LOADING: ErrorReason
FENCED_MEMBER: ErrorReason
GROUP_NOT_FOUND: ErrorReason
GROUP_NOT_EMPTY: ErrorReason
SEQUENCE_BEHIND: ErrorReason
INCONSISTENT_TOPIC_UID: ErrorReason
SEQUENCE_IN_FLIGHT: ErrorReason
GROUP_KIND_STREAM: GroupKind
GROUP_KIND_QUEUE: GroupKind
SETTLE_ACK: SettleAction
SETTLE_RELEASE: SettleAction
SETTLE_REJECT: SettleAction
SETTLE_EXTEND: SettleAction

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "partitions", "replication_factor", "retention_bytes", "retention_ms", "max_delay_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    replication_factor: int
    retention_bytes: int
    retention_ms: int
    max_delay_ms: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., retention_ms: _Optional[int] = ..., max_delay_ms: _Optional[int] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class AlterTopicRequest(_message.Message):
    __slots__ = ("name", "retention_bytes", "retention_ms", "partitions", "max_delay_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    retention_bytes: int
    retention_ms: int
    partitions: int
    max_delay_ms: int
    def __init__(self, name: _Optional[str] = ..., retention_bytes: _Optional[int] = ..., retention_ms: _Optional[int] = ..., partitions: _Optional[int] = ..., max_delay_ms: _Optional[int] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PartitionInfo(_message.Message):
    __slots__ = ("index", "leader", "replicas", "high_watermark", "log_start", "learners", "pending_timers", "pending_timers_unknown")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    PENDING_TIMERS_FIELD_NUMBER: _ClassVar[int]
    PENDING_TIMERS_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    index: int
    leader: str
    replicas: _containers.RepeatedScalarFieldContainer[str]
    high_watermark: int
    log_start: int
    learners: _containers.RepeatedScalarFieldContainer[str]
    pending_timers: int
    pending_timers_unknown: bool
    def __init__(self, index: _Optional[int] = ..., leader: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ..., high_watermark: _Optional[int] = ..., log_start: _Optional[int] = ..., learners: _Optional[_Iterable[str]] = ..., pending_timers: _Optional[int] = ..., pending_timers_unknown: _Optional[bool] = ...) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ("name", "replication_factor", "partitions", "retention_bytes", "retention_ms", "uid", "note", "max_delay_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    MAX_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    replication_factor: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    retention_bytes: int
    retention_ms: int
    uid: str
    note: str
    max_delay_ms: int
    def __init__(self, name: _Optional[str] = ..., replication_factor: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ..., retention_bytes: _Optional[int] = ..., retention_ms: _Optional[int] = ..., uid: _Optional[str] = ..., note: _Optional[str] = ..., max_delay_ms: _Optional[int] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("id", "address", "state", "weight", "rack")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    state: MemberState
    weight: float
    rack: str
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., state: _Optional[_Union[MemberState, str]] = ..., weight: _Optional[float] = ..., rack: _Optional[str] = ...) -> None: ...

class MetadataRequest(_message.Message):
    __slots__ = ("topics", "local_only", "topics_only", "topics_version")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    TOPICS_ONLY_FIELD_NUMBER: _ClassVar[int]
    TOPICS_VERSION_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    local_only: bool
    topics_only: bool
    topics_version: int
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., local_only: _Optional[bool] = ..., topics_only: _Optional[bool] = ..., topics_version: _Optional[int] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("members", "topics", "node_id", "max_batch_bytes", "topics_version", "topics_unchanged")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOPICS_UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    node_id: str
    max_batch_bytes: int
    topics_version: int
    topics_unchanged: bool
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ..., node_id: _Optional[str] = ..., max_batch_bytes: _Optional[int] = ..., topics_version: _Optional[int] = ..., topics_unchanged: _Optional[bool] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("topic", "partition", "batch", "acks", "timeout_ms", "deliver_at_ms", "topic_uid")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_UID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    batch: bytes
    acks: Acks
    timeout_ms: int
    deliver_at_ms: int
    topic_uid: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., batch: _Optional[bytes] = ..., acks: _Optional[_Union[Acks, str]] = ..., timeout_ms: _Optional[int] = ..., deliver_at_ms: _Optional[int] = ..., topic_uid: _Optional[str] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("base_offset", "record_count", "duplicate", "deliver_at_ms")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    record_count: int
    duplicate: bool
    deliver_at_ms: int
    def __init__(self, base_offset: _Optional[int] = ..., record_count: _Optional[int] = ..., duplicate: _Optional[bool] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "max_records", "max_bytes", "max_wait_ms", "min_high_watermark", "topic_uid")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    TOPIC_UID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    max_records: int
    max_bytes: int
    max_wait_ms: int
    min_high_watermark: int
    topic_uid: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_records: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., min_high_watermark: _Optional[int] = ..., topic_uid: _Optional[str] = ...) -> None: ...

class StoredBatch(_message.Message):
    __slots__ = ("base_offset", "record_count", "data")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    record_count: int
    data: bytes
    def __init__(self, base_offset: _Optional[int] = ..., record_count: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("batches", "high_watermark", "log_start", "replica", "leader")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[StoredBatch]
    high_watermark: int
    log_start: int
    replica: str
    leader: bool
    def __init__(self, batches: _Optional[_Iterable[_Union[StoredBatch, _Mapping]]] = ..., high_watermark: _Optional[int] = ..., log_start: _Optional[int] = ..., replica: _Optional[str] = ..., leader: _Optional[bool] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("node_id", "serving", "partitions", "leaders", "members_alive", "active_groups", "quarantined", "control_plane", "replicas_led")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    LEADERS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_ALIVE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    CONTROL_PLANE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_LED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    serving: bool
    partitions: int
    leaders: int
    members_alive: int
    active_groups: int
    quarantined: _containers.RepeatedCompositeFieldContainer[QuarantinedReplica]
    control_plane: ControlPlaneStatus
    replicas_led: int
    def __init__(self, node_id: _Optional[str] = ..., serving: _Optional[bool] = ..., partitions: _Optional[int] = ..., leaders: _Optional[int] = ..., members_alive: _Optional[int] = ..., active_groups: _Optional[int] = ..., quarantined: _Optional[_Iterable[_Union[QuarantinedReplica, _Mapping]]] = ..., control_plane: _Optional[_Union[ControlPlaneStatus, _Mapping]] = ..., replicas_led: _Optional[int] = ...) -> None: ...

class ControlPlaneStatus(_message.Message):
    __slots__ = ("controllers", "controller", "leader", "connected")
    CONTROLLERS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    controllers: _containers.RepeatedCompositeFieldContainer[ControllerAddress]
    controller: bool
    leader: str
    connected: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, controllers: _Optional[_Iterable[_Union[ControllerAddress, _Mapping]]] = ..., controller: _Optional[bool] = ..., leader: _Optional[str] = ..., connected: _Optional[_Iterable[str]] = ...) -> None: ...

class ControllerAddress(_message.Message):
    __slots__ = ("id", "address")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class QuarantinedReplica(_message.Message):
    __slots__ = ("group", "reason")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group: str
    reason: str
    def __init__(self, group: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class TopicPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class PartitionOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class GroupHeartbeatRequest(_message.Message):
    __slots__ = ("group", "member_id", "member_epoch", "instance_id", "topics", "topics_unchanged", "owned", "session_timeout_ms", "kind", "queue")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    member_epoch: int
    instance_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    topics_unchanged: bool
    owned: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    session_timeout_ms: int
    kind: GroupKind
    queue: QueueOptions
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., topics_unchanged: _Optional[bool] = ..., owned: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., session_timeout_ms: _Optional[int] = ..., kind: _Optional[_Union[GroupKind, str]] = ..., queue: _Optional[_Union[QueueOptions, _Mapping]] = ...) -> None: ...

class GroupHeartbeatResponse(_message.Message):
    __slots__ = ("member_id", "member_epoch", "assignment", "heartbeat_interval_ms")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    member_epoch: int
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    heartbeat_interval_ms: int
    def __init__(self, member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., heartbeat_interval_ms: _Optional[int] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("group", "member_id", "member_epoch", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    member_epoch: int
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FetchOffsetsRequest(_message.Message):
    __slots__ = ("group", "topics")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ...) -> None: ...

class FetchOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("partition",)
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    partition: int
    def __init__(self, partition: _Optional[int] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GroupMemberInfo(_message.Message):
    __slots__ = ("id", "instance_id", "assignment", "epoch")
    ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    id: str
    instance_id: str
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    epoch: int
    def __init__(self, id: _Optional[str] = ..., instance_id: _Optional[str] = ..., assignment: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., epoch: _Optional[int] = ...) -> None: ...

class GroupPartitionInfo(_message.Message):
    __slots__ = ("topic", "partition", "committed", "high_watermark", "lag", "owner", "queue")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed: int
    high_watermark: int
    lag: int
    owner: str
    queue: QueuePartitionInfo
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed: _Optional[int] = ..., high_watermark: _Optional[int] = ..., lag: _Optional[int] = ..., owner: _Optional[str] = ..., queue: _Optional[_Union[QueuePartitionInfo, _Mapping]] = ...) -> None: ...

class QueuePartitionInfo(_message.Message):
    __slots__ = ("acked_floor", "in_flight", "waiting", "acked", "dead_lettered", "dead_letters_pending", "next_offset")
    ACKED_FLOOR_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_PENDING_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    acked_floor: int
    in_flight: int
    waiting: int
    acked: int
    dead_lettered: int
    dead_letters_pending: int
    next_offset: int
    def __init__(self, acked_floor: _Optional[int] = ..., in_flight: _Optional[int] = ..., waiting: _Optional[int] = ..., acked: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., dead_letters_pending: _Optional[int] = ..., next_offset: _Optional[int] = ...) -> None: ...

class GroupInfo(_message.Message):
    __slots__ = ("name", "kind", "coordinator", "members", "partitions", "queue")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    coordinator: str
    members: _containers.RepeatedCompositeFieldContainer[GroupMemberInfo]
    partitions: _containers.RepeatedCompositeFieldContainer[GroupPartitionInfo]
    queue: QueueOptions
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., coordinator: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GroupMemberInfo, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[GroupPartitionInfo, _Mapping]]] = ..., queue: _Optional[_Union[QueueOptions, _Mapping]] = ...) -> None: ...

class ResetGroupOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class ResetGroupOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueueOptions(_message.Message):
    __slots__ = ("max_deliveries", "dead_letter_topic", "ordering", "backoff_ms", "max_in_flight")
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    ORDERING_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    max_deliveries: int
    dead_letter_topic: str
    ordering: str
    backoff_ms: _containers.RepeatedScalarFieldContainer[int]
    max_in_flight: int
    def __init__(self, max_deliveries: _Optional[int] = ..., dead_letter_topic: _Optional[str] = ..., ordering: _Optional[str] = ..., backoff_ms: _Optional[_Iterable[int]] = ..., max_in_flight: _Optional[int] = ...) -> None: ...

class QueueReceiveRequest(_message.Message):
    __slots__ = ("group", "member_id", "member_epoch", "topic", "max_records", "invisible_ms", "wait_ms", "settlements")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENTS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    member_epoch: int
    topic: str
    max_records: int
    invisible_ms: int
    wait_ms: int
    settlements: _containers.RepeatedCompositeFieldContainer[QueueSettlement]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., topic: _Optional[str] = ..., max_records: _Optional[int] = ..., invisible_ms: _Optional[int] = ..., wait_ms: _Optional[int] = ..., settlements: _Optional[_Iterable[_Union[QueueSettlement, _Mapping]]] = ...) -> None: ...

class QueueLease(_message.Message):
    __slots__ = ("topic", "partition", "offset", "delivery_count", "deadline_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    delivery_count: int
    deadline_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., delivery_count: _Optional[int] = ..., deadline_ms: _Optional[int] = ...) -> None: ...

class QueueReceiveResponse(_message.Message):
    __slots__ = ("leases", "settled", "applied", "lost")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[QueueLease]
    settled: bool
    applied: _containers.RepeatedCompositeFieldContainer[QueueLease]
    lost: _containers.RepeatedCompositeFieldContainer[QueueLease]
    def __init__(self, leases: _Optional[_Iterable[_Union[QueueLease, _Mapping]]] = ..., settled: _Optional[bool] = ..., applied: _Optional[_Iterable[_Union[QueueLease, _Mapping]]] = ..., lost: _Optional[_Iterable[_Union[QueueLease, _Mapping]]] = ...) -> None: ...

class QueueSettlement(_message.Message):
    __slots__ = ("topic", "partition", "offset", "delivery_count", "action", "delay_ms", "invisible_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    delivery_count: int
    action: SettleAction
    delay_ms: int
    invisible_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., delivery_count: _Optional[int] = ..., action: _Optional[_Union[SettleAction, str]] = ..., delay_ms: _Optional[int] = ..., invisible_ms: _Optional[int] = ...) -> None: ...

class QueueSettleRequest(_message.Message):
    __slots__ = ("group", "member_id", "member_epoch", "settlements")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENTS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    member_epoch: int
    settlements: _containers.RepeatedCompositeFieldContainer[QueueSettlement]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., settlements: _Optional[_Iterable[_Union[QueueSettlement, _Mapping]]] = ...) -> None: ...

class QueueSettleResponse(_message.Message):
    __slots__ = ("applied", "lost")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    applied: _containers.RepeatedCompositeFieldContainer[QueueLease]
    lost: _containers.RepeatedCompositeFieldContainer[QueueLease]
    def __init__(self, applied: _Optional[_Iterable[_Union[QueueLease, _Mapping]]] = ..., lost: _Optional[_Iterable[_Union[QueueLease, _Mapping]]] = ...) -> None: ...

class AclBinding(_message.Message):
    __slots__ = ("principal", "operation", "resource", "permission")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    principal: str
    operation: str
    resource: str
    permission: str
    def __init__(self, principal: _Optional[str] = ..., operation: _Optional[str] = ..., resource: _Optional[str] = ..., permission: _Optional[str] = ...) -> None: ...

class ListAclsRequest(_message.Message):
    __slots__ = ("principal",)
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    principal: str
    def __init__(self, principal: _Optional[str] = ...) -> None: ...

class ListAclsResponse(_message.Message):
    __slots__ = ("acls",)
    ACLS_FIELD_NUMBER: _ClassVar[int]
    acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class RemoveAclResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: int
    def __init__(self, removed: _Optional[int] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("principal",)
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    principal: str
    def __init__(self, principal: _Optional[str] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("principal", "token", "token_id")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    principal: str
    token: str
    token_id: str
    def __init__(self, principal: _Optional[str] = ..., token: _Optional[str] = ..., token_id: _Optional[str] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ("principal",)
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    principal: str
    def __init__(self, principal: _Optional[str] = ...) -> None: ...

class TokenInfo(_message.Message):
    __slots__ = ("principal", "token_id", "created_ms")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    principal: str
    token_id: str
    created_ms: int
    def __init__(self, principal: _Optional[str] = ..., token_id: _Optional[str] = ..., created_ms: _Optional[int] = ...) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[TokenInfo]
    def __init__(self, tokens: _Optional[_Iterable[_Union[TokenInfo, _Mapping]]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("token_id",)
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    def __init__(self, token_id: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ("revoked",)
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    revoked: int
    def __init__(self, revoked: _Optional[int] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("principal", "authenticated", "superuser", "via", "authorization")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    AUTHENTICATED_FIELD_NUMBER: _ClassVar[int]
    SUPERUSER_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZATION_FIELD_NUMBER: _ClassVar[int]
    principal: str
    authenticated: bool
    superuser: bool
    via: str
    authorization: bool
    def __init__(self, principal: _Optional[str] = ..., authenticated: _Optional[bool] = ..., superuser: _Optional[bool] = ..., via: _Optional[str] = ..., authorization: _Optional[bool] = ...) -> None: ...
