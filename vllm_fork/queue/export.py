"""`invoke export`: the commits above upstream in build/vllm, written back to patches/ and the series."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import format_patch, operation_in_progress, out, rev
from vllm_fork.core.paths import REPO_ROOT, default_tree
from vllm_fork.core.paths import patches_dir as default_patches_dir
from vllm_fork.queue.apply import UPSTREAM_REF, mark_applied
from vllm_fork.queue.series import SERIES, read_series


def format_patches(tree: Path, dest: Path) -> list[str]:
    """Write the commits above upstream into `dest` as patch files; return names in order."""
    if operation_in_progress(tree):
        raise ForkError(
            f"a `git am` is stopped in {tree}: finish it (`git am --continue`) or "
            "`invoke apply --abort` before exporting"
        )
    if rev(tree, UPSTREAM_REF) is None:
        raise ForkError(f"{tree} has no {UPSTREAM_REF}: make it with `invoke apply` first")
    merges = out(tree, "rev-list", "--merges", f"{UPSTREAM_REF}..HEAD")
    if merges:
        raise ForkError(f"{tree} has merge commits above upstream; a patch queue must be linear")
    return format_patch(tree, f"{UPSTREAM_REF}..HEAD", dest)


def export(tree: Path | None = None, root: Path = REPO_ROOT) -> list[str]:
    """Regenerate patches/ and its series from the tree; only changed files are written."""
    tree = tree or default_tree(root)
    pdir = default_patches_dir(root)
    pdir.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=pdir.parent, prefix=".export-") as tmp:
        names = format_patches(tree, Path(tmp))
        for name in names:
            new = (Path(tmp) / name).read_bytes()
            target = pdir / name
            if not target.exists() or target.read_bytes() != new:
                os.replace(Path(tmp) / name, target)
        series = "".join(f"{n}\n" for n in names).encode()
        series_path = pdir / SERIES
        if not series_path.exists() or series_path.read_bytes() != series:
            (Path(tmp) / SERIES).write_bytes(series)
            os.replace(Path(tmp) / SERIES, series_path)
    for stale in pdir.glob("*.patch"):
        if stale.name not in names:
            stale.unlink()
    mark_applied(tree)
    return names


@dataclass(frozen=True)
class TreeQueue:
    """The tree's commits above upstream, as `invoke export` would write them, against `patches/`."""

    patches: list[dict]  # [{"name", "sha256"}] of the tree's commits as patch files, in order
    unexported: list[str] = field(default_factory=list)  # "<id> <subject>" of commits patches/ lacks
    missing: list[str] = field(default_factory=list)  # patches/ files the tree does not hold

    @property
    def matches(self) -> bool:
        return not self.unexported and not self.missing

    def describe(self) -> str:
        parts = []
        if self.unexported:
            parts.append(
                "  commits not in patches/ (not exported, or differing from their patch file):"
                + "".join(f"\n      {c}" for c in self.unexported)
            )
        if self.missing:
            parts.append("  patches/ files the tree does not hold:" + "".join(f"\n      {m}" for m in self.missing))
        return "\n".join(parts)


def tree_queue(tree: Path, root: Path = REPO_ROOT) -> TreeQueue:
    """Export the tree's commits to a scratch directory and compare them byte for byte with `patches/`."""
    wanted = read_series(default_patches_dir(root))
    commits = out(tree, "log", "--reverse", "--format=%h %s", f"{UPSTREAM_REF}..HEAD").splitlines()
    with tempfile.TemporaryDirectory(prefix="vllm-fork-export-") as tmp:
        names = format_patches(tree, Path(tmp))
        patches, unexported = [], []
        for i, name in enumerate(names):
            data = (Path(tmp) / name).read_bytes()
            patches.append({"name": name, "sha256": hashlib.sha256(data).hexdigest()})
            same = i < len(wanted) and wanted[i].name == name and wanted[i].read_bytes() == data
            if not same:
                unexported.append(commits[i] if i < len(commits) else name)
    missing = [p.name for p in wanted[len(names) :]]
    return TreeQueue(patches, unexported, missing)
