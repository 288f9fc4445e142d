"""The wheel version: the pinned release plus a PEP 440 local label naming the series.

The label hashes the patches the wheel was built from. A wheel built from a tree
whose commits differ from `patches/` (`invoke build --no-apply --allow-unexported`)
hashes the tree's own commits, as `git format-patch` writes them, and ends in
`.dirty`: its name never claims a queue it does not hold.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.fs import sha256_file
from vllm_fork.core.paths import REPO_ROOT, patches_dir
from vllm_fork.queue.series import read_series

DIRTY = "dirty"


@dataclass(frozen=True)
class SeriesId:
    label: str  # e.g. "fork.1a2b3c4d", or "fork.1a2b3c4d.dirty"
    patches: list[dict]  # [{"name", "sha256"}] in series order

    def version(self, release: str) -> str:
        return f"{release}+{self.label}"


def label_of(patches: list[dict], dirty: bool = False) -> str:
    """sha256 over each patch's name and content, in series order; the label keeps 8 hex."""
    digest = hashlib.sha256()
    for patch in patches:
        digest.update(f"{patch['name']}\0{patch['sha256']}\n".encode())
    return f"fork.{digest.hexdigest()[:8]}" + (f".{DIRTY}" if dirty else "")


def series_id(root: Path = REPO_ROOT) -> SeriesId:
    """The label of the queue in `patches/`."""
    patches = [{"name": p.name, "sha256": sha256_file(p)} for p in read_series(patches_dir(root))]
    return SeriesId(label_of(patches), patches)


def dirty_series_id(patches: list[dict]) -> SeriesId:
    """The label of a tree's own commits (as patch files) that `patches/` does not hold."""
    return SeriesId(label_of(patches, dirty=True), patches)
