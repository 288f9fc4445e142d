"""Which upstream commits between the old and the new pin touched the lines a hunk needs.

Only the git source has that history: the pins are fetched shallow, so the commits
between them are fetched once (`--shallow-exclude=<old tag>`, then `--deepen=1` so
the first of them links to the old pin instead of looking like a root that wrote
every line). Each hunk's old-side range, in the patch's preimage, is mapped onto
the new upstream's file and traced back with `git log -L` over `old..new`.
"""

from __future__ import annotations

import re
from pathlib import Path

from vllm_fork.core.git import git
from vllm_fork.core.urls import redact_url
from vllm_fork.queue.patchfile import FileDiff
from vllm_fork.rebase.classify import hunk_range, preimage
from vllm_fork.upstream.pin import Pin
from vllm_fork.upstream.sources import git_ref, locked_repo

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
#: Commits listed per hunk at most (the rest are counted).
SHOWN = 8
PYPI_NOTE = (
    "Upstream blame: unknown with the pypi source (one commit per release, no history between "
    "them). Run the survey again with `--source git` for the upstream commits that touched each "
    "hunk: `invoke rebase --survey --to {to} --source git`."
)


def fetch_history(repo: Path, remote: str, old: Pin, new: Pin) -> str:
    """Fetch the commits between the two pins into the cache repo; '' or why it could not."""
    if not old.tag:
        return f"the old pin {old.commit[:12]} has no tag to fetch history down to"
    want = f"refs/tags/{new.tag}" if new.tag else new.commit
    ref = git_ref(new)
    with locked_repo(repo):  # the cache repo's other writers hold it too
        for depth in (f"--shallow-exclude=refs/tags/{old.tag}", "--deepen=1"):
            proc = git(repo, "fetch", "--quiet", "--no-tags", depth, remote, f"+{want}:{ref}", check=False)
            if proc.returncode != 0:
                said = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                return redact_url(f"`git fetch {depth}` from {remote} failed: {said}")
    return ""


def map_range(repo: Path, pre: str, now: str, start: int, length: int) -> tuple[int, int]:
    """Lines [start, start+length) of blob `pre` as a 1-based inclusive range in blob `now`."""
    end = start + max(length, 1)  # exclusive
    offset, lo, hi = 0, None, None
    for line in git(repo, "diff", "-U0", pre, now).stdout.splitlines():
        m = _HUNK.match(line)
        if not m:
            continue
        a, alen = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
        b, blen = int(m.group(3)), int(m.group(4) if m.group(4) is not None else 1)
        a_end = a + alen if alen else a + 1  # a pure insertion sits after line a
        if a_end <= start:
            offset = (b + blen) - (a + alen) if alen else (b + blen) - (a + 1)
            continue
        if a >= end:
            break
        # A change overlapping the range: take its whole new side.
        lo = min(lo, b) if lo is not None else min(b, start + offset)
        hi = max(hi or 0, b + max(blen, 1) - 1)
    lo = start + offset if lo is None else lo
    hi = max(hi or 0, end - 1 + offset)
    return max(lo, 1), max(hi, max(lo, 1))


def _line_count(repo: Path, blob: str) -> int:
    return git(repo, "cat-file", "blob", blob).stdout.count("\n")


def commits_on_lines(repo: Path, old: str, new: str, path: str, lo: int, hi: int) -> list[tuple[str, str]]:
    """(commit, subject) of each commit in old..new that changed lines lo..hi of `path` at `new`."""
    proc = git(repo, "log", "--format=%x00%H%x09%s", f"-L{lo},{hi}:{path}", f"{old}..{new}", check=False)
    if proc.returncode != 0:
        return []
    found = []
    for line in proc.stdout.splitlines():
        if line.startswith("\x00"):
            commit, _, subject = line[1:].partition("\t")
            found.append((commit, subject))
    return found


def hunk_blame(repo: Path, old: str, new: str, diff: FileDiff, hunk: list[str]) -> list[str]:
    """The upstream commits that touched `hunk`'s lines, as report lines."""
    pre, where = preimage(diff), hunk_range(hunk)
    header = hunk[0].split("@@")[1].strip()
    now = git(repo, "rev-parse", "--verify", "--quiet", f"{new}:{diff.path}", check=False).stdout.strip()
    if pre is None or where is None or not now or git(repo, "cat-file", "-e", pre, check=False).returncode:
        return [f"`{diff.path}` `@@ {header} @@`: the file is gone upstream or its preimage is unknown"]
    lo, hi = map_range(repo, pre, now, *where)
    hi = min(hi, max(_line_count(repo, now), 1))
    lo = min(lo, hi)
    commits = commits_on_lines(repo, old, new, diff.path, lo, hi)
    if not commits:
        return [f"`{diff.path}` `@@ {header} @@`: no upstream commit in the range touched these lines"]
    shown = [f"{c[:12]} {s}" for c, s in commits[:SHOWN]]
    more = f" (and {len(commits) - SHOWN} more)" if len(commits) > SHOWN else ""
    return [f"`{diff.path}` `@@ {header} @@` (now lines {lo}-{hi}): " + "; ".join(shown) + more]
