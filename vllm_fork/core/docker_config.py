"""The logins and registry CAs the Docker CLI keeps, looked up as it looks them up.

Credentials for a registry: `credHelpers[<key>]`, else `credsStore` (each run as
`docker-credential-<name> get`, the key on stdin), else `auths[<key>].auth` (base64
`user:password`) or `auths[<key>].identitytoken` in `$DOCKER_CONFIG/config.json`
(default `~/.docker/config.json`); then VLLM_FORK_OCI_USERNAME/VLLM_FORK_OCI_PASSWORD.
`auths` keys written as URLs (`https://host/v1/`) match their host, and Docker Hub's
names one another, as in the CLI.

Not the Docker SDK's `docker.auth`: importing it loads `requests` and the SDK on every
`invoke` start, for what is these few documented rules.

CAs for a registry `host[:port]`: every `*.crt` in `certs.d/<host[:port]>/` under the
Docker config directory and under /etc/docker/certs.d, with a `*.cert`/`*.key` pair there
as the client certificate, as the Docker engine reads them; the system's CAs (and
SSL_CERT_FILE) stay trusted.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core.errors import ConfigError, ForkError
from vllm_fork.core.image_ref import DOCKER_HUB_ALIASES, DOCKER_HUB_API

CONFIG_ENV = "DOCKER_CONFIG"
USER_ENV, PASSWORD_ENV = "VLLM_FORK_OCI_USERNAME", "VLLM_FORK_OCI_PASSWORD"
SYSTEM_CERTS_D = Path("/etc/docker/certs.d")
HELPER_PREFIX = "docker-credential-"
HELPER_TIMEOUT_S = 60
#: What credential helpers print when they hold nothing for a registry (docker-credential-helpers).
NOT_FOUND = "credentials not found in native keychain"
#: The user name a helper answers with when its secret is an identity (refresh) token.
TOKEN_USERNAME = "<token>"


@dataclass(frozen=True)
class Credentials:
    """A login for one registry, and where it was found (named in errors; never the secret)."""

    source: str
    username: str = ""
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)


def config_dir() -> Path:
    env = os.environ.get(CONFIG_ENV)
    return Path(env) if env else Path.home() / ".docker"


def load_config() -> tuple[dict, Path]:
    """config.json's contents ({} when absent) and its path."""
    path = config_dir() / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, path
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the Docker config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"cannot read the Docker config {path}: not a JSON object")
    return data, path


def _host_of(key: str) -> str:
    """An `auths` key's host, as the CLI matches them (`https://host/v1/` -> `host`; Docker Hub's names alike)."""
    host = key.removeprefix("https://").removeprefix("http://").split("/", 1)[0]
    return DOCKER_HUB_API if host.lower() in DOCKER_HUB_ALIASES else host


def find_credentials(auth_key: str) -> Credentials | None:
    """The login for the registry filed under `auth_key` (a host, or Docker Hub's URL)."""
    config, path = load_config()
    helper = (config.get("credHelpers") or {}).get(auth_key) or config.get("credsStore")
    if helper:
        where = "credHelpers" if (config.get("credHelpers") or {}).get(auth_key) else "credsStore"
        found = run_helper(helper, auth_key, f"{path} {where}")
        if found:
            return found
    auths = config.get("auths") or {}
    entry = auths.get(auth_key)
    if entry is None:
        entry = next((v for k, v in auths.items() if _host_of(k) == _host_of(auth_key)), None)
    if isinstance(entry, dict):
        found = _from_auths_entry(entry, f"{path} auths[{auth_key!r}]")
        if found:
            return found
    user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if user and password:
        return Credentials(f"{USER_ENV}/{PASSWORD_ENV}", user, password)
    return None


def _from_auths_entry(entry: dict, source: str) -> Credentials | None:
    if entry.get("identitytoken"):
        return Credentials(source, identity_token=str(entry["identitytoken"]))
    if not entry.get("auth"):
        return None  # an empty entry: `docker login` kept the secret in a credential store
    try:
        user, sep, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, TypeError):
        sep = ""
    if not sep:
        raise ConfigError(f"{source}: `auth` is not base64 of `user:password`; run `docker login` again")
    return Credentials(source, user, password)


def run_helper(name: str, auth_key: str, source: str) -> Credentials | None:
    """`docker-credential-<name> get`: the login it holds for `auth_key`, or None."""
    program = HELPER_PREFIX + name
    try:
        proc = subprocess.run(
            [program, "get"], input=auth_key.encode(), capture_output=True, timeout=HELPER_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise ForkError(
            f"{source} names the credential helper {name!r}, but {program} is not on PATH; "
            f"install it, or remove it from the config"
        ) from None
    except subprocess.TimeoutExpired:
        raise ForkError(f"{program} get (from {source}) gave no answer in {HELPER_TIMEOUT_S} s") from None
    out = proc.stdout.decode(errors="replace").strip()
    if proc.returncode != 0:
        if NOT_FOUND in out or NOT_FOUND in proc.stderr.decode(errors="replace"):
            return None
        # The helper's own words: they never hold the secret it failed to give.
        detail = (out or proc.stderr.decode(errors="replace").strip())[-500:]
        raise ForkError(f"{program} get (from {source}) failed with status {proc.returncode}: {detail}")
    try:
        answer = json.loads(out)
        user, secret = str(answer.get("Username") or ""), str(answer.get("Secret") or "")
    except (ValueError, AttributeError):
        raise ForkError(f"{program} get (from {source}) did not answer JSON with Username and Secret") from None
    if not secret:
        return None
    if user == TOKEN_USERNAME:
        return Credentials(f"{program} ({source})", identity_token=secret)
    return Credentials(f"{program} ({source})", user, secret)


def certs_dirs(host: str) -> list[Path]:
    """The `certs.d/<host>` directories that exist for `host[:port]`, the user's first."""
    candidates = [config_dir() / "certs.d" / host, SYSTEM_CERTS_D / host]
    return [d for d in candidates if d.is_dir()]


def ssl_context(host: str) -> ssl.SSLContext:
    """The system's trust plus the registry's certs.d CAs and client certificate."""
    context = ssl.create_default_context()
    for directory in certs_dirs(host):
        for ca in sorted(directory.glob("*.crt")):
            try:
                context.load_verify_locations(cafile=str(ca))
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"cannot load the registry CA {ca}: {exc}") from None
        for cert in sorted(directory.glob("*.cert")):
            key = cert.with_suffix(".key")
            if not key.is_file():
                raise ConfigError(f"{cert} has no {key.name} beside it (the client certificate's key)")
            try:
                context.load_cert_chain(str(cert), str(key))
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"cannot load the client certificate {cert}: {exc}") from None
    return context
