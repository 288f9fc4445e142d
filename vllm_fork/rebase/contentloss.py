"""Upstream content lost in a 3-way merge or a hand resolution (rebasebot's "upstream content loss").

For each file of a patch: the lines upstream added or changed (between the patch's
preimage and the new upstream) in the region of one of the patch's hunks, that the
merged result no longer has. A patch that itself removes such a line is not a loss.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from vllm_fork.core.git import git
from vllm_fork.queue.patchfile import FileDiff, PatchFile
from vllm_fork.rebase.classify import NEARBY, hunk_range, preimage

#: Lost lines listed per file at most (the rest are counted).
SHOWN = 5


def lost_lines(base: str, ours: str, merged: str, diff: FileDiff) -> list[str]:
    """Lines upstream put (base -> ours) near the hunks of `diff` that `merged` lacks."""
    regions = [(s - NEARBY, s + n + NEARBY) for s, n in filter(None, map(hunk_range, diff.hunks))]
    removed_by_patch = {ln[1:].strip() for h in diff.hunks for ln in h[1:] if ln.startswith("-")}
    have = {ln.strip() for ln in merged.splitlines()}
    base_lines, our_lines = base.splitlines(), ours.splitlines()
    lost = []
    matcher = difflib.SequenceMatcher(None, base_lines, our_lines, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op not in ("replace", "insert"):
            continue
        lo, hi = i1 + 1, max(i2, i1 + 1) + 1  # 1-based [lo, hi) in the preimage
        if not any(a < hi and b > lo for a, b in regions):
            continue
        for line in our_lines[j1:j2]:
            key = line.strip()
            if key and key not in have and key not in removed_by_patch:
                lost.append(line)
    return lost


def describe(path: str, lost: list[str]) -> str:
    shown = "; ".join(f"`{ln.strip()}`" for ln in lost[:SHOWN])
    more = f" and {len(lost) - SHOWN} more" if len(lost) > SHOWN else ""
    return f"`{path}`: upstream line(s) near the patch's hunks missing from the result: {shown}{more}"


def _blob(repo: Path, spec: str) -> str | None:
    proc = git(repo, "cat-file", "blob", spec, check=False)
    return proc.stdout if proc.returncode == 0 else None


def content_loss(repo: Path, patch: PatchFile, before: str, after: str) -> list[str]:
    """Losses for a patch applied (merged or resolved) as commit `after` on top of `before`."""
    found = []
    for diff in patch.files:
        pre = preimage(diff)
        base = _blob(repo, pre) if pre else None
        ours = _blob(repo, f"{before}:{diff.path}")
        merged = _blob(repo, f"{after}:{diff.path}")
        if base is None or ours is None or merged is None or base == ours:
            continue
        lost = lost_lines(base, ours, merged, diff)
        if lost:
            found.append(describe(diff.path, lost))
    return found
