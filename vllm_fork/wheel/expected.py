"""What a wheel built from a series must hold, recomputed from the patch files, not from its record.

The series is applied to upstream's tree in a scratch index of the cache repo
(`git apply --cached`: no checkout, a fraction of a second), and each file it
changes under `vllm/` is named by its git blob id. A wheel member's blob id is
computed from its bytes, so the comparison needs nothing the build wrote.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import git


def blob_id(data: bytes) -> str:
    """The id git gives a file with these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def patched_blobs(repo: Path, base: str, patches: list[Path], under: str = "vllm") -> dict[str, str | None]:
    """path -> blob id after the series (None: the series deletes it), for files the series changes."""
    with tempfile.TemporaryDirectory(prefix="vllm-fork-verify-") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        git(repo, "read-tree", base, env=env)
        for patch in patches:
            proc = git(repo, "apply", "--cached", "--whitespace=nowarn", str(patch), env=env, check=False)
            if proc.returncode != 0:
                raise ForkError(f"{patch.name} does not apply to upstream {base[:12]}: {proc.stderr.strip()}")
        raw = git(repo, "diff-index", "--cached", "--raw", "--no-renames", "-z", base, "--", under, env=env).stdout
    fields = raw.split("\0")
    changed: dict[str, str | None] = {}
    for meta, path in zip(fields[0::2], fields[1::2]):
        if not meta:
            continue
        _old_mode, _new_mode, _old, new, status = meta.lstrip(":").split(" ")
        changed[path] = None if status == "D" else new
    return changed


__all__ = ["blob_id", "patched_blobs"]
