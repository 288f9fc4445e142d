"""A cache of the vLLM tree's files, deflated once, for raw copying into wheels.

Entries are named by git blob id and carry `<b64 sha256>,<size>` as their comment,
so a wheel build copies every file the patches left alone without compressing or
even reading it. Keyed by the git tree id of `vllm/`; made once per pinned release.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path

from .gitutil import git_env, out
from .paths import cache_dir

DATE_TIME = (1980, 1, 1, 0, 0, 0)


def layer_path(tree_id: str) -> Path:
    path = cache_dir() / "pylayer"
    path.mkdir(parents=True, exist_ok=True)
    return path / f"{tree_id}.zip"


def read_blobs(repo: Path, blobs: list[str]) -> dict[str, bytes]:
    """Contents of many blobs through one `git cat-file --batch`."""
    if not blobs:
        return {}
    proc = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch"],
        input=("\n".join(blobs) + "\n").encode(),
        capture_output=True,
        env=git_env(),
        check=True,
    )
    data, pos, result = proc.stdout, 0, {}
    for blob in blobs:
        end = data.index(b"\n", pos)
        oid, kind, size = data[pos:end].split()
        size = int(size)
        result[oid.decode()] = data[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return result


def b64_sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def ensure_layer(repo: Path, commit: str, subdir: str = "vllm") -> Path:
    """The layer for `commit:subdir`, made if missing (atomically)."""
    tree_id = out(repo, "rev-parse", f"{commit}:{subdir}")
    path = layer_path(tree_id)
    if path.is_file():
        return path
    listing = out(repo, "ls-tree", "-r", f"{commit}:{subdir}")
    blobs = sorted({row.split()[2] for row in listing.splitlines() if row.split()[1] == "blob"})
    contents = read_blobs(repo, blobs)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for blob in blobs:
                info = zipfile.ZipInfo(blob, DATE_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.comment = f"{b64_sha256(contents[blob])},{len(contents[blob])}".encode()
                zf.writestr(info, contents[blob])
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
