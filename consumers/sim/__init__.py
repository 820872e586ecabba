"""The deterministic consumer-group simulator: `python -m consumers.sim --help`."""
