from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class RaftFrame(_message.Message):
    __slots__ = ("frame",)
    FRAME_FIELD_NUMBER: _ClassVar[int]
    frame: bytes
    def __init__(self, frame: _Optional[bytes] = ...) -> None: ...

class RaftAck(_message.Message):
    __slots__ = ("sequence",)
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    def __init__(self, sequence: _Optional[int] = ...) -> None: ...

class SwimPacket(_message.Message):
    __slots__ = ("from_node", "from_address", "payload", "sent_at_ms", "mac")
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    FROM_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    from_node: str
    from_address: str
    payload: bytes
    sent_at_ms: int
    mac: bytes
    def __init__(self, from_node: _Optional[str] = ..., from_address: _Optional[str] = ..., payload: _Optional[bytes] = ..., sent_at_ms: _Optional[int] = ..., mac: _Optional[bytes] = ...) -> None: ...

class SwimAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
