"""A real HTTP(S) server on loopback serving a directory, counting requests, with faults on demand.

Files are served with `Range` (206) as real servers do. `Faults` makes it behave as a bad
network or a strict index does: cut a transfer at a byte, answer 503 with `Retry-After`,
ignore `Range`, require Basic auth. It also answers a proxy's absolute-form requests
(`GET http://host/path`) from its directory, so it can stand in for a forward proxy.
"""

from __future__ import annotations

import base64
import functools
import http.server
import os
import re
import socketserver
import ssl
import threading
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Faults:
    cut_at: int | None = None  # a file's answer stops (connection closed) at this byte ...
    cuts: int = 1  # ... for this many answers
    busy: int = 0  # the first `busy` requests get 503 with Retry-After
    retry_after: int = 1
    ranges: bool = True  # False: Range is ignored, the whole file comes with 200
    auth: tuple[str, str] | None = None  # Basic credentials every request must carry


@dataclass
class Seen:
    """A request as the server got it."""

    path: str
    range: str | None
    authorization: str | None
    status: int = 0


@dataclass
class _State:
    faults: Faults
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def send_response(self, code, message=None):
        self.seen.status = code
        super().send_response(code, message)

    def translate_path(self, path):
        # A proxy's request names the whole URL: serve its path.
        return super().translate_path(urllib.parse.urlsplit(path).path if "://" in path else path)

    def do_GET(self):
        state: _State = self.server.state
        faults = state.faults
        self.seen = Seen(self.path, self.headers.get("Range"), self.headers.get("Authorization"))
        with state.lock:
            self.server.requests.append(self.path)
            state.seen.append(self.seen)
            busy = faults.busy > 0
            faults.busy -= busy
        if (
            faults.auth
            and self.seen.authorization != "Basic " + base64.b64encode(":".join(faults.auth).encode()).decode()
        ):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test index"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if busy:
            self.send_response(503)
            self.send_header("Retry-After", str(faults.retry_after))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        target = self.translate_path(self.path)
        if os.path.isfile(target):
            self._send_file(Path(target).read_bytes(), faults, state.lock)
            return
        super().do_GET()

    def _send_file(self, data: bytes, faults: Faults, lock: threading.Lock) -> None:
        wanted = re.fullmatch(r"bytes=(\d+)-", self.seen.range or "")
        start = int(wanted[1]) if wanted and faults.ranges else 0
        if start >= len(data) > 0:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(data)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        end = len(data)
        with lock:
            if faults.cut_at is not None and faults.cuts > 0 and start < faults.cut_at:
                faults.cuts -= 1
                end = faults.cut_at
        self.wfile.write(data[start:end])
        self.wfile.flush()
        self.close_connection = True


@contextmanager
def serve(directory: Path, tls: ssl.SSLContext | None = None, **faults):
    """Serve `directory` on 127.0.0.1; yields the server (`requests`: paths asked for, `state.seen`:
    each request's Range and Authorization, `state.faults`: changeable) and its base URL."""
    handler = functools.partial(_Handler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.requests = []
    server.state = _State(Faults(**faults))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    with running(server):
        yield server, f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"


@contextmanager
def running(server: socketserver.BaseServer):
    """Serve `server` on a thread of its own while the block runs; closed after it."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
