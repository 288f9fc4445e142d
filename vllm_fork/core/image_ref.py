"""Image references and `oci://` remotes, read the way the Docker CLI reads them.

`[HOST[:PORT]/]NAME[:TAG][@sha256:HEX]`: a first component with no `.` or `:` (and not
`localhost`) is a Docker Hub repository (`library/` before a one-word name). Docker Hub's
domain aliases (`docker.io`, `index.docker.io`, `registry-1.docker.io`) all reach its API
host, and its credentials are filed under `https://index.docker.io/v1/`, as `docker login`
files them. A digest names the image whatever the tag says.

Which scheme a registry is reached over: `oci+http://` and `oci+https://` say it; else
VLLM_FORK_OCI_INSECURE=1 means plain HTTP; else a loopback registry is tried over HTTPS
and, if it does not answer TLS, over HTTP (Docker's rule for loopback registries); else
HTTPS.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from vllm_fork.core.errors import ConfigError
from vllm_fork.core.urls import redact_url

INSECURE_ENV = "VLLM_FORK_OCI_INSECURE"
DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_AUTH_KEY = "https://index.docker.io/v1/"
LOOPBACK = re.compile(r"^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
TAG = re.compile(r"[\w][\w.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
OCI_SCHEMES = {"oci": None, "oci+http": "http", "oci+https": "https"}


@dataclass(frozen=True)
class Endpoint:
    """A registry: the host its API answers on and how to reach it."""

    host: str  # host[:port]; Docker Hub's aliases are its API host
    scheme: str  # "https", "http", or "auto" (HTTPS, else HTTP: loopback only)

    @classmethod
    def of(cls, host: str, scheme: str | None = None) -> Endpoint:
        """The endpoint for `host`; `scheme` forces one (an `oci+http(s)://` remote)."""
        if host.lower() in DOCKER_HUB_ALIASES:
            host = DOCKER_HUB_API
        if scheme is None and os.environ.get(INSECURE_ENV) == "1":
            scheme = "http"
        return cls(host, scheme or ("auto" if LOOPBACK.match(host) else "https"))

    @property
    def is_docker_hub(self) -> bool:
        return self.host == DOCKER_HUB_API

    @property
    def auth_key(self) -> str:
        """The key `docker login` files this registry's credentials under."""
        return DOCKER_HUB_AUTH_KEY if self.is_docker_hub else self.host


@dataclass(frozen=True)
class ImageRef:
    """`HOST/REPOSITORY[:TAG][@DIGEST]`, with Docker Hub's defaults filled in."""

    endpoint: Endpoint
    repository: str
    tag: str | None
    digest: str | None

    @property
    def host(self) -> str:
        return self.endpoint.host

    @property
    def reference(self) -> str:
        """What the registry's manifest API is asked for: the digest if given, else the tag."""
        return self.digest or self.tag or "latest"

    @classmethod
    def parse(cls, ref: str) -> ImageRef:
        name, _, digest = ref.partition("@")
        last = name.rsplit("/", 1)[-1]
        tag = None
        if ":" in last:
            name, _, tag = name.rpartition(":")
        first, _, rest = name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            host, repository = first, rest
        else:
            host, repository = DOCKER_HUB_API, name
        endpoint = Endpoint.of(host)
        if endpoint.is_docker_hub and "/" not in repository:
            repository = f"library/{repository}"
        if not REPOSITORY.fullmatch(repository):
            raise ConfigError(f"{ref!r}: bad repository name {repository!r} (lowercase letters, digits, . _ - /)")
        if tag is not None and not TAG.fullmatch(tag):
            raise ConfigError(f"{ref!r}: bad tag {tag!r} (letters, digits, _ . -; at most 128)")
        if digest and not DIGEST.fullmatch(digest):
            raise ConfigError(f"{ref!r}: bad digest {digest!r} (sha256:<64 lowercase hex digits>)")
        return cls(endpoint, repository, tag if tag or digest else "latest", digest or None)

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.host}/{self.repository}{tag}{digest}"


def parse_remote(remote: str) -> tuple[Endpoint, str]:
    """`oci[+http|+https]://HOST[:PORT]/REPOSITORY` -> (the registry, the repository)."""
    scheme, sep, rest = remote.partition("://")
    host, _, repository = rest.partition("/")
    repository = repository.strip("/")
    shown = redact_url(remote)
    if "@" in host:
        registry = host.rpartition("@")[2]
        raise ConfigError(
            f"{shown}: an OCI remote carries no login; log in as Docker does (`docker login {registry}`), "
            "or set VLLM_FORK_OCI_USERNAME and VLLM_FORK_OCI_PASSWORD"
        )
    if not sep or scheme not in OCI_SCHEMES or not host or not repository:
        raise ConfigError(f"bad OCI remote {shown!r}: use oci://<registry host[:port]>/<repository>")
    if not REPOSITORY.fullmatch(repository):
        raise ConfigError(f"bad OCI repository name {repository!r} in {shown!r} (lowercase, digits, . _ - /)")
    endpoint = Endpoint.of(host, OCI_SCHEMES[scheme])
    if endpoint.is_docker_hub and "/" not in repository:
        repository = f"library/{repository}"
    return endpoint, repository
