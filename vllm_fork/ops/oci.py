"""OCI registry remotes for the ops cache: an artifact is the blob `sha256:<its sha256>`.

A remote `oci://<host[:port]>/<repository>` is reached over HTTPS through the OCI
distribution API (`oci+http://`, or VLLM_FORK_OCI_INSECURE=1, for plain-HTTP
registries). Fetching is `GET /v2/<repository>/blobs/sha256:<digest>`, following
redirects (registries send blobs to a CDN or bucket); a 401 with a
`WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge is answered with
the token flow, anonymously unless VLLM_FORK_OCI_USERNAME/VLLM_FORK_OCI_PASSWORD are
set. The token is sent to the registry only, never to the host a redirect points at.
Downloads go through `download.fetch_url`: temp file, sha256 check, rename.

Publishing pushes the blob (monolithic upload: POST, then PUT with `?digest=`), the
empty config blob, and an OCI image manifest tagged with the ops key, so tools like
`oras pull <registry>/<repository>:<key>` get the artifact under its file name.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from vllm_fork.core.errors import ConfigError, DownloadError, ForkError
from vllm_fork.upstream.download import fetch_url

SCHEMES = ("oci://", "oci+http://", "oci+https://")
INSECURE_ENV = "VLLM_FORK_OCI_INSECURE"
USER_ENV, PASSWORD_ENV = "VLLM_FORK_OCI_USERNAME", "VLLM_FORK_OCI_PASSWORD"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.vllm-fork.ops.v1"
LAYER_TYPE = "application/zip"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_DATA = b"{}"
EMPTY_DIGEST = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
TIMEOUT = 60


def is_oci(remote: str) -> bool:
    return remote.startswith(SCHEMES)


@dataclass
class Registry:
    """One `<registry>/<repository>`, with the bearer token of the last challenge it answered."""

    base: str  # scheme://host[:port]
    repository: str
    remote: str
    token: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, remote: str) -> Registry:
        scheme, _, rest = remote.partition("://")
        insecure = scheme == "oci+http" or (scheme == "oci" and os.environ.get(INSECURE_ENV) == "1")
        host, _, repository = rest.partition("/")
        repository = repository.strip("/")
        if scheme not in ("oci", "oci+http", "oci+https") or not host or not repository:
            raise ConfigError(f"bad OCI remote {remote!r}: use oci://<registry host[:port]>/<repository>")
        if not re.fullmatch(
            r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*", repository
        ):
            raise ConfigError(f"bad OCI repository name {repository!r} in {remote!r} (lowercase, digits, . _ - /)")
        return cls(f"{'http' if insecure else 'https'}://{host}", repository, remote)

    def url(self, path: str) -> str:
        return f"{self.base}/v2/{self.repository}/{path}"

    # -- requests, with the bearer-token dance on a 401 --

    def _request(
        self, method: str, url: str, data: bytes | IO[bytes] | None = None, headers: dict | None = None
    ) -> urllib.request.Request:
        req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        if self.token:
            # unredirected: a redirect to a CDN or bucket must not carry the registry's token
            req.add_unredirected_header("Authorization", f"Bearer {self.token}")
        return req

    def open(
        self, method: str, url: str, data: bytes | None = None, headers: dict | None = None, follow: bool = True
    ) -> http.client.HTTPResponse:
        """The response; answers one 401 Bearer challenge. `data` must be bytes (re-sendable) or None."""
        opener = urllib.request.build_opener() if follow else urllib.request.build_opener(_NoRedirect)
        try:
            return opener.open(self._request(method, url, data, headers), timeout=TIMEOUT)
        except urllib.error.HTTPError as exc:
            if exc.code != 401:
                raise
            challenge = exc.headers.get("WWW-Authenticate", "")
            exc.close()
            self.token = self._fetch_token(challenge)
        return opener.open(self._request(method, url, data, headers), timeout=TIMEOUT)

    def _fetch_token(self, challenge: str) -> str:
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() != "bearer":
            raise ForkError(
                f"{self.remote}: the registry asks for {scheme or 'unknown'!r} authentication; "
                "only the Bearer token flow is supported"
            )
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        realm = fields.pop("realm", None)
        if not realm:
            raise ForkError(f"{self.remote}: the registry's Bearer challenge has no realm: {challenge!r}")
        query = urllib.parse.urlencode({k: v for k, v in fields.items() if k in ("service", "scope")})
        req = urllib.request.Request(realm + ("&" if "?" in realm else "?") + query if query else realm)
        user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
        if user and password:
            req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
                body = json.loads(resp.read())
        except (urllib.error.URLError, ValueError) as exc:
            raise DownloadError(f"{self.remote}: could not get a token from {realm}: {exc}") from None
        token = body.get("token") or body.get("access_token")
        if not token:
            raise ForkError(f"{self.remote}: the token service {realm} returned no token")
        return token

    # -- blobs and manifests --

    def has_blob(self, digest: str) -> bool:
        """Whether the registry holds the blob (a redirect counts: it points at the blob's storage)."""
        try:
            with self.open("HEAD", self.url(f"blobs/{digest}"), follow=False):
                return True
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code in (301, 302, 303, 307, 308):
                return True
            if exc.code == 404:
                return False
            raise

    def fetch_blob(self, sha256: str, dest: Path, mismatch_advice: str = "") -> Path:
        digest = f"sha256:{sha256}"
        try:
            present = self.has_blob(digest)
        except urllib.error.URLError as exc:
            raise DownloadError(f"{self.remote}: {exc}") from None
        if not present:
            raise DownloadError(f"{self.remote} has no blob {digest}")
        # The token (if any) is known now; fetch_url streams, verifies sha256 and renames.
        request = self._request("GET", self.url(f"blobs/{digest}"))
        if mismatch_advice:
            return fetch_url(request, dest, sha256, timeout=TIMEOUT, mismatch_advice=mismatch_advice)
        return fetch_url(request, dest, sha256, timeout=TIMEOUT)

    def push_blob(self, path_or_bytes: Path | bytes, digest: str) -> None:
        if self.has_blob(digest):
            return
        with self.open("POST", self.url("blobs/uploads/"), data=b"") as resp:
            location = resp.headers.get("Location")
        if not location:
            raise ForkError(f"{self.remote}: the registry started an upload without a Location")
        location = urllib.parse.urljoin(self.base + "/", location)
        put_url = location + ("&" if "?" in location else "?") + urllib.parse.urlencode({"digest": digest})
        data: bytes | IO[bytes]
        if isinstance(path_or_bytes, bytes):
            data, size = path_or_bytes, len(path_or_bytes)
        else:
            size = path_or_bytes.stat().st_size
            data = open(path_or_bytes, "rb")  # noqa: SIM115 (streamed by urllib, closed below)
        try:
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
            with urllib.request.urlopen(self._request("PUT", put_url, data, headers), timeout=TIMEOUT) as resp:
                if resp.status not in (201, 204):
                    raise ForkError(f"{self.remote}: uploading {digest} answered {resp.status}")
        finally:
            if not isinstance(data, bytes):
                data.close()

    def push_manifest(self, tag: str, manifest: bytes) -> None:
        with self.open(
            "PUT", self.url(f"manifests/{tag}"), data=manifest, headers={"Content-Type": MANIFEST_TYPE}
        ) as resp:
            if resp.status not in (200, 201):
                raise ForkError(f"{self.remote}: storing the manifest {tag} answered {resp.status}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # the 3xx is raised as an HTTPError and read by the caller


def artifact_manifest(filename: str, sha256: str, size: int, key: str) -> bytes:
    """A minimal OCI image manifest with the artifact as its one layer (ORAS's conventions)."""
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": EMPTY_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY_DATA)},
        "layers": [
            {
                "mediaType": LAYER_TYPE,
                "digest": f"sha256:{sha256}",
                "size": size,
                "annotations": {"org.opencontainers.image.title": filename},
            }
        ],
        "annotations": {"dev.vllm-fork.ops-key": key},
    }
    return json.dumps(manifest, indent=2, sort_keys=True).encode()


def fetch(remote: str, filename: str, sha256: str, dest: Path, mismatch_advice: str = "") -> Path:
    """Fetch the artifact (blob `sha256:<sha256>`) from an OCI remote into `dest`, verified."""
    try:
        return Registry.parse(remote).fetch_blob(sha256, dest, mismatch_advice)
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"{remote}: fetching {filename} answered HTTP {exc.code} {exc.reason}") from None


def push(remote: str, key: str, artifact: Path, sha256: str) -> str:
    """Push the artifact as a blob plus a manifest tagged `key`; returns the pullable reference."""
    registry = Registry.parse(remote)
    try:
        registry.push_blob(artifact, f"sha256:{sha256}")
        registry.push_blob(EMPTY_DATA, EMPTY_DIGEST)
        registry.push_manifest(key, artifact_manifest(artifact.name, sha256, artifact.stat().st_size, key))
    except urllib.error.HTTPError as exc:
        raise ForkError(
            f"{remote}: pushing {artifact.name} answered HTTP {exc.code} {exc.reason} "
            f"({exc.url}); check the registry allows pushes to {registry.repository}"
        ) from None
    except urllib.error.URLError as exc:
        raise DownloadError(f"{remote}: {exc.reason}") from None
    host = registry.base.split("://", 1)[1]
    return f"{host}/{registry.repository}:{key}"
