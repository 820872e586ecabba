"""cluster: the node daemon — gRPC services, the MultiRaft host, placement, partition manager,
control plane, configuration and metrics. The only package where sockets, files, timers and
tasks meet the pure cores of `raft` and `membership`."""
