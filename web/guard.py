"""The HTTP guard: which requests reach the handlers, and what every response carries.

In order, for every request:

1. **Host.** Only the configured names are served (``AllowedHosts``): the
   loopback names, ``server.host`` when it is not a wildcard, and
   ``server.allowed_hosts``. A page on ``evil.example`` whose DNS name is
   rebound to 127.0.0.1 sends ``Host: evil.example`` and gets 421; without this
   its scripts could read the panel and the API as a same-origin page.
2. **Origin**, for every state-changing request (any method but GET, HEAD and
   OPTIONS) and every WebSocket upgrade: a browser names the page it comes from
   in ``Origin`` (always on a WebSocket and on a cross-site POST). It must be
   this very host (scheme http or https, same name and port as ``Host``, which
   step 1 vouched for) or a name listed in ``server.allowed_hosts``. A request
   with neither ``Origin`` nor ``Referer`` passes: it comes from a client that
   is not a browser (curl, a script), which no foreign page can drive.
3. **Access token**, when one is required (``server.host`` not loopback):
   ``Authorization: Bearer``, ``?token=`` or the cookie the chat page sets,
   compared in constant time. An address that sent ``server.auth_free_failures``
   wrong tokens must wait before the next try (429 with ``Retry-After``), the
   wait doubling with each further wrong one (``GuessLimit``).

Every response, errors and static files included, carries the security
headers (``SECURITY_HEADERS``): a Content-Security-Policy that admits only this
origin's own script and style files (no inline script, no inline style, no
remote origin, no framing). ``RedactingAccessLogger`` keeps tokens in URLs out
of the access log.
"""

from __future__ import annotations

import hmac
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_log import AccessLogger

from gateway.config import Config

log = logging.getLogger(__name__)

TOKEN_COOKIE = "agentgw_token"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("", "0.0.0.0", "::")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        # Voice replies and recordings play from blob: URLs made by talk.js.
        "media-src 'self' blob:",
        "img-src 'self' data:",
        # 'self' covers ws:// and wss:// to this host (CSP level 3).
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


def split_host(netloc: str) -> tuple[str, int | None] | None:
    """``name[:port]`` as (lower-case name without brackets or final dot, port);
    None when it is not one."""
    if not netloc or any(c in netloc for c in "/?#@ \t\\"):
        return None
    try:
        parts = urlsplit(f"//{netloc}")
        name, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not name:
        return None
    return name.rstrip("."), port


@dataclass(frozen=True)
class HostEntry:
    name: str
    # None: any port.
    port: int | None

    def matches(self, name: str, port: int | None) -> bool:
        return name == self.name and (self.port is None or port == self.port)


class AllowedHosts:
    """The host names this server answers to."""

    def __init__(self, listed: Iterable[str], bind_host: str) -> None:
        self.any = "*" in listed
        self.listed = tuple(_entry(e) for e in listed if e != "*")
        defaults = [HostEntry(name, None) for name in LOOPBACK_NAMES]
        if bind_host not in WILDCARD_BINDS:
            bound = split_host(f"[{bind_host}]" if ":" in bind_host else bind_host)
            if bound is not None:
                defaults.append(HostEntry(bound[0], None))
        self.entries = (*defaults, *self.listed)

    @classmethod
    def from_config(cls, config: Config) -> AllowedHosts:
        return cls(config.server.allowed_hosts, config.server.host)

    def allows(self, netloc: str) -> bool:
        """Whether a ``Host`` header names this server."""
        if self.any:
            return True
        parsed = split_host(netloc)
        return parsed is not None and any(e.matches(*parsed) for e in self.entries)

    def origin_allowed(self, source: str, host: str) -> bool:
        """Whether a page at ``source`` (an Origin or Referer) may change things here.

        Same origin as the request's (already allowed) ``Host``, or a name the
        operator listed (a reverse proxy's public name, which may differ from the
        Host the proxy passes on). Loopback names are not trusted by default beyond
        the same origin: another local app on another port is another site.
        """
        parts = urlsplit(source)
        if parts.scheme not in ("http", "https"):
            return False  # "null" (sandboxed frames, file:), extensions, data:
        origin = split_host(parts.netloc)
        here = split_host(host)
        if origin is None or here is None:
            return False
        name, port = origin[0], origin[1] or _default_port(parts.scheme)
        if name == here[0] and (here[1] is None or port == here[1]):
            return True
        return any(e.matches(name, port) for e in self.listed)


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _entry(text: str) -> HostEntry:
    parsed = split_host(text)
    if parsed is None:
        raise ValueError(f"{text!r} is not a host name or host:port")
    return HostEntry(*parsed)


class GuessLimit:
    """Wrong access tokens per address, and how long each must wait before the next.

    After ``free`` failures an address waits 1 s, then 2 s, 4 s, ... up to
    ``max_wait_s`` after each further failure; a right token clears its record.
    At most ``max_addresses`` records are kept; the longest quiet go first.
    """

    def __init__(
        self,
        free: int,
        max_wait_s: float,
        *,
        clock: Callable[[], float] | None = None,
        max_addresses: int = 10_000,
    ) -> None:
        self.free = free
        self.max_wait_s = max_wait_s
        self.clock = clock if clock is not None else time.monotonic
        self.max_addresses = max_addresses
        # address -> (failures, may try again at); insertion order = last failure.
        self._records: dict[str, tuple[int, float]] = {}

    def wait_s(self, address: str) -> float:
        """Seconds ``address`` must still wait before its token is looked at (0: none)."""
        record = self._records.get(address)
        if record is None:
            return 0.0
        return max(0.0, record[1] - self.clock())

    def failed(self, address: str) -> float:
        """Count a wrong token; the wait it earns."""
        failures = self._records.pop(address, (0, 0.0))[0] + 1
        over = failures - self.free
        wait = 0.0 if over <= 0 else min(self.max_wait_s, 2.0 ** min(over - 1, 62))
        self._records[address] = (failures, self.clock() + wait)
        while len(self._records) > self.max_addresses:
            del self._records[next(iter(self._records))]
        return wait

    def succeeded(self, address: str) -> None:
        self._records.pop(address, None)


