"""What ``agentgw run`` does around the app: bind the port first, keep the console quiet,
and say where it serves and when it is ready.

The listening sockets are opened before anything slow is imported or loaded:
a port that is taken ends the command at once with one line naming it, and a
port that is bound takes connections (queued by the kernel) from the first
second. The console shows our own records at the configured level and other
libraries' only from WARNING up (the one-time ONNX export alone logs some 85
INFO lines); ``log.level = "debug"`` shows everything.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import sys
from datetime import UTC, datetime
from typing import TextIO

from gateway.errors import PortUnavailable
from gateway.events import LOG_ID_FIELDS, TurnLogFilter

# The top-level packages whose records are ours (``__main__`` for ``python -m``).
OWN_LOGGERS = frozenset({"gateway", "memory", "persona", "channels", "voice", "web", "__main__"})

# Set (unless already set) before the model libraries are imported: their progress
# bars and chatter go to their own handlers, not through logging's root.
QUIET_ENVIRONMENT = {
    # huggingface_hub's and transformers' tqdm bars ("Loading weights: 100%|...").
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    # transformers logs through a handler of its own (not propagated to the root).
    "TRANSFORMERS_VERBOSITY": "error",
    # Any other tqdm bar (tqdm reads TQDM_* as its defaults).
    "TQDM_DISABLE": "1",
}

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class OwnOrWarning(logging.Filter):
    """Our records at any level; other libraries' from WARNING up."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".", 1)[0] in OWN_LOGGERS


class JsonFormatter(logging.Formatter):
    """One JSON object a line, for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        # The turn's ids as fields (TurnLogFilter, or a call's extra=), never in the text.
        for name in LOG_ID_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, fmt: str = "text", stream: TextIO | None = None) -> None:
    """The console of ``agentgw run``: ``level`` for our loggers; below debug, other
    libraries' INFO records and progress bars stay out of it. ``fmt``: "text" or "json"."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(LOG_FORMAT))
    handler.addFilter(TurnLogFilter())
    if numeric > logging.DEBUG:
        handler.addFilter(OwnOrWarning())
        for name, value in QUIET_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
    logging.basicConfig(level=numeric, handlers=[handler], force=True)
    # httpx logs every request URL at INFO, and Bot API URLs carry the Telegram
    # bot token (and a line per long poll): not even at debug. Its warnings still come through.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, numeric))


def bind_sockets(host: str, port: int, backlog: int = 128) -> list[socket.socket]:
    """Listening TCP sockets for every address ``host`` names (as aiohttp would open
    them); ``PortUnavailable`` with what to do when one cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise PortUnavailable(f"cannot resolve server.host {host!r}: {exc.strerror}") from exc
    sockets: list[socket.socket] = []
    seen: set[tuple[int, str]] = set()
    try:
        for family, kind, proto, _, address in infos:
            key = (family, str(address[0]))
            if key in seen:
                continue
            seen.add(key)
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # One socket per family, as asyncio's create_server does.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise PortUnavailable(_bind_failure(host, port, exc)) from exc
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _bind_failure(host: str, port: int, exc: OSError) -> str:
    where = f"port {port} on {host}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{where} is in use (another agentgw or program?); "
            "stop it or pick another with --port or server.port"
        )
    if exc.errno == errno.EACCES:
        return f"{where} needs privileges this user lacks; pick a port above 1023 with --port"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{host} is not an address of this machine; fix server.host or --host"
    return f"cannot listen on {where}: {exc.strerror or exc}"


def serving_url(host: str, port: int) -> str:
    """The address a person opens (an IPv6 host in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


class Announcer:
    """The two lines a person waits for, last on the console: where the gateway serves
    (once its sockets take connections) and that it is ready (once its models loaded),
    in that order whichever happens first. Runs on the event loop."""

    def __init__(self, url: str, out: TextIO | None = None) -> None:
        self.url = url
        self._out = out if out is not None else sys.stdout
        self._serving = False
        self._ready = False

    def serving(self, _aiohttp_banner: str = "") -> None:
        """Called by ``web.run_app`` once the sites started (its own banner is dropped)."""
        self._serving = True
        loading = "" if self._ready else " (models loading...)"
        self._say(f"agentgw: serving {self.url}{loading}")
        if self._ready:
            self._say("agentgw: ready")

    def ready(self) -> None:
        self._ready = True
        if self._serving:
            self._say("agentgw: ready")

    def _say(self, line: str) -> None:
        self._out.write(line + "\n")
        self._out.flush()
