"""HTTP(S) GETs as pip makes them: retries by status, pip's CA bundle and proxy, netrc.

Built on requests and urllib3's Retry (what pip itself vendors, and what vLLM's own
dependencies install): status-aware retries with backoff and `Retry-After`, netrc,
proxies and CA bundles come from a well-kept client, not from a hand-written loop.

- Retries: no answer (connection refused or reset, timeout) and 429/5xx answers are
  tried again, `attempts` times in all, with backoff or after the server's `Retry-After`;
  any other 4xx fails at once. A certificate that does not verify is not tried again.
- Credentials: from the URL (`https://user:password@host/`, as pip takes them), else
  from ~/.netrc (or the file $NETRC names) for the host.
- CA bundle: pip's `cert` (PIP_CERT or pip's config), else REQUESTS_CA_BUNDLE,
  CURL_CA_BUNDLE or SSL_CERT_FILE, else certifi's.
- Proxy: pip's `proxy` (PIP_PROXY or pip's config), else https_proxy / http_proxy /
  no_proxy from the environment.

Messages name URLs through `redact_url`: a password in a URL is never shown.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Self

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import ConnectionPool
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

from vllm_fork.core import log
from vllm_fork.core.errors import DownloadError
from vllm_fork.core.urls import redact_url
from vllm_fork.upstream import pipconfig

ATTEMPTS = 3
BACKOFF = 0.5  # seconds before the second retry, doubling after (the first is at once)
MAX_RETRY_AFTER = 60  # seconds: a server asking for an hour would look like a hang
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
TIMEOUT = 60


class HTTPFailure(DownloadError):
    """A GET got no usable answer: `status` is the server's error status, or None when none came
    (connection, TLS, timeout). The message is the reason, without the URL (callers name it)."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status


class _Retry(Retry):
    """urllib3's Retry, with `Retry-After` capped at MAX_RETRY_AFTER and each retry said in one line."""

    def parse_retry_after(self, retry_after: str) -> float:
        return min(super().parse_retry_after(retry_after), MAX_RETRY_AFTER)

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        new = super().increment(method, url, response, error, _pool, _stacktrace)
        host = _pool.host if _pool is not None else "the server"
        why = f"answered {response.status}" if response is not None and response.status else redact_url(str(error))
        log.info(f"  {host}: {why}; trying again")
        return new


class _Session(requests.Session):
    """requests' Session, sending the `once` headers on the first request only, never after a
    redirect (a registry's token must not reach the storage its blob redirect points at)."""

    def __init__(self, once: frozenset[str]) -> None:
        super().__init__()
        self.once = once

    def rebuild_auth(self, prepared_request: requests.PreparedRequest, response: requests.Response) -> None:
        for name in self.once:
            prepared_request.headers.pop(name, None)
        super().rebuild_auth(prepared_request, response)


def ca_bundle() -> str | bool:
    """The CA bundle HTTPS servers are verified against (True: certifi's, requests' default)."""
    for found in (
        pipconfig.value("cert"),
        os.environ.get("REQUESTS_CA_BUNDLE"),
        os.environ.get("CURL_CA_BUNDLE"),
        os.environ.get("SSL_CERT_FILE"),
    ):
        if found:
            return found
    return True


def proxy() -> str | None:
    """pip's proxy for every scheme, or None (then requests takes the standard variables)."""
    return pipconfig.value("proxy")


class _TrustAdapter(HTTPAdapter):
    """An adapter whose connections trust what `context` trusts (a registry's `certs.d` CA)."""

    def __init__(self, context: ssl.SSLContext, **kwargs: Any) -> None:
        self._context = context
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["ssl_context"] = self._context
        super().init_poolmanager(*args, **kwargs)


class Client:
    """GETs with pip's settings, read once: `attempts` tries for each, `once` headers never redirected."""

    def __init__(
        self,
        attempts: int = ATTEMPTS,
        timeout: float = TIMEOUT,
        once: Iterable[str] = (),
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.attempts, self.timeout = attempts, timeout
        self.verify = ca_bundle()
        through = proxy()
        self.proxies = {"http": through, "https": through} if through else None
        retry = _Retry(
            total=attempts - 1,
            other=0,  # e.g. a certificate that did not verify: it will not the next time either
            backoff_factor=BACKOFF,
            status_forcelist=RETRY_STATUSES,
            allowed_methods=frozenset({"GET", "HEAD"}),
            raise_on_status=False,  # the last answer comes back, and says what failed
        )
        self.session = _Session(frozenset(once))
        adapter = _TrustAdapter(context, max_retries=retry) if context else HTTPAdapter(max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> requests.Response:
        """The streamed answer to a GET of `url` (close it; its body is `raw`). Raises HTTPFailure
        for an error status or when no answer came, after the retries those get."""
        try:
            resp = self.session.get(
                url,
                headers=dict(headers or {}),
                stream=True,
                timeout=self.timeout,
                verify=self.verify,
                proxies=self.proxies,
            )
        except requests.exceptions.SSLError as exc:
            raise HTTPFailure(
                f"the server's certificate did not verify ({_cause(exc)}). If your own CA signs it, point pip's "
                "`cert` at its bundle (PIP_CERT, or `pip config set global.cert FILE`)"
            ) from None
        except requests.exceptions.ProxyError as exc:
            shown = redact_url(self.proxies["https"] if self.proxies else "from the environment")
            raise HTTPFailure(f"the proxy ({shown}) failed: {_cause(exc)}") from None
        except requests.RequestException as exc:
            raise HTTPFailure(f"network error after {self.attempts} attempts: {_cause(exc)}") from None
        if resp.status_code >= 400:
            resp.close()
            raise HTTPFailure(_status_reason(resp, self.attempts), resp.status_code)
        return resp


def _cause(exc: requests.RequestException) -> str:
    """What went wrong, without requests' wrapping (`Max retries exceeded ... Caused by`)."""
    inner = exc.args[0] if exc.args else exc
    if isinstance(inner, urllib3.exceptions.MaxRetryError) and inner.reason is not None:
        inner = inner.reason
    return redact_url(str(inner))


def _status_reason(resp: requests.Response, attempts: int) -> str:
    said = f"the server answered {resp.status_code} {resp.reason or ''}".rstrip()
    if resp.status_code in RETRY_STATUSES:
        return f"{said}, {attempts} times"
    if resp.status_code in (401, 403):
        if resp.request.headers.get("Authorization"):
            return f"{said}: the credentials sent (from the URL, or ~/.netrc) were refused"
        return (
            f"{said}: it wants credentials; put them in the URL (https://user:password@host/...) "
            "or in ~/.netrc (or the file $NETRC names)"
        )
    return said
