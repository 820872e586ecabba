"""Toxiproxy v2.4.0's HTTP API: routes, status codes and JSON, over the proxies of one server.

Routes (api.go `Listen`), with the statuses the real server answers:

    POST   /reset                            204 (all proxies enabled, all toxics removed)
    GET    /proxies                          200 {name: proxy, ...} (sorted by name)
    POST   /proxies                          201 proxy | 400 | 409 | 500 (listen failed)
    POST   /populate                         201 {"proxies": [...] | null} | 400/500 with
                                             "error" and "status" added
    GET    /proxies/{proxy}                  200 proxy | 404
    POST   /proxies/{proxy}                  200 proxy | 400 | 404 | 500
    DELETE /proxies/{proxy}                  204 | 404
    GET    /proxies/{proxy}/toxics           200 [toxic, ...]
    POST   /proxies/{proxy}/toxics           200 toxic (not 201) | 400 | 404 | 409
    GET    /proxies/{proxy}/toxics/{toxic}   200 toxic | 404
    POST   /proxies/{proxy}/toxics/{toxic}   200 toxic | 400 | 404
    DELETE /proxies/{proxy}/toxics/{toxic}   204 | 404
    GET    /version                          200 text/plain "2.4.0"

Errors are `{"error": "...", "status": N}` plus a newline, sent as text/plain (Go's http.Error
overrides the JSON content type). An unknown path is 404 "404 page not found", a known path with
another method 405 with an empty body, and a User-Agent starting "Mozilla/" gets 403 (the real
server refuses browsers). Changes are made one request at a time.

Quirks kept on purpose because the real server has them: /populate returns, for a proxy that
already exists with the same listen and upstream, a fresh unstarted copy (`enabled: false`, no
toxics) while the running proxy is kept unchanged; /populate of `[]` answers `"proxies": null`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from http import HTTPStatus

from chaos.toxiproxy.errors import (
    ApiError,
    bad_request_body,
    missing_field,
    proxy_already_exists,
    proxy_not_found,
    toxic_not_found,
)
from chaos.toxiproxy.gojson import FieldKind, decode_body, decode_struct, encode, kind_of
from chaos.toxiproxy.http11 import HttpRequest, HttpResponse
from chaos.toxiproxy.proxy import Proxy, check_listen_address
from chaos.toxiproxy.toxic_spec import parse_toxic_create, parse_toxic_update

__all__ = ["TOXIPROXY_VERSION", "ToxiproxyApi"]

TOXIPROXY_VERSION = "2.4.0"

_PROXY_FIELDS = {
    "name": FieldKind.STRING,
    "listen": FieldKind.STRING,
    "upstream": FieldKind.STRING,
    "enabled": FieldKind.BOOL,
}
_JSON = "application/json"
_POPULATE_ENTRY_GO_TYPE = 'struct { toxiproxy.Proxy; Enabled *bool "json:\\"enabled\\"" }'

Handler = Callable[[HttpRequest, dict[str, str]], Awaitable[HttpResponse]]


def json_response(value: object, status: HTTPStatus = HTTPStatus.OK) -> HttpResponse:
    return HttpResponse(status, encode(value), _JSON)


def error_response(error: ApiError) -> HttpResponse:
    return HttpResponse(
        error.status,
        encode(error.to_json()) + b"\n",
        "text/plain; charset=utf-8",
        (("X-Content-Type-Options", "nosniff"),),
    )


def _text(status: HTTPStatus, text: str) -> HttpResponse:
    return HttpResponse(
        status, text.encode(), "text/plain; charset=utf-8", (("X-Content-Type-Options", "nosniff"),)
    )


class ToxiproxyApi:
    """The proxies of one server and the HTTP handlers that change them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.proxies: dict[str, Proxy] = {}
        self._lock = asyncio.Lock()
        self._routes: list[tuple[str, tuple[str, ...], Handler]] = [
            ("POST", ("reset",), self.reset),
            ("GET", ("proxies",), self.list_proxies),
            ("POST", ("proxies",), self.create_proxy),
            ("POST", ("populate",), self.populate),
            ("GET", ("proxies", "{proxy}"), self.show_proxy),
            ("POST", ("proxies", "{proxy}"), self.update_proxy),
            ("DELETE", ("proxies", "{proxy}"), self.delete_proxy),
            ("GET", ("proxies", "{proxy}", "toxics"), self.list_toxics),
            ("POST", ("proxies", "{proxy}", "toxics"), self.create_toxic),
            ("GET", ("proxies", "{proxy}", "toxics", "{toxic}"), self.show_toxic),
            ("POST", ("proxies", "{proxy}", "toxics", "{toxic}"), self.update_toxic),
            ("DELETE", ("proxies", "{proxy}", "toxics", "{toxic}"), self.delete_toxic),
            ("GET", ("version",), self.version),
        ]

    # --- dispatch --------------------------------------------------------------------------

    async def handle(self, request: HttpRequest) -> HttpResponse:
        if request.headers.get("user-agent", "").startswith("Mozilla/"):
            return _text(HTTPStatus.FORBIDDEN, "User agent not allowed\n")
        segments = tuple(request.path.split("/")[1:]) if request.path.startswith("/") else ()
        path_matched = False
        for method, pattern, handler in self._routes:
            variables = _match(pattern, segments)
            if variables is None:
                continue
            path_matched = True
            if method == request.method:
                try:
                    async with self._lock:
                        return await handler(request, variables)
                except ApiError as error:
                    return error_response(error)
        if path_matched:
            return HttpResponse(HTTPStatus.METHOD_NOT_ALLOWED)
        return _text(HTTPStatus.NOT_FOUND, "404 page not found\n")

    def _proxy(self, variables: dict[str, str]) -> Proxy:
        proxy = self.proxies.get(variables["proxy"])
        if proxy is None:
            raise proxy_not_found()
        return proxy

    # --- proxies ---------------------------------------------------------------------------

    async def list_proxies(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        return json_response({name: self.proxies[name].to_json() for name in sorted(self.proxies)})

    async def create_proxy(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        fields = decode_struct(
            decode_body(request.body),
            _PROXY_FIELDS,
            "toxiproxy.Proxy",
            {"name": "", "listen": "", "upstream": "", "enabled": True},
        )
        name, listen, upstream = str(fields["name"]), str(fields["listen"]), str(fields["upstream"])
        if not name:
            raise missing_field("name")
        if not upstream:
            raise missing_field("upstream")
        if name in self.proxies:
            raise proxy_already_exists()
        check_listen_address(listen)
        proxy = Proxy(name, listen, upstream, self.rng)
        if fields["enabled"] is True:
            await proxy.start()
        self.proxies[name] = proxy
        return json_response(proxy.to_json(), HTTPStatus.CREATED)

    async def populate(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        created: list[Proxy] = []
        error: ApiError | None = None
        try:
            await self._populate(request.body, created)
        except ApiError as failure:
            error = failure
        body: dict[str, object] = {} if error is None else error.to_json()
        body["proxies"] = [proxy.to_json() for proxy in created] or None
        return json_response(body, HTTPStatus.CREATED if error is None else error.status)

    async def _populate(self, raw_body: bytes, created: list[Proxy]) -> None:
        document = decode_body(raw_body)
        if document is None:
            document = []
        if not isinstance(document, list):
            raise bad_request_body(
                f"json: cannot unmarshal {kind_of(document)} into Go value of type "
                f"[]{_POPULATE_ENTRY_GO_TYPE}"
            )
        entries = [
            decode_struct(
                item,
                _PROXY_FIELDS,
                _POPULATE_ENTRY_GO_TYPE,
                {"name": "", "listen": "", "upstream": "", "enabled": True},
            )
            for item in document
        ]
        for number, entry in enumerate(entries, start=1):
            if not entry["name"]:
                raise missing_field(f"name at proxy {number}")
            if not entry["upstream"]:
                raise missing_field(f"upstream at proxy {number}")
        for entry in entries:  # our loopback-only rule (400) is checked before any change
            try:
                check_listen_address(str(entry["listen"]))
            except ApiError as error:
                if error.status == HTTPStatus.BAD_REQUEST:
                    raise
                # Other listen errors (500) surface in order, as with the real server.
        for entry in entries:
            name, listen = str(entry["name"]), str(entry["listen"])
            upstream = str(entry["upstream"])
            proxy = Proxy(name, listen, upstream, self.rng)
            existing = self.proxies.get(name)
            if existing is None or existing.listen != listen or existing.upstream != upstream:
                if existing is not None:
                    existing.stop()
                if entry["enabled"] is True:
                    await proxy.start()
                self.proxies[name] = proxy
            created.append(proxy)

    async def show_proxy(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        return json_response(self._proxy(variables).to_json())

    async def update_proxy(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        proxy = self._proxy(variables)
        fields = decode_struct(
            decode_body(request.body),
            _PROXY_FIELDS,
            "toxiproxy.Proxy",
            {
                "name": proxy.name,
                "listen": proxy.listen,
                "upstream": proxy.upstream,
                "enabled": proxy.enabled,
            },
        )
        await proxy.update(
            str(fields["listen"]), str(fields["upstream"]), fields["enabled"] is True
        )
        return json_response(proxy.to_json())

    async def delete_proxy(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        proxy = self._proxy(variables)
        proxy.stop()
        del self.proxies[proxy.name]
        return HttpResponse(HTTPStatus.NO_CONTENT)

    async def reset(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        for proxy in list(self.proxies.values()):
            await proxy.start()
            await proxy.remove_all_toxics()
        return HttpResponse(HTTPStatus.NO_CONTENT)

    async def version(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        return HttpResponse(HTTPStatus.OK, TOXIPROXY_VERSION.encode(), "text/plain;charset=utf-8")

    # --- toxics ----------------------------------------------------------------------------

    async def list_toxics(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        return json_response([spec.to_json() for spec in self._proxy(variables).toxics()])

    async def create_toxic(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        proxy = self._proxy(variables)
        taken = {spec.name for spec in proxy.toxics()}
        spec = parse_toxic_create(decode_body(request.body), taken)
        await proxy.add_toxic(spec)
        return json_response(spec.to_json())

    async def show_toxic(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        spec = self._proxy(variables).find_toxic(variables["toxic"])
        if spec is None:
            raise toxic_not_found()
        return json_response(spec.to_json())

    async def update_toxic(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        proxy = self._proxy(variables)
        current = proxy.find_toxic(variables["toxic"])
        if current is None:
            raise toxic_not_found()
        spec = parse_toxic_update(decode_body(request.body), current)
        await proxy.update_toxic(spec)
        return json_response(spec.to_json())

    async def delete_toxic(self, request: HttpRequest, variables: dict[str, str]) -> HttpResponse:
        proxy = self._proxy(variables)
        if proxy.find_toxic(variables["toxic"]) is None:
            raise toxic_not_found()
        await proxy.remove_toxic(variables["toxic"])
        return HttpResponse(HTTPStatus.NO_CONTENT)

    async def close(self) -> None:
        """Stop every proxy (server shutdown)."""
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()


def _match(pattern: tuple[str, ...], segments: tuple[str, ...]) -> dict[str, str] | None:
    if len(pattern) != len(segments):
        return None
    variables: dict[str, str] = {}
    for expected, actual in zip(pattern, segments, strict=True):
        if expected.startswith("{"):
            if not actual:
                return None
            variables[expected[1:-1]] = actual
        elif expected != actual:
            return None
    return variables
