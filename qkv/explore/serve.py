"""Serve one explorer page on 127.0.0.1, for a browser on another machine that reaches it
through a forwarded port.  Only the page is served: every other path is a 404."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable

from qkv.errors import InputError

__all__ = ["PageServer", "serve"]

HOST = "127.0.0.1"  # never another interface: the page is for whoever forwards the port


class PageServer(http.server.ThreadingHTTPServer):
    """An HTTP server for one page at ``/`` (and ``/index.html``); everything else is 404."""

    daemon_threads = True

    def __init__(self, page: str, port: int = 0):
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise InputError(
                f"port={port!r} must be between 0 (any free port) and 65535", fields=("port",)
            )
        self.body = page.encode("utf-8")
        try:
            super().__init__((HOST, port), _Handler)
        except OSError as error:
            raise InputError(
                f"cannot serve on {HOST}:{port} ({error.strerror}); pick another port, "
                "or 0 for any free one",
                fields=("port",),
            ) from None

    @property
    def url(self) -> str:
        """The page's address, ``http://127.0.0.1:PORT/``."""
        return f"http://{HOST}:{self.server_address[1]}/"

    def start(self) -> threading.Thread:
        """Serve in a background thread (stop with ``shutdown()``)."""
        thread = threading.Thread(target=self.serve_forever, daemon=True)
        thread.start()
        return thread


class _Handler(http.server.BaseHTTPRequestHandler):
    server: PageServer

    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        self._answer(include_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(include_body=False)

    def _answer(self, *, include_body: bool) -> None:
        if self.path.split("?", 1)[0] not in ("/", "/index.html"):
            self.send_error(404, "only the explorer page is served here")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.server.body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if include_body:
            self.wfile.write(self.server.body)

    def log_message(self, format: str, *args) -> None:  # quiet: the URL was printed once
        pass


def serve(page: str, *, port: int = 0, announce: Callable[[str], None] = print) -> None:
    """Serve ``page`` until interrupted (Ctrl-C); ``announce`` gets the URL first."""
    server = PageServer(page, port)
    announce(f"serving the explorer at {server.url} (Ctrl-C to stop)")
    try:
        server.serve_forever()
    finally:
        server.server_close()
