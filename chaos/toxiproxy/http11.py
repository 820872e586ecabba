"""A minimal asyncio HTTP/1.1 server: enough for a JSON control API, nothing more.

Contract:
- One request at a time per connection, keep-alive by default (HTTP/1.1), closed after
  `Connection: close` or an HTTP/1.0 request without keep-alive.
- Bodies by Content-Length or chunked transfer coding, at most MAX_BODY_BYTES (else 413);
  `Expect: 100-continue` is answered. The path is percent-decoded, the query string dropped.
- Responses always carry Content-Length (except 204) and a Date header.
- A malformed request gets 400 and the connection is closed. The handler's exceptions are
  logged and answered with 500; they never stop the server.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import unquote

__all__ = ["HttpRequest", "HttpResponse", "RequestHandler", "serve_http_connection"]

MAX_HEADER_LINES = 100
MAX_BODY_BYTES = 1024 * 1024
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # names lower-cased
    body: bytes


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: HTTPStatus
    body: bytes = b""
    content_type: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=())


RequestHandler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class _BadRequest(Exception):
    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readline()
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _BadRequest(HTTPStatus.BAD_REQUEST, "bad chunk size") from None
        if size == 0:
            while (await reader.readline()).strip():
                pass  # trailers are ignored
            return bytes(body)
        if len(body) + size > MAX_BODY_BYTES:
            raise _BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large")
        body += await reader.readexactly(size)
        await reader.readline()


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> tuple[HttpRequest, bool] | None:
    """The next request and whether to keep the connection open; None at end of stream."""
    request_line = await reader.readline()
    if not request_line:
        return None
    parts = request_line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(HTTPStatus.BAD_REQUEST, "malformed request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, separator, value = line.decode("latin-1").partition(":")
        if not separator:
            raise _BadRequest(HTTPStatus.BAD_REQUEST, "malformed header")
        headers[name.strip().lower()] = value.strip()
    else:
        raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "too many headers")
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise _BadRequest(HTTPStatus.BAD_REQUEST, "bad Content-Length") from None
        if length < 0:
            raise _BadRequest(HTTPStatus.BAD_REQUEST, "bad Content-Length")
        if length > MAX_BODY_BYTES:
            raise _BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large")
        body = await reader.readexactly(length) if length else b""
    path = unquote(target.split("?", 1)[0])
    return HttpRequest(method, path, headers, body), keep_alive


def _encode_response(response: HttpResponse, keep_alive: bool) -> bytes:
    status = response.status
    lines = [f"HTTP/1.1 {status.value} {status.phrase}"]
    if response.content_type is not None:
        lines.append(f"Content-Type: {response.content_type}")
    lines.extend(f"{name}: {value}" for name, value in response.headers)
    lines.append(f"Date: {email.utils.formatdate(usegmt=True)}")
    if status is not HTTPStatus.NO_CONTENT:
        lines.append(f"Content-Length: {len(response.body)}")
    if not keep_alive:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if status is HTTPStatus.NO_CONTENT else head + response.body


async def serve_http_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: RequestHandler
) -> None:
    try:
        while True:
            try:
                parsed = await _read_request(reader, writer)
            except _BadRequest as error:
                response = HttpResponse(error.status, f"{error}\n".encode(), "text/plain")
                writer.write(_encode_response(response, keep_alive=False))
                await writer.drain()
                return
            if parsed is None:
                return
            request, keep_alive = parsed
            try:
                response = await handler(request)
            except Exception:
                _log.exception("unhandled error for %s %s", request.method, request.path)
                response = HttpResponse(
                    HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n", "text/plain"
                )
            writer.write(_encode_response(response, keep_alive))
            await writer.drain()
            if not keep_alive:
                return
    except (OSError, asyncio.IncompleteReadError, ValueError):
        return  # the client went away or sent an over-long line
    finally:
        writer.close()
