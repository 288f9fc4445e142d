"""Putting one patch on the new upstream and saying what git had to do.

Each patch is tried in this order, so the outcome names the least git needed:
  clean     `git am` without 3-way (exact context, offsets allowed);
  dropped   the patch reverses cleanly on the new upstream, or the 3-way merge left
            nothing to commit: upstream already contains it;
  3-way     `git am --3way` merged it; upstream had changed lines around its hunks;
  conflict  the 3-way merge left conflict markers: the rebase stops here.
For clean and 3-way patches, hunks whose neighbourhood upstream changed since the
patch was written are listed "to check by eye": a clean apply can still be wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core.git import am_abort, am_skip, git, operation_in_progress, out
from vllm_fork.queue.apply import PatchFailure, am
from vllm_fork.queue.patchfile import FileDiff, parse_patch

CLEAN, THREE_WAY, DROPPED, CONFLICT, RESOLVED, SKIPPED = (
    "clean",
    "3-way",
    "dropped",
    "conflict",
    "resolved by hand",
    "skipped by hand",
)
#: Lines either side of a hunk (beyond its own context) where an upstream change gets flagged.
NEARBY = 3
_RANGE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")
_INDEX = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)")
_ZERO = re.compile(r"^0+$")


@dataclass
class PatchResult:
    name: str
    subject: str
    outcome: str
    by_eye: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    conflicts: dict[str, list[str]] = field(default_factory=dict)
    new_name: str = ""
    lost: list[str] = field(default_factory=list)  # upstream content the merge or resolution dropped
    diff_change: str = ""  # after export: unchanged, refreshed (context/line numbers only) or changed


def _old_ranges(diff_text: str) -> list[tuple[int, int]]:
    """Old-side [start, end) line ranges of a -U0 diff (insertions: the line they follow)."""
    ranges = []
    for line in diff_text.splitlines():
        m = _RANGE.match(line)
        if m:
            start, length = int(m.group(1)), int(m.group(2) or 1)
            ranges.append((start, start + max(length, 1)))
    return ranges


def _preimage(diff: FileDiff) -> str | None:
    for line in diff.header:
        if m := _INDEX.match(line):
            return None if _ZERO.match(m.group(1)) else m.group(1)
    return None


def nearby_upstream_changes(tree: Path, patch: Path, base: str) -> list[str]:
    """Hunks of `patch` near lines that changed between its preimage and `base`."""
    flags = []
    for diff in parse_patch(patch).files:
        pre = _preimage(diff)
        if pre is None or git(tree, "cat-file", "-e", pre, check=False).returncode != 0:
            continue  # a new file, or a preimage this repo never saw
        now = git(tree, "rev-parse", "--verify", "--quiet", f"{base}:{diff.path}", check=False).stdout.strip()
        if not now:
            flags.append(f"`{diff.path}`: upstream deleted or moved this file")
            continue
        if now.startswith(pre) or pre.startswith(now):
            continue
        flags += [flag for _, flag in hunks_near_changes(tree, diff, pre, now)]
    return flags


def hunk_range(hunk: list[str]) -> tuple[int, int] | None:
    """A hunk's old-side (start, length), from its `@@ -a,b +c,d @@` header."""
    m = _RANGE.match(hunk[0])
    return (int(m.group(1)), int(m.group(2) or 1)) if m else None


def hunks_near_changes(repo: Path, diff: FileDiff, pre: str, now: str) -> list[tuple[list[str], str]]:
    """(hunk, flag) for each hunk of `diff` near a line that changed between blobs `pre` and `now`."""
    changed = _old_ranges(git(repo, "diff", "-U0", pre, now).stdout)
    found = []
    for hunk in diff.hunks:
        where = hunk_range(hunk)
        if where is None:
            continue
        start, length = where
        lo, hi = start - NEARBY, start + length + NEARBY
        near = [(a, b) for a, b in changed if a < hi and b > lo]
        if near:
            lines = ", ".join(f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in near)
            header = hunk[0].split("@@")[1].strip()
            found.append((hunk, f"`{diff.path}` hunk `@@ {header} @@`: upstream changed line(s) {lines} around it"))
    return found


def preimage(diff: FileDiff) -> str | None:
    """The blob id the patch's `index` line names for the file before it (None: a new file)."""
    return _preimage(diff)


def _changed_lines(patch: Path) -> int:
    return sum(1 for d in parse_patch(patch).files for h in d.hunks for ln in h[1:] if ln[:1] in "+-" and ln)


def _commit_changed_lines(tree: Path, base: str) -> int:
    total = 0
    for row in out(tree, "diff", "--numstat", base, "HEAD").splitlines():
        added, removed, _ = row.split("\t", 2)
        total += (int(added) if added != "-" else 0) + (int(removed) if removed != "-" else 0)
    return total


def classify(tree: Path, patch: Path) -> tuple[PatchResult, PatchFailure | None]:
    """Apply `patch` on HEAD of `tree`; on conflict the tree stays stopped in `git am`."""
    parsed = parse_patch(patch)
    result = PatchResult(patch.name, parsed.subject, CLEAN)
    base = out(tree, "rev-parse", "HEAD")
    if am(tree, [patch], three_way=False) is None:
        result.by_eye = nearby_upstream_changes(tree, patch, base)
        return result, None
    am_abort(tree)
    if git(tree, "apply", "--check", "--reverse", str(patch), check=False).returncode == 0:
        result.outcome = DROPPED
        result.notes.append("upstream already contains every change of this patch (it reverses cleanly)")
        return result, None
    failure = am(tree, [patch], three_way=True)
    if failure is None:
        result.outcome = THREE_WAY
        result.by_eye = nearby_upstream_changes(tree, patch, base)
        kept, had = _commit_changed_lines(tree, base), _changed_lines(patch)
        if kept < had:
            result.notes.append(
                f"upstream already had part of it: {kept} of {had} changed lines remain; "
                "check the rest still makes sense"
            )
        return result, None
    unmerged = out(tree, "diff", "--name-only", "--diff-filter=U")
    if operation_in_progress(tree) == "am" and not unmerged and "No changes" in failure.git_output:
        am_skip(tree)
        result.outcome = DROPPED
        result.notes.append("the 3-way merge left nothing to commit: upstream already contains it")
        return result, None
    result.outcome = CONFLICT
    result.conflicts = failure.conflicts
    return result, failure
