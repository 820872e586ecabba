"""proto: the wire contract — gRPC services and messages (generated), and the record batch format.

`flotilla.proto` is the client API, `peer.proto` the node-to-node API; `make proto` regenerates
the `*_pb2*.py` modules, which are committed. `proto.records` encodes record batches.
"""
