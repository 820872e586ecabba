"""Makes processes that use the SDK safe to start children with `subprocess.Popen(preexec_fn=…)`.

With gRPC channels active, gRPC's fork handlers kill a share of such children before they reach
`exec` (grpcio 1.80 and later, grpc/grpc#43055; measured here with grpcio 1.85: 20 of 1,000
children exited at once, and the parent's stderr filled with poller errors). PySpark starts its
JVM exactly this way, so the demo's Spark step failed now and then. The SDK never uses gRPC in
a forked child, so it turns the handlers off, unless the user already chose a setting. This
must run before gRPC initialises, which is why `flotilla/__init__.py` imports it first.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
