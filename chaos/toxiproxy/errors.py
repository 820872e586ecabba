"""Errors of the Toxiproxy-compatible server: one root, and the HTTP API error it answers with.

Contract: an `ApiError` carries the HTTP status and the message the client sees in the JSON body
`{"error": message, "status": status}` (Toxiproxy v2.4.0's `ApiError` shape). A request that
raises one changes nothing that was not already changed (the single documented exception is
`/populate`, which, like the real server, keeps the proxies created before the failing one).
"""

from __future__ import annotations

from http import HTTPStatus

__all__ = ["ApiError", "ChaosError"]


class ChaosError(Exception):
    """Root of every error raised by the Toxiproxy-compatible server (`chaos.toxiproxy`)."""


class ApiError(ChaosError):
    """An error answered to an HTTP API client with its status code."""

    def __init__(self, message: str, status: HTTPStatus) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def to_json(self) -> dict[str, object]:
        return {"error": self.message, "status": int(self.status)}


# The fixed messages of Toxiproxy v2.4.0 (api.go), so clients matching on them keep working.
BAD_REQUEST_BODY = "bad request body"
MISSING_FIELD = "missing required field"


def proxy_not_found() -> ApiError:
    return ApiError("proxy not found", HTTPStatus.NOT_FOUND)


def proxy_already_exists() -> ApiError:
    return ApiError("proxy already exists", HTTPStatus.CONFLICT)


def invalid_stream() -> ApiError:
    return ApiError(
        "stream was invalid, can be either upstream or downstream", HTTPStatus.BAD_REQUEST
    )


def invalid_toxic_type() -> ApiError:
    return ApiError("invalid toxic type", HTTPStatus.BAD_REQUEST)


def toxic_already_exists() -> ApiError:
    return ApiError("toxic already exists", HTTPStatus.CONFLICT)


def toxic_not_found() -> ApiError:
    return ApiError("toxic not found", HTTPStatus.NOT_FOUND)


def bad_request_body(detail: str) -> ApiError:
    return ApiError(f"{BAD_REQUEST_BODY}: {detail}", HTTPStatus.BAD_REQUEST)


def missing_field(detail: str) -> ApiError:
    return ApiError(f"{MISSING_FIELD}: {detail}", HTTPStatus.BAD_REQUEST)
