from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GroupMessage(_message.Message):
    __slots__ = ("group", "payload")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    group: str
    payload: bytes
    def __init__(self, group: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class RaftBatch(_message.Message):
    __slots__ = ("from_node", "to_node", "messages", "sequence")
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    TO_NODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    from_node: str
    to_node: str
    messages: _containers.RepeatedCompositeFieldContainer[GroupMessage]
    sequence: int
    def __init__(self, from_node: _Optional[str] = ..., to_node: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[GroupMessage, _Mapping]]] = ..., sequence: _Optional[int] = ...) -> None: ...

class RaftAck(_message.Message):
    __slots__ = ("sequence",)
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    def __init__(self, sequence: _Optional[int] = ...) -> None: ...

class SwimPacket(_message.Message):
    __slots__ = ("from_node", "from_address", "payload")
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    FROM_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    from_node: str
    from_address: str
    payload: bytes
    def __init__(self, from_node: _Optional[str] = ..., from_address: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class SwimAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
