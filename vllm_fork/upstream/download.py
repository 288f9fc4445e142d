"""Downloads into the cache: atomic, sha256-verified on every use, fetched once."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from vllm_fork.core import log
from vllm_fork.core.errors import DownloadError, ForkError, IntegrityError
from vllm_fork.core.fs import rename_into_place, sha256_file
from vllm_fork.core.paths import cache_subdir
from vllm_fork.upstream.pkgindex import find_file

RETRIES = 3
CHUNK = 1 << 20


def downloads_dir() -> Path:
    return cache_subdir("downloads")


def fetch_url(url: str | urllib.request.Request, dest: Path, sha256: str, timeout: float = 60) -> Path:
    """Download `url` to `dest` through a temp file; verify `sha256` before the rename.

    Network errors are retried; a hash mismatch deletes the partial and raises,
    naming the file and both hashes. `dest` is never half-written. `url` may be a
    Request carrying headers (e.g. a registry's bearer token).
    """
    request, url = url, url.full_url if isinstance(url, urllib.request.Request) else url
    last: Exception | None = None
    for attempt in range(1, RETRIES + 1):
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            digest = hashlib.sha256()
            with open(tmp, "wb") as out, urllib.request.urlopen(request, timeout=timeout) as resp:
                length = resp.headers.get("Content-Length")
                progress = log.Progress(dest.name, int(length) if length else None, unit="MiB", scale=1 << 20)
                while chunk := resp.read(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    progress.advance(len(chunk))
            got = digest.hexdigest()
            if got != sha256:
                raise IntegrityError(
                    f"sha256 mismatch downloading {dest.name} from {url}:\n"
                    f"  expected {sha256}\n  got      {got}\n"
                    "The partial download was deleted. If the pin is wrong, fix upstream.toml; "
                    "if the index serves a different file, check `pip config list`."
                )
            rename_into_place(tmp, dest)
            return dest
        except ForkError:
            tmp.unlink(missing_ok=True)
            raise
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            tmp.unlink(missing_ok=True)
            last = exc
            if attempt < RETRIES:
                time.sleep(min(2**attempt, 10) * 0.5)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    raise DownloadError(
        f"could not download {dest.name} from {url} after {RETRIES} attempts: {last}\n"
        "Check the network and `pip config list`, or place the file at "
        f"{dest} (it is verified against sha256 {sha256})."
    )


def verified(path: Path, sha256: str) -> bool:
    return path.is_file() and sha256_file(path) == sha256


def fetch(project: str, filename: str, sha256: str) -> Path:
    """The cached, verified file: downloaded through pip's index only when missing or bad."""
    dest = downloads_dir() / filename
    if dest.exists():
        if verified(dest, sha256):
            return dest
        got = sha256_file(dest)
        log.warning(f"cached {dest} has sha256 {got}, expected {sha256}; fetching it again")
        dest.unlink()
    entry = find_file(project, filename)
    if entry.sha256 and entry.sha256 != sha256:
        raise IntegrityError(
            f"the package index lists {filename} with sha256 {entry.sha256}, "
            f"but the pin expects {sha256}. Nothing was downloaded."
        )
    return fetch_url(entry.url, dest, sha256)
