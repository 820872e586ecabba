"""The deterministic Raft simulator: `python -m raft.sim --help`."""
