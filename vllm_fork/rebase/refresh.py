"""Refreshed or changed: what a rebase did to each patch file, so reviewers read only real changes.

unchanged  the same bytes
refreshed  the same message and the same `+`/`-` lines per file: only line
           numbers, context lines or blob ids moved
changed    a `+` or `-` line (or the message, or the set of files) differs
"""

from __future__ import annotations

from pathlib import Path

from vllm_fork.queue.patchfile import PatchFile, parse_patch

UNCHANGED, REFRESHED, CHANGED = "unchanged", "refreshed", "changed"


def _substance(patch: PatchFile) -> tuple:
    """The message and, per file, its added and removed lines in order: what a reviewer reads."""
    files = tuple((d.path, tuple(ln for h in d.hunks for ln in h[1:] if ln[:1] in "+-")) for d in patch.files)
    return patch.subject, patch.body, files


def diff_change(old: Path, new: Path) -> str:
    if old.read_bytes() == new.read_bytes():
        return UNCHANGED
    return REFRESHED if _substance(parse_patch(old)) == _substance(parse_patch(new)) else CHANGED
