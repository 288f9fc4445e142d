"""The wheel version: the pinned release plus a PEP 440 local label naming the series."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.fs import sha256_file
from vllm_fork.core.paths import REPO_ROOT, patches_dir
from vllm_fork.queue.series import read_series


@dataclass(frozen=True)
class SeriesId:
    label: str  # e.g. "fork.1a2b3c4d"
    patches: list[dict]  # [{"name", "sha256"}] in series order

    def version(self, release: str) -> str:
        return f"{release}+{self.label}"


def series_id(root: Path = REPO_ROOT) -> SeriesId:
    """sha256 over each patch's name and content, in series order; the label keeps 8 hex."""
    patches = [{"name": p.name, "sha256": sha256_file(p)} for p in read_series(patches_dir(root))]
    digest = hashlib.sha256()
    for patch in patches:
        digest.update(f"{patch['name']}\0{patch['sha256']}\n".encode())
    return SeriesId(f"fork.{digest.hexdigest()[:8]}", patches)
