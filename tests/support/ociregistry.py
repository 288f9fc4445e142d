"""A tiny OCI distribution registry on loopback, for tests: real HTTP, real token flow.

It implements what the ops cache uses: blob HEAD/GET (answered with a redirect to a
storage path, as registries backed by a CDN or bucket do), monolithic blob upload
(POST, then PUT with `?digest=`, checked), manifest PUT/GET, and the bearer-token
dance: /v2/ requests without a token for the right repository and action get 401 with
`WWW-Authenticate: Bearer realm=...,service=...,scope=...`.

The token service at /token takes a login (`users`: Basic authentication on GET, or an
identity token as POST `grant_type=refresh_token`; anonymous when `users` is empty), says
`expires_in` and holds the registry to it: a token past its time is refused with 401 and
counted in `expired_uses`. `revoke_on_upload` drops every token once an upload has
started, so the upload's PUT meets a 401 as it would when a token runs out mid-upload.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import re
import secrets
import time
import urllib.parse
from contextlib import contextmanager

from support.httpserver import running

SERVICE = "test-registry"
_ROUTE = re.compile(r"^/v2/(?P<repo>.+?)/(?P<kind>blobs/uploads|blobs|manifests)/(?P<rest>[^?]*)$")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    @property
    def reg(self) -> TestRegistry:
        return self.server  # type: ignore[return-value]

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.reg.statuses.append((self.command, urllib.parse.urlsplit(self.path).path, code))
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _authorized(self, repo: str, action: str) -> bool:
        auth = self.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        scope, expires = self.reg.tokens.get(token, (None, 0.0)) if token else (None, 0.0)
        if scope and time.monotonic() > expires:
            self.reg.expired_uses += 1
            scope = None
        if scope:
            _kind, name, actions = scope.split(":", 2)
            if name == repo and action in actions.split(","):
                return True
        actions = "pull" if action == "pull" else "pull,push"
        host = f"http://127.0.0.1:{self.reg.server_address[1]}"
        self._send(
            401,
            b'{"errors":[{"code":"UNAUTHORIZED"}]}',
            {
                "WWW-Authenticate": f'Bearer realm="{host}/token",service="{SERVICE}",scope="repository:{repo}:{actions}"',
            },
        )
        return False

    def _login_ok(self, method: str, form: dict) -> bool:
        if not self.reg.users:
            return True
        if method == "POST":
            return form.get("grant_type") == "refresh_token" and form.get("refresh_token") in self.reg.identity_tokens
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Basic "):
            return False
        user, _, password = base64.b64decode(auth.removeprefix("Basic ")).decode().partition(":")
        return self.reg.users.get(user) == password

    def _handle(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.reg.log.append((method, url.path, self.headers.get("Authorization")))
        body = self._body() if method in ("POST", "PUT") else b""  # read even when refused
        if url.path == "/token" and method in ("GET", "POST"):
            form = dict(urllib.parse.parse_qsl(body.decode())) if method == "POST" else query
            assert form.get("service") == SERVICE
            self.reg.token_requests.append((method, self.headers.get("Authorization"), form))
            if not self._login_ok(method, form):
                return self._send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}')
            token = secrets.token_hex(8)
            self.reg.tokens[token] = (form["scope"], time.monotonic() + self.reg.expires_in)
            self.reg.token_scopes.append(form["scope"])
            answer = {"token": token, "expires_in": self.reg.expires_in}
            return self._send(200, json.dumps(answer).encode(), {"Content-Type": "application/json"})
        if url.path.startswith("/storage/") and method in ("GET", "HEAD"):
            data = self.reg.storage.get(url.path.removeprefix("/storage/"))
            return self._send(404) if data is None else self._send(200, data, head=method == "HEAD")
        match = _ROUTE.match(url.path)
        if not match:
            return self._send(404)
        repo, kind, rest = match["repo"], match["kind"], match["rest"]
        action = "pull" if method in ("GET", "HEAD") else "push"
        if self.reg.auth and not self._authorized(repo, action):
            return
        if kind == "blobs" and method in ("GET", "HEAD"):
            if (repo, rest) not in self.reg.blobs:
                return self._send(404, head=method == "HEAD")
            where = f"{repo}/{rest}"
            self.reg.storage[where] = self.reg.blobs[(repo, rest)]
            return self._send(307, headers={"Location": f"/storage/{where}?signature=abc"})
        if kind == "blobs/uploads" and method == "POST" and rest == "":
            upload = secrets.token_hex(8)
            self.reg.uploads[upload] = repo
            if self.reg.revoke_on_upload:
                self.reg.tokens.clear()
            return self._send(202, headers={"Location": f"/v2/{repo}/blobs/uploads/{upload}?_state=x"})
        if kind == "blobs/uploads" and method == "PUT" and self.reg.uploads.get(rest) == repo:
            data = body
            digest = query.get("digest", "")
            if digest != "sha256:" + hashlib.sha256(data).hexdigest():
                return self._send(400, b'{"errors":[{"code":"DIGEST_INVALID"}]}')
            del self.reg.uploads[rest]
            self.reg.blobs[(repo, digest)] = data
            return self._send(201, headers={"Location": f"/v2/{repo}/blobs/{digest}", "Docker-Content-Digest": digest})
        if kind == "manifests" and method == "PUT":
            data = body
            self.reg.manifests[(repo, rest)] = (self.headers.get("Content-Type"), data)
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            return self._send(201, headers={"Docker-Content-Digest": digest})
        if kind == "manifests" and method in ("GET", "HEAD"):
            if (repo, rest) not in self.reg.manifests:
                return self._send(404, head=method == "HEAD")
            ctype, data = self.reg.manifests[(repo, rest)]
            return self._send(200, data, {"Content-Type": ctype}, head=method == "HEAD")
        self._send(405)

    def do_GET(self):
        self._handle("GET")

    def do_HEAD(self):
        self._handle("HEAD")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")


class TestRegistry(http.server.ThreadingHTTPServer):
    __test__ = False  # not a pytest class

    def __init__(
        self,
        auth: bool = True,
        users: dict[str, str] | None = None,
        identity_tokens: tuple[str, ...] = (),
        expires_in: float = 300,
        revoke_on_upload: bool = False,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.auth = auth
        self.users = users or {}
        self.identity_tokens = identity_tokens
        self.expires_in = expires_in
        self.revoke_on_upload = revoke_on_upload
        self.expired_uses = 0
        self.token_requests: list[tuple[str, str | None, dict]] = []
        self.statuses: list[tuple[str, str, int]] = []  # (method, path, status) of every answer
        self.blobs: dict[tuple[str, str], bytes] = {}
        self.manifests: dict[tuple[str, str], tuple[str, bytes]] = {}
        self.uploads: dict[str, str] = {}
        self.storage: dict[str, bytes] = {}
        self.tokens: dict[str, tuple[str, float]] = {}  # token -> (scope, when it runs out)
        self.token_scopes: list[str] = []
        self.log: list[tuple[str, str, str | None]] = []

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


@contextmanager
def registry(auth: bool = True, **options):
    with running(TestRegistry(auth, **options)) as server:
        yield server
