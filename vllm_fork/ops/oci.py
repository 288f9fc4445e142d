"""OCI registry remotes for the ops cache, and the registry client `invoke docker --push` uses.

An artifact is the blob `sha256:<its sha256>` in a remote `oci://<host[:port]>/<repository>`,
reached through the OCI distribution API (core/image_ref.py says over which scheme).
Fetching is `GET /v2/<repository>/blobs/sha256:<digest>`, following redirects
(registries send blobs to a CDN or bucket). A 401 anywhere is answered as Docker answers
it (core/registry_auth.py: Basic or Bearer, with the login `docker login` stored, a
credential helper, or VLLM_FORK_OCI_USERNAME/VLLM_FORK_OCI_PASSWORD) and the request sent
again, an upload's body included; the login and token go to the registry only, never to
the host a redirect points at. TLS trusts the registry's `certs.d` CAs. Downloads go
through `download.fetch_url`: temp file, sha256 check, rename.

Publishing pushes the blob (monolithic upload: POST, then PUT with `?digest=`), the
empty config blob, and an OCI image manifest tagged with the ops key, so tools like
`oras pull <registry>/<repository>:<key>` get the artifact under its file name.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core import log
from vllm_fork.core.docker_config import config_dir, ssl_context
from vllm_fork.core.errors import DownloadError, ForkError
from vllm_fork.core.image_ref import Endpoint, ImageRef, parse_remote
from vllm_fork.core.registry_auth import Authorizer
from vllm_fork.upstream.download import fetch_url

SCHEMES = ("oci://", "oci+http://", "oci+https://")
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
    """One `<registry>/<repository>`: its scheme once known, and how it wants to be authorized."""

    endpoint: Endpoint
    repository: str
    remote: str  # how messages name it
    _scheme: str | None = field(default=None, repr=False)
    _contexts: dict[str, ssl.SSLContext] = field(default_factory=dict, repr=False)
    auth: Authorizer = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.auth = Authorizer(self.endpoint, self.context_for)
        if self.endpoint.scheme != "auto":
            self._scheme = self.endpoint.scheme

    @classmethod
    def parse(cls, remote: str) -> Registry:
        endpoint, repository = parse_remote(remote)
        return cls(endpoint, repository, remote)

    @classmethod
    def of_image(cls, ref: ImageRef) -> Registry:
        return cls(ref.endpoint, ref.repository, f"{ref.host}/{ref.repository}")

    def context_for(self, host: str) -> ssl.SSLContext:
        if host not in self._contexts:
            self._contexts[host] = ssl_context(host)
        return self._contexts[host]

    @property
    def base(self) -> str:
        """scheme://host[:port]; a loopback registry is asked once whether it speaks TLS."""
        if self._scheme is None:
            self._scheme = self._probe_scheme()
        return f"{self._scheme}://{self.endpoint.host}"

    def _probe_scheme(self) -> str:
        try:
            with self._send(self._opener(True), urllib.request.Request(f"https://{self.endpoint.host}/v2/")):
                return "https"
        except urllib.error.HTTPError as exc:
            exc.close()
            return "https"  # it answered over TLS (401 or otherwise)
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLError) and "ALERT" in (reason.reason or ""):
                return "https"  # a TLS registry refusing the handshake (say, no client certificate)
            not_tls = isinstance(reason, ssl.SSLError | ConnectionResetError)
            if not_tls and not isinstance(reason, ssl.SSLCertVerificationError):
                return "http"  # a plain-HTTP registry: the TLS handshake met HTTP (or a closed connection)
            raise

    @staticmethod
    def _send(opener: urllib.request.OpenerDirector, request: urllib.request.Request) -> http.client.HTTPResponse:
        """The response; a TLS or connection error met after the handshake is a URLError too."""
        try:
            return opener.open(request, timeout=TIMEOUT)
        except urllib.error.URLError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            raise urllib.error.URLError(exc) from None

    def url(self, path: str) -> str:
        return f"{self.base}/v2/{self.repository}/{path}"

    def _opener(self, follow: bool) -> urllib.request.OpenerDirector:
        handlers: list[urllib.request.BaseHandler] = [
            urllib.request.HTTPSHandler(context=self.context_for(self.endpoint.host))
        ]
        if not follow:
            handlers.append(_NoRedirect())
        return urllib.request.build_opener(*handlers)

    # -- requests, answering a 401 once per request --

    def _request(
        self, method: str, url: str, data: bytes | None = None, headers: dict | None = None
    ) -> urllib.request.Request:
        req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        authorization = self.auth.header()
        if authorization:
            # unredirected: a redirect to a CDN or bucket must not carry the registry's login or token
            req.add_unredirected_header("Authorization", authorization)
        return req

    def open(
        self,
        method: str,
        url: str,
        data: bytes | Path | None = None,
        headers: dict | None = None,
        follow: bool = True,
    ) -> http.client.HTTPResponse:
        """The response. A 401 is answered and the request sent again (a file body from its start)."""
        opener = self._opener(follow)
        headers = dict(headers or {})
        if isinstance(data, Path):
            headers.setdefault("Content-Length", str(data.stat().st_size))
        for attempt in (1, 2):
            body = UploadBody(data) if isinstance(data, Path) else data
            try:
                return self._send(opener, self._request(method, url, body, headers))  # type: ignore[arg-type]
            except urllib.error.HTTPError as exc:
                if exc.code != 401:
                    raise
                challenges = exc.headers.get_all("WWW-Authenticate") or []
                exc.close()
                if attempt == 2:
                    raise self.auth.refused(f"{method} {urllib.parse.urlsplit(url).path}") from None
                self.auth.answer(challenges)
            finally:
                if isinstance(data, Path):
                    body.close()  # type: ignore[union-attr]
        raise AssertionError("unreachable: the second 401 raised above")

    def describe(self, exc: urllib.error.URLError) -> str:
        """A network error, with what to do about an untrusted or a missing certificate."""
        certs_d = config_dir() / "certs.d" / self.endpoint.host
        if isinstance(exc.reason, ssl.SSLCertVerificationError):
            return f"{exc.reason.verify_message or exc.reason}; if the registry's CA is private, put it in {certs_d}/ca.crt"
        if isinstance(exc.reason, ssl.SSLError) and "ALERT" in (exc.reason.reason or ""):
            return (
                f"the registry refused the TLS handshake ({exc.reason.reason}); if it wants a client "
                f"certificate, put it in {certs_d}/client.cert and its key in {certs_d}/client.key"
            )
        return str(exc.reason)

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
            raise DownloadError(f"{self.remote}: {self.describe(exc)}") from None
        if not present:
            raise DownloadError(f"{self.remote} has no blob {digest}")
        # The authorization is fresh now; fetch_url streams, verifies sha256 and renames.
        request = self._request("GET", self.url(f"blobs/{digest}"))
        context = self.context_for(self.endpoint.host)
        if mismatch_advice:
            return fetch_url(request, dest, sha256, timeout=TIMEOUT, mismatch_advice=mismatch_advice, context=context)
        return fetch_url(request, dest, sha256, timeout=TIMEOUT, context=context)

    def push_blob(self, path_or_bytes: Path | bytes, digest: str) -> None:
        if self.has_blob(digest):
            return
        with self.open("POST", self.url("blobs/uploads/"), data=b"") as resp:
            location = resp.headers.get("Location")
        if not location:
            raise ForkError(f"{self.remote}: the registry started an upload without a Location")
        location = urllib.parse.urljoin(self.base + "/", location)
        put_url = location + ("&" if "?" in location else "?") + urllib.parse.urlencode({"digest": digest})
        headers = {"Content-Type": "application/octet-stream"}
        with self.open("PUT", put_url, path_or_bytes, headers) as resp:
            if resp.status not in (201, 204):
                raise ForkError(f"{self.remote}: uploading {digest} answered {resp.status}")

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
        registry = Registry.parse(remote)
        return registry.fetch_blob(sha256, dest, mismatch_advice)
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
        raise DownloadError(f"{remote}: {registry.describe(exc)}") from None
    return f"{registry.endpoint.host}/{registry.repository}:{key}"


class UploadBody:
    """A file sent as a request body (http.client reads it in blocks), saying how far it is
    every 10 %: an artifact or a layer upload takes a while."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("rb")
        size = path.stat().st_size
        self._progress = log.Progress(f"uploading {path.name}", size, unit="MiB", scale=1 << 20)

    def read(self, size: int = -1) -> bytes:
        chunk = self._file.read(size)
        self._progress.advance(len(chunk))
        return chunk

    def close(self) -> None:
        self._file.close()
