"""Benchmarks: each measures against a baseline in the same run and prints a JSON line last."""
