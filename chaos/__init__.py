"""Chaos testing: a local Toxiproxy-compatible fault-injection server and its helpers."""
