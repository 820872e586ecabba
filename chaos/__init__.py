"""Chaos testing: the harness (nemeses, workload, history, checker, `python -m chaos`) and, in
`chaos.toxiproxy`, the Toxiproxy-compatible fault-injection server it runs as a separate process."""
