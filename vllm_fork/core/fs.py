"""Files never seen half-written, and their digests: the one way to write and hash a file.

Every write goes to a temp file in the destination's directory (same file system,
so the rename is atomic) and is renamed over the destination only when complete.
The temp file is made with mode 0600; before the rename it gets the mode a plain
`open()` would have given (0666 less the umask), so results are not private by accident.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import shutil
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from vllm_fork.core.errors import ConfigError

CHUNK = 1 << 20


def umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def rename_into_place(tmp: Path, dest: Path) -> None:
    """Give a finished temp file the umask's mode (mkstemp makes 0600), then rename it to `dest`."""
    os.chmod(tmp, 0o666 & ~umask())
    os.replace(tmp, dest)


@contextmanager
def atomic_path(dest: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A temp path beside `dest` to fill; renamed to `dest` on success, deleted on any error."""
    dest = Path(dest)
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        rename_into_place(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_open(dest: Path, suffix: str = ".tmp") -> Iterator[BinaryIO]:
    """A binary file object whose content becomes `dest` only when the block completes."""
    with atomic_path(dest, suffix) as tmp, open(tmp, "wb") as fh:
        yield fh


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write `data` (text as UTF-8) to `path`: a reader sees the old file or the new one, never half.

    The folder is made if missing (benchmark result folders, for one).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def copy_atomic(src: Path, dest: Path) -> None:
    """Copy `src` to `dest` through a temp file beside `dest`."""
    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)


def sha256_fp(fp: BinaryIO) -> tuple[str, int]:
    """Hex sha256 and size of a whole seekable file; leaves `fp` at its start for the next reader."""
    fp.seek(0)
    digest, size = hashlib.sha256(), 0
    while chunk := fp.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    fp.seek(0)
    return digest.hexdigest(), size


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's content."""
    with open(path, "rb") as fh:
        return sha256_fp(fh)[0]


def b64_digest(digest: bytes) -> str:
    """A digest as wheel RECORDs write it: urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def b64_sha256(data: bytes) -> str:
    """The urlsafe-base64 sha256 of `data`, as in a wheel's RECORD (without the `sha256=`)."""
    return b64_digest(hashlib.sha256(data).digest())


def link_or_copy(src: Path, dest: Path) -> None:
    """Hard-link `src` to `dest` (same file system), else copy it."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


#: errno values that mean "the disk is full": never a network error, never worth a retry.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)

#: Temp files older than this are left by a killed process (a live writer touches its file
#: at least every few seconds), so the next run deletes them.
STALE_TEMP_SECONDS = 15 * 60


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


def remove_stale_temps(directory: Path, pattern: str = ".*.part", age: float = STALE_TEMP_SECONDS) -> list[Path]:
    """Delete temp files (`.<name>.<random>.part`) a killed process left in `directory`.

    Only files untouched for `age` seconds go: another process's download in
    progress, in a cache shared by several clones, is written to continuously.
    """
    removed = []
    cutoff = time.time() - age
    for path in Path(directory).glob(pattern):
        try:
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path)
        except FileNotFoundError:  # another process removed it first
            continue
    return removed


def plain_name(name: object, what: str) -> str:
    """`name` if it is a plain file name (no directory part, not `.`/`..`), else ValueError naming `what`.

    Names read from files anyone can edit (ops-cache/index.json, a remote, a manifest,
    upstream.toml) are joined to cache directories: a `../x` must never reach outside.
    """
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or name != name.strip()
    ):
        raise ValueError(f"{what} {name!r} is not a plain file name (no directories, no `..`)")
    return name


def read_toml(path: Path, missing: str) -> dict[str, Any]:
    """A TOML file's table; a missing or invalid file is a ConfigError naming it (`missing` says why it matters)."""
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing: {missing}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
