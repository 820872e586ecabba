"""Machine-readable reasons a node attaches to an error status, in the trailing metadata under
`REASON_KEY`, where the gRPC status code alone is ambiguous. The SDK maps them to its errors."""

from __future__ import annotations

__all__ = ["REASON_KEY", "UNKNOWN_PRODUCER_ID"]

REASON_KEY = "flotilla-reason"
# ABORTED: the partition does not know the batch's producer id (new, expired or evicted) and the
# batch does not start at sequence 0. Nothing was written; send it under a new producer id.
UNKNOWN_PRODUCER_ID = "UNKNOWN_PRODUCER_ID"
