"""A Toxiproxy-compatible fault-injection server (the v2.4.0 HTTP API and its toxics), a product
of its own beside the chaos harness (`chaos`): it imports nothing of Flotilla outside this
package (tests/test_import_direction.py checks it), and the harness drives it only as a separate
process over its HTTP API (`chaos.network`).

Run it: `python -m chaos.toxiproxy [--host 127.0.0.1] [--port 8474] [--seed N]` (`server`).
Beside it: `echo_server` (a TCP echo service to proxy, for tests and `bench.toxiproxy`) and
`conformance` (checks that also run against the real Toxiproxy binary).
"""