def guard_middleware(config: Config, *, clock: Callable[[], float] | None = None) -> Middleware:
    """Host, then Origin, then the access token (see the module's docstring)."""
    hosts = AllowedHosts.from_config(config)
    token = config.server.access_token.encode()
    token_required = bool(token) and not config.is_loopback
    limit = GuessLimit(
        config.server.auth_free_failures, config.server.auth_backoff_max_s, clock=clock
    )
    # Probes and Telegram's webhook name the server as they know it, and are no
    # browser's page: no Host rule, no token (the webhook checks Telegram's secret).
    # /readyz too: orchestrators probe readiness without a token. /metrics is not
    # open: its numbers describe the people's traffic.
    open_paths = {"/healthz", "/readyz"}
    if config.telegram.enabled and config.telegram.mode == "webhook":
        open_paths.add(config.telegram.webhook_path)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in open_paths:
            return await handler(request)
        if not hosts.allows(request.host):
            raise web.HTTPMisdirectedRequest(
                text=f"this server does not answer to the host name {request.host[:100]!r}; "
                "add it to server.allowed_hosts\n"
            )
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if (request.method not in SAFE_METHODS or upgrade) and not _same_origin(request):
            source = request.headers.get("Origin") or request.headers.get("Referer") or ""
            if source and not hosts.origin_allowed(source, request.host):
                raise web.HTTPForbidden(
                    text=f"cross-site request refused: it came from {source[:200]}, "
                    f"not from a page of {request.host}\n"
                )
        if token_required and not request.path.startswith("/static/"):
            await _check_token(request, token, limit)
        return await handler(request)

    return middleware


def _same_origin(request: web.Request) -> bool:
    """The browser says the request comes from a page of this very origin.

    ``Sec-Fetch-Site`` is set by the browser alone (pages cannot forge it). It is
    needed because under ``Referrer-Policy: no-referrer`` a same-origin POST
    carries ``Origin: null``, as a sandboxed foreign page's does; the header tells
    them apart. The Host rule has vouched that "this origin" is this server.
    """
    return request.headers.get("Sec-Fetch-Site") == "same-origin"


async def _check_token(request: web.Request, token: bytes, limit: GuessLimit) -> None:
    address = request.remote or "unknown"
    wait = limit.wait_s(address)
    if wait > 0:
        raise web.HTTPTooManyRequests(
            text=f"too many wrong access tokens; try again in {math.ceil(wait)} s\n",
            headers={"Retry-After": str(math.ceil(wait))},
        )
    given = (
        request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        or request.query.get("token", "")
        or request.cookies.get(TOKEN_COOKIE, "")
    )
    if not given:
        raise web.HTTPUnauthorized(
            text="an access token is required: Authorization: Bearer <token> or ?token=\n"
        )
    # Constant time in the token's content: a wrong guess learns nothing from timing.
    if not hmac.compare_digest(given.encode(), token):
        wait = limit.failed(address)
        log.warning("wrong access token from %s (%s %s)", address, request.method, request.path)
        raise web.HTTPUnauthorized(
            text="wrong access token\n",
            headers={"Retry-After": str(math.ceil(wait))} if wait else None,
        )
    limit.succeeded(address)


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: every response, handlers' errors and static files too."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


def install(app: web.Application, config: Config) -> None:
    """The guard's middleware and headers on ``app`` (before any other middleware)."""
    app.middlewares.insert(0, guard_middleware(config))  # type: ignore[arg-type]
    app.on_response_prepare.append(add_security_headers)
    if config.server.host in WILDCARD_BINDS and not config.server.allowed_hosts:
        log.warning(
            "server.host is %r but server.allowed_hosts is empty: only localhost, 127.0.0.1 "
            "and [::1] are served; other names and addresses get 421",
            config.server.host,
        )


# ``token=`` and ``access_token=`` values in a logged URL (the request line, Referer).
_TOKEN_IN_URL = re.compile(r"([?&](?:access_)?token=)[^&\s\"#]*", re.IGNORECASE)


def redact(text: str) -> str:
    return _TOKEN_IN_URL.sub(r"\1[redacted]", text)


class _RedactingLogger(logging.LoggerAdapter[logging.Logger]):
    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        # Keeps the caller's ``extra`` (the base class would replace it).
        return redact(str(msg)), kwargs


class RedactingAccessLogger(AccessLogger):
    """aiohttp's access log with ``?token=`` values replaced by ``[redacted]``."""

    def __init__(self, logger: logging.Logger, log_format: str = AccessLogger.LOG_FORMAT) -> None:
        super().__init__(cast(logging.Logger, _RedactingLogger(logger, {})), log_format)


ACCESS_LOG_CLASS: type[AbstractAccessLogger] = RedactingAccessLogger
