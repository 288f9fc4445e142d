"""Downloads into the cache as pip makes them: resumed, sha256-verified, fetched once.

A download writes `.<name>.<sha256 prefix>.partial` beside its destination and renames
it into place only once the whole file's sha256 matches. The partial file outlives a
cut connection and a killed run: the next attempt, or the next run, asks for the rest
with `Range`. A server that ignores `Range` sends the whole file again (the partial
restarts from its first byte), and a resumed file whose sha256 does not match is
downloaded once more from the start. How requests are made (retries by status,
`Retry-After`, netrc, pip's CA bundle and proxy) is httpclient's.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import ssl
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests
import urllib3

from vllm_fork.core import log
from vllm_fork.core.errors import ConfigError, DownloadError, IntegrityError, disk_full
from vllm_fork.core.fs import atomic_open, is_disk_full, plain_name, remove_stale_temps, rename_into_place, sha256_file
from vllm_fork.core.paths import cache_subdir
from vllm_fork.core.urls import redact_url
from vllm_fork.upstream.httpclient import Client, HTTPFailure
from vllm_fork.upstream.pkgindex import find_file

#: Attempts for each request, and for cut transfers in a row that bring no new bytes.
RETRIES = 3
CHUNK = 1 << 20
BACKOFF = 0.5  # seconds after a cut transfer that brought nothing, doubling each time
#: A partial download no run has resumed for this long is removed (its file may never be asked for again).
PARTIAL_KEEP_SECONDS = 7 * 24 * 3600


def downloads_dir() -> Path:
    return cache_subdir("downloads")


def partial_path(dest: Path, sha256: str) -> Path:
    """Where the download of `dest` with hash `sha256` keeps its bytes until they verify: named by the
    hash, so a changed pin never resumes into another file's bytes."""
    return dest.with_name(f".{dest.name}.{sha256[:16]}.partial")


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
    """What downloads of `dest` leave: `.<name>.<sha256 prefix>.partial`, and the `.<name>.<8 random
    chars>.part` temp files of downloads that cannot hold the lock (and of older versions)."""
    pattern = re.compile(rf"\.{re.escape(dest.name)}\.([a-z0-9_]{{8}}\.part|[0-9a-f]{{16}}\.partial)")
    return sorted(p for p in dest.parent.glob(".*.part*") if pattern.fullmatch(p.name))


def remove_partials(dest: Path, keep: Path | None = None) -> list[Path]:
    """Delete what earlier downloads of `dest` left, but `keep` (call holding its download lock: then
    no download of it is running); say so in one line."""
    removed, size = [], 0
    for path in _partials_of(dest):
        if path == keep:
            continue
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
    """Download `url` to `dest` through its partial file; verify `sha256` before the rename.

    A connection cut mid-way is resumed where it stopped; a full disk is no network
    error (DiskFull, at once); an error status fails at once, or after retries for
    429 and 5xx. A hash mismatch deletes the partial and raises, naming the file, the
    source, both hashes and `mismatch_advice` (the next step). `dest` is never
    half-written. `url` may be a Request carrying headers (e.g. a registry's bearer
    token): its unredirected ones are sent to `url` only, never after a redirect;
    `context` the TLS trust for its host (a registry's `certs.d` CA).
    """
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ConfigError(f"{sha256!r} is not a sha256 (64 lowercase hex digits); {dest.name} was not downloaded")
    headers: dict[str, str] = {}
    once: list[str] = []
    if isinstance(url, urllib.request.Request):
        headers, once, url = dict(url.header_items()), list(url.unredirected_hdrs), url.full_url
    with _one_download_of(dest) as alone:
        if alone and dest.is_file() and verified(dest, sha256):
            return dest  # another run fetched it while this one waited for the lock
        part = partial_path(dest, sha256)
        if alone:
            remove_partials(dest, keep=part)
            remove_stale_temps(dest.parent, ".*.partial", PARTIAL_KEEP_SECONDS)
        remove_stale_temps(dest.parent)  # other files' temps, once no process has written them for a while
        if url.startswith("file:"):
            return _copy_local(url, dest, sha256, mismatch_advice)
        if not alone:  # no lock here: another run may write the named partial; this one keeps its own
            fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
            os.close(fd)
            part = Path(name)
        client = Client(attempts=RETRIES, timeout=timeout, once=once, context=context)
        return _Download(client, url, headers, dest, part, sha256, mismatch_advice).run()


def _mismatch(name: str, url: str, size: int, sha256: str, got: str, advice: str) -> IntegrityError:
    return IntegrityError(
        f"sha256 mismatch downloading {name} from {redact_url(url)} ({size} bytes, complete):\n"
        f"  expected {sha256}\n  got      {got}\n"
        f"The download was deleted and nothing was replaced. {advice}"
    )


def _copy_local(url: str, dest: Path, sha256: str, advice: str) -> Path:
    """A file:// URL (a local index's file): copied through a temp file, verified, renamed."""
    src = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
    digest, size = hashlib.sha256(), 0
    try:
        with atomic_open(dest, ".part") as out, open(src, "rb") as fh:
            while chunk := fh.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
            if digest.hexdigest() != sha256:
                raise _mismatch(dest.name, url, size, sha256, digest.hexdigest(), advice)
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full(exc, f"{dest.name} into {dest.parent}") from None
        raise DownloadError(f"could not copy {dest.name} from {src}: {exc.strerror or exc}") from None
    return dest


class _Cut(Exception):
    """The transfer stopped before its end; the partial file keeps what came."""


