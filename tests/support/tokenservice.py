"""A token service for the distribution registry's token auth: real JWTs, signed with openssl.

It answers `GET /token?service=...&scope=...` as Docker's token services do: the login as
Basic authentication (checked against `users`; anonymous requests are refused), a JSON Web
Token (RS256, its certificate in the `x5c` header, which the registry checks against its
`rootcertbundle`) granting the scopes asked for, and `expires_in`. Every request is kept
in `requests` (method, Authorization, query) for the tests to read.
"""

from __future__ import annotations

import base64
import http.server
import json
import secrets
import subprocess
import time
import urllib.parse
from contextlib import contextmanager
from pathlib import Path

from support.httpserver import running

SERVICE, ISSUER = "vllm-fork-test-registry", "vllm-fork-test-issuer"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenService(http.server.ThreadingHTTPServer):
    def __init__(self, directory: Path, users: dict[str, str], expires_in: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.users, self.expires_in = users, expires_in
        self.requests: list[tuple[str, str | None, dict]] = []
        self.key, self.cert = directory / "token.key", directory / "token.crt"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={ISSUER}",
             "-keyout", str(self.key), "-out", str(self.cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        der = subprocess.run(
            ["openssl", "x509", "-in", str(self.cert), "-outform", "DER"], check=True, capture_output=True
        ).stdout
        self.x5c = base64.b64encode(der).decode()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/token"

    def registry_config(self) -> dict[str, str]:
        """The registry's `auth: token:` settings for this service."""
        return {"realm": self.realm, "service": SERVICE, "issuer": ISSUER, "rootcertbundle": str(self.cert)}

    def sign(self, claims: dict) -> str:
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        message = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.key)],
            input=message.encode(),
            check=True,
            capture_output=True,
        ).stdout
        return f"{message}.{_b64url(signature)}"


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        service: TokenService = self.server  # type: ignore[assignment]
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        auth = self.headers.get("Authorization")
        service.requests.append(("GET", auth, query))
        user = None
        if auth and auth.startswith("Basic "):
            name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            user = name if service.users.get(name) == password else None
        if user is None or query.get("service") != [SERVICE]:
            return self._answer(401, {"errors": [{"code": "UNAUTHORIZED"}]})
        access = []
        for scope in query.get("scope", []):
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": user, "aud": SERVICE, "exp": now + service.expires_in, "nbf": now - 1}
        claims |= {"iat": now, "jti": secrets.token_hex(8), "access": access}
        self._answer(200, {"token": service.sign(claims), "expires_in": service.expires_in})

    def _answer(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def token_service(directory: Path, users: dict[str, str], expires_in: int = 300):
    with running(TokenService(directory, users, expires_in)) as server:
        yield server
