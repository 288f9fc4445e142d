"""Answering a registry's 401 as Docker does: Basic and Bearer challenges, tokens that expire.

A registry that answers `WWW-Authenticate: Basic` gets the login (docker_config.py) on
every request from then on. One that answers `Bearer realm=...,service=...,scope=...`
gets a token from its token service (GET with the login as Basic authentication, or
anonymously; POST `grant_type=refresh_token` for an identity token), sent as
`Authorization: Bearer`. A token is fetched again before its `expires_in` runs out and
whenever the registry answers 401 again (a new scope, or a token it no longer takes, also
in the middle of an upload). The login is sent only to the registry and its token
service, never to a host a redirect points at; no message holds a secret.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from vllm_fork.core.docker_config import PASSWORD_ENV, USER_ENV, Credentials, find_credentials
from vllm_fork.core.errors import DownloadError, ForkError
from vllm_fork.core.image_ref import Endpoint

TIMEOUT = 60
#: A token's lifetime when the token service does not say (the distribution spec's default).
DEFAULT_EXPIRES_S = 60
#: The share of a token's lifetime after which it is fetched again: a request sent just
#: before it runs out must not reach the registry just after.
REFRESH_AT = 0.9
CLIENT_ID = "vllm-fork"
_CHALLENGE = re.compile(r'([A-Za-z][\w-]*)(?:\s+|$)((?:[\w-]+\s*=\s*(?:"(?:[^"\\]|\\.)*"|[^,\s]*)\s*(?:,\s*)?)*)')
_PARAM = re.compile(r'([\w-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))')


@dataclass(frozen=True)
class Challenge:
    scheme: str  # lowercase: basic, bearer, ...
    params: dict[str, str]


def parse_challenges(values: list[str]) -> list[Challenge]:
    """The challenges of the WWW-Authenticate headers (several may share one header)."""
    found = []
    for value in values:
        for match in _CHALLENGE.finditer(value):
            params = {k.lower(): (q if q is not None and q != "" else bare) for k, q, bare in _PARAM.findall(match[2])}
            found.append(Challenge(match[1].lower(), params))
    return found


def login_hint(endpoint: Endpoint) -> str:
    target = "" if endpoint.is_docker_hub else f" {endpoint.host}"
    return f"run `docker login{target}`, or set {USER_ENV} and {PASSWORD_ENV}"


@dataclass
class Authorizer:
    """The Authorization a registry takes, learnt from its challenges and kept fresh."""

    endpoint: Endpoint
    context_for: Callable[[str], ssl.SSLContext]  # host[:port] -> the TLS context for it
    scheme: str | None = None  # "basic" or "bearer", once the registry has asked
    token: str | None = field(default=None, repr=False)
    refresh_at: float = 0.0
    challenge: Challenge | None = None
    _credentials: Credentials | None = field(default=None, repr=False)
    _looked_up: bool = False

    def credentials(self) -> Credentials | None:
        if not self._looked_up:
            self._credentials = find_credentials(self.endpoint.auth_key)
            self._looked_up = True
        return self._credentials

    def header(self) -> str | None:
        """The Authorization header for the next request (a token near its end is renewed first)."""
        if self.scheme == "basic":
            creds = self.credentials()
            assert creds is not None, "answer() takes Basic only with a login"
            return "Basic " + base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
        if self.scheme == "bearer" and self.challenge is not None:
            if self.token is None or time.monotonic() >= self.refresh_at:
                self._fetch_token(self.challenge)
            return f"Bearer {self.token}"
        return None

    def answer(self, values: list[str]) -> None:
        """Take a 401's challenges: the next header() answers them."""
        challenges = parse_challenges(values)
        by_scheme = {c.scheme: c for c in challenges}
        if "bearer" in by_scheme:
            self.scheme, self.challenge = "bearer", by_scheme["bearer"]
            self._fetch_token(self.challenge)
        elif "basic" in by_scheme:
            creds = self.credentials()
            if creds is None or not creds.username:
                raise ForkError(
                    f"{self.endpoint.host} asks for a user name and password and none was found: "
                    f"{login_hint(self.endpoint)}"
                )
            self.scheme = "basic"
        else:
            asked = ", ".join(sorted(by_scheme)) or "no known scheme"
            raise ForkError(
                f"{self.endpoint.host} answered 401 asking for {asked}; only Basic and Bearer authentication "
                "are supported"
            )

    def refused(self, what: str) -> ForkError:
        """The error for a 401 that answering the challenge did not lift."""
        creds = self.credentials()
        if creds is None:
            return ForkError(f"{self.endpoint.host} refused {what} without a login: {login_hint(self.endpoint)}")
        return ForkError(
            f"{self.endpoint.host} refused {what} with the login from {creds.source}: check the user name and "
            f"password, and that this user may push to the repository; to use another login, {login_hint(self.endpoint)}"
        )

    def _fetch_token(self, challenge: Challenge) -> None:
        realm = challenge.params.get("realm")
        if not realm:
            raise ForkError(f"{self.endpoint.host}: its Bearer challenge names no token service (realm)")
        query: list[tuple[str, str]] = []
        if challenge.params.get("service"):
            query.append(("service", challenge.params["service"]))
        query += [("scope", s) for s in challenge.params.get("scope", "").split() if s]
        creds = self.credentials()
        headers = {}
        if creds and creds.identity_token:
            form = [*query, ("grant_type", "refresh_token"), ("refresh_token", creds.identity_token)]
            request = urllib.request.Request(
                realm,
                data=urllib.parse.urlencode([*form, ("client_id", CLIENT_ID)]).encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
                method="POST",
            )
        else:
            if creds:
                query.append(("account", creds.username))
                basic = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
                headers["Authorization"] = f"Basic {basic}"
            url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query) if query else realm
            request = urllib.request.Request(url, headers=headers)
        host = urllib.parse.urlsplit(realm).netloc
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT, context=self.context_for(host)) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code in (401, 403):
                who = f"the login from {creds.source}" if creds else "no login"
                raise ForkError(
                    f"the token service {realm} of {self.endpoint.host} refused {who} (HTTP {exc.code}): "
                    f"{login_hint(self.endpoint)}"
                ) from None
            raise DownloadError(f"the token service {realm} of {self.endpoint.host} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise DownloadError(f"could not get a token from {realm} for {self.endpoint.host}: {exc}") from None
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not token:
            raise ForkError(f"the token service {realm} of {self.endpoint.host} returned no token")
        try:
            lifetime = float(body.get("expires_in") or DEFAULT_EXPIRES_S)
        except (TypeError, ValueError):
            lifetime = DEFAULT_EXPIRES_S
        self.token = str(token)
        self.refresh_at = started + lifetime * REFRESH_AT
