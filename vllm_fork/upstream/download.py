"""Downloads into the cache: atomic, sha256-verified on every use, fetched once."""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import os
import re
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vllm_fork.core import log
from vllm_fork.core.errors import ConfigError, DownloadError, ForkError, IntegrityError, disk_full
from vllm_fork.core.fs import is_disk_full, plain_name, remove_stale_temps, rename_into_place, sha256_file
from vllm_fork.core.paths import cache_subdir
from vllm_fork.upstream.pkgindex import find_file

RETRIES = 3
CHUNK = 1 << 20


def downloads_dir() -> Path:
    return cache_subdir("downloads")


@contextmanager
def _one_download_of(dest: Path, wait: bool = True) -> Iterator[bool]:
    """Hold the lock of `dest`'s directory (a `flock` on the directory itself, so no lock file;
    the kernel drops it when its holder dies): one download into a directory at a time, across
    processes. Yields whether it holds it: False when `wait` is off and another process does,
    or where the file system has no flock (then nothing is known to be stale)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(dest.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError:  # BlockingIOError: held by another process; others: no flock here
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def _partials_of(dest: Path) -> list[Path]:
    """The temp files downloads of `dest` write (`.<name>.<8 random chars>.part`, as mkstemp names them)."""
    pattern = re.compile(rf"\.{re.escape(dest.name)}\.[a-z0-9_]{{8}}\.part")
    return sorted(p for p in dest.parent.glob(".*.part") if pattern.fullmatch(p.name))


def remove_partials(dest: Path) -> list[Path]:
    """Delete what killed downloads of `dest` left (call holding its download lock: then no
    download of it is running, so every one of its temp files is stale); say so in one line."""
    removed, size = [], 0
    for path in _partials_of(dest):
        try:
            size += path.stat().st_size
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            continue
    if removed:
        log.info(
            f"removed {len(removed)} partial download(s) of {dest.name} ({size / (1 << 20):.1f} MiB) "
            f"that an interrupted run left in {dest.parent}"
        )
    return removed


class TruncatedTransfer(OSError):
    """The server closed the connection before sending the Content-Length it announced."""


#: What to do when the package index serves other bytes than the pin records.
PIN_MISMATCH_ADVICE = (
    "If the pin is wrong, fix upstream.toml; if the server sends a different file, check `pip config list`."
)


def fetch_url(
    url: str | urllib.request.Request,
    dest: Path,
    sha256: str,
    timeout: float = 60,
    mismatch_advice: str = PIN_MISMATCH_ADVICE,
    context: ssl.SSLContext | None = None,
) -> Path:
    """Download `url` to `dest` through a temp file; verify `sha256` before the rename.

    Network errors and truncated transfers are retried; a full disk is not (it is
    no network error) and raises DiskFull. A hash mismatch deletes the partial and
    raises, naming the file, the source, both hashes and `mismatch_advice` (the next
    step). `dest` is never half-written. `url` may be a Request carrying headers (e.g.
    a registry's bearer token); `context` the TLS trust for its host (a registry's CA).
    """
    with _one_download_of(dest) as alone:
        if alone:
            remove_partials(dest)
        remove_stale_temps(dest.parent)  # other files' temps, once no process has written them for a while
        return _fetch_url(url, dest, sha256, timeout, mismatch_advice, context)


def _fetch_url(
    url: str | urllib.request.Request,
    dest: Path,
    sha256: str,
    timeout: float,
    mismatch_advice: str,
    context: ssl.SSLContext | None = None,
) -> Path:
    request, url = url, url.full_url if isinstance(url, urllib.request.Request) else url
    last: Exception | None = None
    for attempt in range(1, RETRIES + 1):
        tmp: Path | None = None
        try:
            fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
            os.close(fd)
            tmp = Path(tmp_name)
            digest = hashlib.sha256()
            size = 0
            with open(tmp, "wb") as out, urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
                length = resp.headers.get("Content-Length")
                expected = int(length) if length and length.isdigit() else None
                progress = log.Progress(dest.name, expected, unit="MiB", scale=1 << 20)
                while chunk := resp.read(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                    progress.advance(len(chunk))
            if expected is not None and size < expected:
                raise TruncatedTransfer(f"truncated transfer: got {size} of the {expected} bytes announced")
            got = digest.hexdigest()
            if got != sha256:
                raise IntegrityError(
                    f"sha256 mismatch downloading {dest.name} from {url} ({size} bytes, complete):\n"
                    f"  expected {sha256}\n  got      {got}\n"
                    f"The download was deleted and nothing was replaced. {mismatch_advice}"
                )
            rename_into_place(tmp, dest)
            return dest
        except ForkError:
            _discard(tmp)
            raise
        except (urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException) as exc:
            _discard(tmp)
            if isinstance(exc, OSError) and is_disk_full(exc):
                raise disk_full(exc, f"{dest.name} into {dest.parent}") from None
            last = exc
            if attempt < RETRIES:
                time.sleep(min(2**attempt, 10) * 0.5)
        except BaseException:
            _discard(tmp)
            raise
    what = "the transfer was cut short every time" if isinstance(last, TruncatedTransfer) else "network error"
    raise DownloadError(
        f"could not download {dest.name} from {url} after {RETRIES} attempts ({what}): {last}\n"
        "Check the network (and `pip config list` or the remote), then run the command again, or place the "
        f"file at {dest} (it is verified against sha256 {sha256}). Nothing in the cache was changed."
    )


def _discard(tmp: Path | None) -> None:
    if tmp is not None:
        tmp.unlink(missing_ok=True)


def verified(path: Path, sha256: str) -> bool:
    return path.is_file() and sha256_file(path) == sha256


def fetch(project: str, filename: str, sha256: str) -> Path:
    """The cached, verified file: downloaded through pip's index only when missing or bad.

    A cached copy that does not match the pin is kept until a download matching the
    pin replaces it: when the pin is what is wrong (a typo), the good file survives.
    """
    try:
        plain_name(filename, "file name")
    except ValueError as exc:
        raise ConfigError(f"upstream.toml: {exc}") from None
    dest = downloads_dir() / filename
    with _one_download_of(dest, wait=False) as alone:
        if alone:  # else a download of it runs now: its temp file is not stale
            remove_partials(dest)
    cached = None
    if dest.exists():
        cached = sha256_file(dest)
        if cached == sha256:
            return dest
        log.warning(f"cached {dest} has sha256 {cached}, the pin expects {sha256}; checking the package index")
    entry = find_file(project, filename)
    if entry.sha256 and entry.sha256 != sha256:
        kept = ""
        if cached == entry.sha256:
            kept = f"\nThe cached {dest} is that file (sha256 {cached}) and was kept. "
        elif cached:
            kept = f"\nThe cached {dest} (sha256 {cached}) was kept. "
        raise IntegrityError(
            f"the package index lists {filename} with sha256 {entry.sha256}, but the pin expects {sha256} (upstream.toml): "
            f"nothing was downloaded.{kept}\n"
            "If the pin has a typo, fix `sha256` in upstream.toml's table for this file (`git diff upstream.toml`)."
        )
    return fetch_url(entry.url, dest, sha256)
