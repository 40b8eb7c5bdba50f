"""What keeps ``myxtts serve`` from being an open door to the web pages its user visits (``SameOriginGuard``): a
Host header that is not the server's own (DNS rebinding) and an Origin of another site get 403, and a POST whose
body is not declared JSON gets 415 (a page's "simple" cross-site form or text request). A pure ASGI wrapper, so the
streamed audio responses of ``synthesis/http.py`` pass through untouched.
"""

from __future__ import annotations

import logging
from typing import Any

LOG = logging.getLogger("myxtts.serve")


def _refusal(status: int, message: str, code: str):
    """An error in OpenAI's shape (as ``http._error``), closing the connection."""
    from fastapi.responses import JSONResponse  # fastapi is the serve extra

    return JSONResponse(status_code=status, headers={"Connection": "close"},
                        content={"error": {"message": message, "type": "invalid_request_error", "param": None,
                                           "code": code}})


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
PUBLIC_BINDS = ("0.0.0.0", "::", "")


def allowed_hosts_for(host: str, extra: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The host names (the Host header without its port) a server bound to ``host`` answers: every loopback name for
    a loopback bind, the address itself for another one, plus ``extra`` (names the clients use, e.g. a DNS name).
    None: any name (a public bind without ``extra``; a proxy in front decides)."""
    names = list(LOOPBACK_NAMES) if host in ("127.0.0.1", "localhost", "::1") else \
        [] if host in PUBLIC_BINDS else [f"[{host}]" if ":" in host else host]
    names += [host_name(name) for name in extra]
    return tuple(sorted({name.lower() for name in names})) if names else None


def host_name(value: str) -> str:
    """``localhost:8000`` -> ``localhost``, ``[::1]:8000`` -> ``[::1]``, ``http://a.b:1/`` -> ``a.b`` (lowercase)."""
    value = value.strip().lower().split("://", 1)[-1].split("/", 1)[0]
    if value.startswith("["):
        return value.split("]", 1)[0] + "]"
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class SameOriginGuard:
    """ASGI middleware: 403 for a Host the server does not answer to or an Origin of another site, 415 for a POST
    whose body is not declared ``application/json`` (module docstring). A pure ASGI wrapper, so the streamed audio
    responses pass through untouched."""

    def __init__(self, app: Any, allowed_hosts: tuple[str, ...] | None) -> None:
        self.app, self.allowed_hosts = app, allowed_hosts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        problem = self.problem(scope["method"], headers)
        if problem is None:
            return await self.app(scope, receive, send)
        status, message, code = problem
        LOG.warning("refused %s %s from %s: %s", scope["method"], scope.get("path", ""),
                    "%s:%d" % tuple(scope["client"]) if scope.get("client") else "?", message)
        await _refusal(status, message, code)(scope, receive, send)

    def problem(self, method: str, headers: dict[str, str]) -> tuple[int, str, str] | None:
        """(status, message, code) of a refused request, or None."""
        host = host_name(headers.get("host", ""))
        if self.allowed_hosts is not None and host not in self.allowed_hosts:
            return 403, (f"Host {host!r} is not this server's ({', '.join(self.allowed_hosts)}); start `myxtts serve` "
                         "with --allowed-host NAME to answer another name."), "host_not_allowed"
        origin = headers.get("origin")
        if origin is not None:  # a browser's request from a page ("null": a sandboxed or local file page)
            allowed = self.allowed_hosts if self.allowed_hosts is not None else (host,)
            if origin.strip().lower() == "null" or host_name(origin) not in allowed:
                return 403, f"Cross-site requests are refused (Origin {origin!r}).", "origin_not_allowed"
        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if method == "POST" and content_type != "application/json":
            return 415, (f"The request body must be JSON sent as Content-Type: application/json, got "
                         f"{content_type or 'none'!r}."), "unsupported_media_type"
        return None