class _Restart(Exception):
    """The server cannot continue the partial file (416, or another range than asked): start over."""


@dataclass
class _Download:
    client: Client
    url: str
    headers: dict[str, str]
    dest: Path
    part: Path
    sha256: str
    mismatch_advice: str

    def run(self) -> Path:
        name, shown = self.dest.name, redact_url(self.url)
        cuts = 0  # cut transfers in a row that brought no new bytes
        restarted = False
        while True:
            have, digest = self._resume_point()
            if have and digest.hexdigest() == self.sha256:  # a run killed after the last byte
                rename_into_place(self.part, self.dest)
                return self.dest
            try:
                offset, digest = self._transfer(have, digest)
            except _Restart as why:
                log.info(f"  {name}: {why}; downloading it from the start")
                self.part.unlink(missing_ok=True)
                continue
            except _Cut as cut:
                now = _size(self.part)
                cuts = 0 if now > have else cuts + 1
                if cuts >= RETRIES:
                    raise DownloadError(
                        f"could not download {name} from {shown}: {cut}; {RETRIES} attempts in a row brought no new "
                        "bytes.\n"
                        f"The {now} bytes received are kept in {self.part} for the next run to resume. Check the "
                        f"network (and `pip config list` or the remote), then run the command again, or place the "
                        f"file at {self.dest} (it is verified against sha256 {self.sha256})."
                    ) from None
                log.info(f"  {name}: {cut}; resuming at byte {now}")
                if cuts:
                    time.sleep(BACKOFF * 2 ** (cuts - 1))
                continue
            except HTTPFailure as exc:
                raise DownloadError(
                    f"could not download {name} from {shown}: {exc}.\n"
                    "Check the URL and the network (and `pip config list` or the remote), then run the command "
                    f"again, or place the file at {self.dest} (it is verified against sha256 {self.sha256})."
                ) from None
            except OSError as exc:  # writing the partial file: the network's errors are _Cut
                if is_disk_full(exc):
                    self.part.unlink(missing_ok=True)
                    raise disk_full(exc, f"{name} into {self.dest.parent}") from None
                raise DownloadError(f"could not write {self.part}: {exc.strerror or exc}") from None
            got = digest.hexdigest()
            if got == self.sha256:
                rename_into_place(self.part, self.dest)
                return self.dest
            size = _size(self.part)
            self.part.unlink(missing_ok=True)
            if offset and not restarted:  # the kept bytes may be another file's: once more, whole
                restarted = True
                log.warning(f"{name}: the resumed download does not match sha256 {self.sha256}; downloading it again")
                continue
            raise _mismatch(name, self.url, size, self.sha256, got, self.mismatch_advice)

    def _resume_point(self) -> tuple[int, hashlib._Hash]:
        """How many bytes the partial file holds, and their running sha256."""
        digest = hashlib.sha256()
        if not self.part.is_file():
            return 0, digest
        with open(self.part, "rb") as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
        return _size(self.part), digest

    def _transfer(self, have: int, digest: hashlib._Hash) -> tuple[int, hashlib._Hash]:
        """Write the server's bytes to the partial file from `have` on, or from 0 where the server
        ignores Range (then with a new digest); where they started, and the digest of the whole."""
        # identity: the bytes as stored (a server may gzip a .tar.gz in transit); the sha256 is of those
        headers = {**self.headers, "Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            resp = self.client.get(self.url, headers)
        except HTTPFailure as exc:
            if exc.status == 416 and have:
                raise _Restart("the server cannot resume it") from None
            raise
        with resp:
            offset, total = _answer_range(resp, have)
            if offset < have:
                log.info(f"  {self.dest.name}: the server ignored the range request; downloading it from the start")
                digest = hashlib.sha256()
            size, broke = offset, None
            progress = log.Progress(self.dest.name, total, unit="MiB", scale=1 << 20)
            progress.update(offset)
            chunks = resp.raw.stream(CHUNK, decode_content=False)
            with open(self.part, "r+b" if offset else "wb") as out:
                out.truncate(offset)
                out.seek(offset)
                while True:
                    try:  # reading is the network's part: any error there cuts the transfer
                        chunk = next(chunks, b"")
                    except (urllib3.exceptions.HTTPError, OSError) as exc:
                        broke = exc
                        break
                    if not chunk:
                        break
                    out.write(chunk)  # an OSError here is the disk's
                    digest.update(chunk)
                    size += len(chunk)
                    progress.advance(len(chunk))
        if total is not None and size < total:
            raise _Cut(f"truncated transfer: got {size} of the {total} bytes announced")
        if broke is not None:
            raise _Cut(f"the connection broke after {size} bytes ({redact_url(str(broke))})")
        return offset, digest


def _answer_range(resp: requests.Response, have: int) -> tuple[int, int | None]:
    """Where the answer's bytes start in the file, and the file's whole size if told."""
    length = resp.headers.get("Content-Length", "")
    if resp.status_code != 206:
        return 0, int(length) if length.isdigit() else None
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", resp.headers.get("Content-Range", "").strip())
    if not match or int(match[1]) != have:
        raise _Restart(f"the server sent another range than asked for ({resp.headers.get('Content-Range')!r})")
    return have, int(match[3]) if match[3] != "*" else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


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
    cached = None
    if dest.exists():
        cached = sha256_file(dest)
        if cached == sha256:
            with _one_download_of(dest, wait=False) as alone:
                if alone:  # else a download runs now: its partial file is in use
                    remove_partials(dest)
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
