"""Finding a release file on the package index pip is configured to use.

The fork never names a registry host: it asks pip for its index URLs (config
files, PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, pip's own default), then reads each
index's simple API (PEP 691 JSON, or PEP 503 HTML for plain file indexes). An
index URL's credentials go with it, as pip sends them, to the index and to the
files it lists on the same host; messages show them masked.
"""

from __future__ import annotations

import html.parser
import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass

from vllm_fork.core.errors import DownloadError
from vllm_fork.core.urls import redact_url
from vllm_fork.upstream import pipconfig
from vllm_fork.upstream.httpclient import Client, HTTPFailure

_JSON = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None


def _pip_default_index() -> str:
    """pip's built-in default index, asked of pip in a subprocess.

    Importing pip here would switch off setuptools' distutils shim for the rest of
    the process (it defers to stdlib distutils once `pip` is imported), which breaks
    later imports of setuptools, e.g. by vLLM or torch in the same process.
    """
    return subprocess.run(
        [sys.executable, "-c", "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def index_urls() -> list[str]:
    """The index URLs pip would use, primary first."""
    primary = pipconfig.values("index-url") or [_pip_default_index()]
    urls = primary + pipconfig.values("extra-index-url")
    return list(dict.fromkeys(u.rstrip("/") + "/" for u in urls))


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def _read(url: str, timeout: float) -> tuple[bytes, str]:
    if url.startswith("file:"):
        path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        with open(path, "rb") as fh:
            return fh.read(), "text/html"
    with Client(timeout=timeout).get(url, {"Accept": f"{_JSON}, text/html;q=0.1"}) as resp:
        return resp.content, resp.headers.get("Content-Type", "")


def _with_index_credentials(index: str, url: str) -> str:
    """`url` with the index URL's credentials when it is on the index's host and has none (pip's rule)."""
    home, there = urllib.parse.urlsplit(index), urllib.parse.urlsplit(url)
    credentials, _, host = home.netloc.rpartition("@")
    if not credentials or there.username or (there.scheme, there.netloc) != (home.scheme, host):
        return url
    return urllib.parse.urlunsplit(there._replace(netloc=f"{credentials}@{there.netloc}"))


def _project_files(index: str, project: str, timeout: float) -> list[IndexFile]:
    url = urllib.parse.urljoin(index, f"{project}/")
    body, ctype = _read(url, timeout)
    files: list[IndexFile] = []
    if _JSON in ctype:
        for entry in json.loads(body)["files"]:
            files.append(
                IndexFile(
                    entry["filename"],
                    _with_index_credentials(index, urllib.parse.urljoin(url, entry["url"])),
                    entry.get("hashes", {}).get("sha256"),
                )
            )
        return files
    parser = _Anchors()
    parser.feed(body.decode("utf-8", "replace"))
    for text, href in parser.links:
        full = urllib.parse.urljoin(url, href)
        frag = urllib.parse.urlparse(full).fragment
        match = re.search(r"sha256=([0-9a-f]{64})", frag)
        name = text or os.path.basename(urllib.parse.urlparse(full).path)
        files.append(
            IndexFile(name, _with_index_credentials(index, full.split("#", 1)[0]), match.group(1) if match else None)
        )
    return files


def find_file(project: str, filename: str, timeout: float = 60) -> IndexFile:
    """Locate `filename` of `project` on pip's indexes."""
    errors: list[str] = []
    unreachable = 0
    indexes = index_urls()
    for index in indexes:
        try:
            for entry in _project_files(index, project, timeout):
                if entry.filename == filename:
                    return entry
        except (DownloadError, OSError, ValueError, KeyError) as exc:
            errors.append(f"{redact_url(index)}: {redact_url(str(exc))}")
            unreachable += not (isinstance(exc, HTTPFailure) and exc.status == 404)  # a 404: no such project there
    detail = "".join(f"\n  {e}" for e in errors)
    if unreachable == len(indexes):
        # Not one index answered: that says nothing about whether the file exists.
        raise DownloadError(
            f"could not reach any package index pip is configured to use, to find {filename}:{detail}\n"
            "Check the network and `pip config list` / PIP_INDEX_URL, then run the command again; or put the "
            "file in the download cache (it is verified against the pin's sha256). Nothing was changed."
        )
    raise DownloadError(
        f"{filename} is not on any package index pip is configured to use "
        f"({', '.join(redact_url(i) for i in indexes)}).{detail}\n"
        "Check `pip config list` / PIP_INDEX_URL, or put the file in the download cache."
    )


def list_files(project: str, timeout: float = 60) -> list[IndexFile]:
    """Every file of `project` across pip's indexes (first index wins per name)."""
    seen: dict[str, IndexFile] = {}
    for index in index_urls():
        try:
            for entry in _project_files(index, project, timeout):
                seen.setdefault(entry.filename, entry)
        except (DownloadError, OSError, ValueError, KeyError):
            continue
    return list(seen.values())
