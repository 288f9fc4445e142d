"""A cache of the vLLM tree's files, deflated once, for raw copying into wheels.

Entries are named by git blob id and carry `<b64 sha256>,<size>` as their comment,
so a wheel build copies every file the patches left alone without compressing or
even reading it. Keyed by the git tree id of `vllm/`; made once per pinned release.

Like every cached thing, the layer is verified on every use: `<tree id>.json`, its
manifest, names the layer file and its sha256, and `open_layer` hashes the file
through the very handle the wheel is then copied from, so the
bytes checked are the bytes used. A layer that does not match is rebuilt, with a
warning. The layer file's name carries its sha256, and both files are written
through a temp file and a rename, so concurrent builders only ever replace a file
with identical bytes and a manifest always names a file that matches it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import BinaryIO

from vllm_fork.core import log
from vllm_fork.core.fs import b64_sha256, remove_stale_temps, rename_into_place, sha256_fp, write_atomic
from vllm_fork.core.git import git_env, out
from vllm_fork.core.paths import cache_subdir

DATE_TIME = (1980, 1, 1, 0, 0, 0)
SCHEMA = 1
CHUNK = 1 << 20


def layer_dir() -> Path:
    return cache_subdir("pylayer")


def manifest_path(tree_id: str) -> Path:
    return layer_dir() / f"{tree_id}.json"


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
    for _blob in blobs:
        end = data.index(b"\n", pos)
        oid, _kind, size_field = data[pos:end].split()
        size = int(size_field)
        result[oid.decode()] = data[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return result


def _read_manifest(tree_id: str) -> dict | None:
    try:
        data = json.loads(manifest_path(tree_id).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: treated as a mismatch, so the layer is rebuilt
    return data if isinstance(data, dict) else {}


def _open_verified(tree_id: str) -> tuple[BinaryIO | None, str | None]:
    """(open handle of the layer, None) if it matches its manifest; (None, why) otherwise."""
    manifest = _read_manifest(tree_id)
    if manifest is None:
        return None, None  # never made: nothing to warn about
    name, want = manifest.get("file"), manifest.get("sha256")
    if (
        manifest.get("schema") != SCHEMA
        or manifest.get("tree") != tree_id
        or not name
        or not want
        or "/" in name
        or name.startswith(".")
    ):
        return None, f"its manifest {manifest_path(tree_id)} is unreadable or malformed"
    path = layer_dir() / name
    try:
        fp = open(path, "rb")  # noqa: SIM115 -- returned open to the caller, who closes it
    except FileNotFoundError:
        return None, f"{path} named by its manifest is missing"
    got, size = sha256_fp(fp)
    if got == want and size == manifest.get("size"):
        return fp, None
    fp.close()
    path.unlink(missing_ok=True)  # corrupt: never used again
    return None, f"{path} has sha256 {got} ({size} bytes), its manifest says {want} ({manifest.get('size')} bytes)"


def _build(repo: Path, commit: str, subdir: str, tree_id: str) -> None:
    listing = out(repo, "ls-tree", "-r", f"{commit}:{subdir}")
    blobs = sorted({row.split()[2] for row in listing.splitlines() if row.split()[1] == "blob"})
    contents = read_blobs(repo, blobs)
    remove_stale_temps(layer_dir())  # layers a killed build left half-written
    fd, tmp = tempfile.mkstemp(dir=layer_dir(), prefix=f".{tree_id}.", suffix=".part")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for blob in blobs:
                info = zipfile.ZipInfo(blob, DATE_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.comment = f"{b64_sha256(contents[blob])},{len(contents[blob])}".encode()
                zf.writestr(info, contents[blob])
        with open(tmp, "rb") as fp:
            sha256, size = sha256_fp(fp)
        name = f"{tree_id}-{sha256[:16]}.zip"
        rename_into_place(
            Path(tmp), layer_dir() / name
        )  # same name, same bytes: a concurrent builder's rename is harmless
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    manifest = {"schema": SCHEMA, "tree": tree_id, "file": name, "sha256": sha256, "size": size}
    write_atomic(manifest_path(tree_id), (json.dumps(manifest, indent=2) + "\n").encode())


def open_layer(repo: Path, commit: str, subdir: str = "vllm") -> BinaryIO:
    """The verified layer of `commit:subdir`, open for reading (the caller closes it); made if missing.

    Verification hashes the file through the returned handle, so what was checked is
    what the caller reads even if another builder replaces or deletes the file meanwhile.
    """
    tree_id = out(repo, "rev-parse", f"{commit}:{subdir}")
    for _attempt in range(3):
        fp, problem = _open_verified(tree_id)
        if fp is not None:
            return fp
        if problem:
            log.warning(f"the cached Python layer for tree {tree_id[:12]} is not used: {problem}; rebuilding it")
        _build(repo, commit, subdir, tree_id)
    raise RuntimeError(
        f"the Python layer for tree {tree_id} does not verify right after being built"
    )  # pragma: no cover
