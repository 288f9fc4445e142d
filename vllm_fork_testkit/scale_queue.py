"""A generated fork-sized queue on the real vLLM tree: ~100 small Python-only patches over the real ones.

Made the way a developer makes patches (commits in build/vllm, then `invoke export`),
deterministically, and aimed at a hop from the pinned release (`old`) to another
one (`new`) so every outcome occurs:
  clean      a comment line in a file the two releases share byte for byte (some
             stacked two to a file, the second depending on the first);
  3-way      a comment line two lines from a line the releases differ on (the
             patch's context no longer matches; a 3-way merge does);
  conflict   a comment appended to a line the releases differ on;
  dropped    `Upstream-Status: drop-after <new>`.
Comment lines never change what Python runs, so the tree still imports and builds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core.git import git, out

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class GeneratedQueue:
    subjects: dict[str, list[str]] = field(default_factory=dict)  # kind -> subjects, in series order

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.subjects.values())


def _python_files(tree: Path, commit: str) -> dict[str, str]:
    """path -> blob of vllm/**.py at `commit`."""
    rows = out(tree, "ls-tree", "-r", commit, "--", "vllm").splitlines()
    return {r.split("\t")[1]: r.split()[2] for r in rows if r.endswith(".py")}


def _safe(line: str) -> bool:
    """A line a comment can follow or end without changing the code (no continuation, no string)."""
    s = line.rstrip("\n")
    return bool(s.strip()) and not s.rstrip().endswith("\\") and "'" not in s and '"' not in s and "#" not in s


def _changed_lines(tree: Path, new: str, old: str, path: str) -> set[int]:
    """1-based lines of `path` at `old` (the pinned release) that differ from `new`."""
    lines: set[int] = set()
    for row in git(tree, "diff", "-U0", new, old, "--", path).stdout.splitlines():
        m = _HUNK.match(row)
        if m and (m.group(4) is None or int(m.group(4)) > 0):
            start, length = int(m.group(3)), int(m.group(4) or 1)
            lines.update(range(start, start + length))
    return lines


def _commit(tree: Path, path: str, text: str, subject: str, status: str) -> None:
    (tree / path).write_text(text)
    git(tree, "add", "--", path)
    why = (
        f"Generated for the rebase scale benchmark: a small Python-only change to {path}, "
        "the size of most patches a fork carries."
    )
    # Trailers as the queue's policy asks (patches/policy.toml: Signed-off-by required).
    message = f"{subject}\n\n{why}\n\nUpstream-Status: {status}\nSigned-off-by: vllm-fork <vllm-fork@localhost>\n"
    git(tree, "commit", "-q", "-m", message)


def generate(
    tree: Path,
    old: str,
    new: str,
    upstream_repo: Path,
    count: int = 100,
    conflicts: int = 4,
    three_way: int = 6,
    drops: int = 2,
) -> GeneratedQueue:
    """Commit `count` patches on HEAD of `tree` (the applied real queue on release `old`);
    `new` is read from `upstream_repo` (the cache repo) to aim the patches."""
    git(tree, "fetch", "--quiet", "--no-tags", str(upstream_repo), new)
    head = out(tree, "rev-parse", "HEAD")
    touched = set(out(tree, "diff", "--name-only", old, head).splitlines())
    at_old, at_new = _python_files(tree, old), _python_files(tree, new)
    candidates = sorted(p for p in at_old if p not in touched)
    same = [p for p in candidates if at_new.get(p) == at_old[p]]
    differ = [p for p in candidates if p in at_new and at_new[p] != at_old[p]]
    queue = GeneratedQueue({"conflict": [], "3-way": [], "dropped": [], "clean": []})
    n = 0
    used: set[str] = set()

    def next_subject(kind: str, path: str) -> str:
        nonlocal n
        n += 1
        subject = f"[Fork] Small change {n:03d} ({kind}) in {path}"
        queue.subjects[kind].append(subject)
        return subject

    for path in differ:  # conflicts, then 3-way merges, from files the releases differ on
        if len(queue.subjects["conflict"]) >= conflicts and len(queue.subjects["3-way"]) >= three_way:
            break
        lines = (tree / path).read_text().splitlines(keepends=True)
        changed = _changed_lines(tree, new, old, path)
        if len(queue.subjects["conflict"]) < conflicts:
            hit = next((i for i in sorted(changed) if i <= len(lines) and _safe(lines[i - 1])), None)
            if hit is not None:
                lines[hit - 1] = lines[hit - 1].rstrip("\n") + "  # fork: tuned\n"
                _commit(tree, path, "".join(lines), next_subject("conflict", path), "carry")
                used.add(path)
                continue
        if len(queue.subjects["3-way"]) < three_way:
            # A line two away from a difference, with none closer: inside the patch's context, not its change.
            spot = next(
                (
                    i
                    for i in range(3, len(lines) - 3)
                    if (i - 2) in changed
                    and not changed & {i - 1, i, i + 1, i + 2, i + 3, i + 4}
                    and _safe(lines[i - 1])
                ),
                None,
            )
            if spot is not None:
                lines.insert(spot, "# fork: tuned here\n")
                _commit(tree, path, "".join(lines), next_subject("3-way", path), "carry")
                used.add(path)
    remaining = count - queue.count
    pool = iter(p for p in same if p not in used)
    path = ""
    for i in range(remaining):
        if i % 10 != 9 or not path:  # every tenth stacks on the file before it
            path = next(pool)
        lines = (tree / path).read_text().splitlines(keepends=True)
        spot = next((k for k in range(2, len(lines)) if _safe(lines[k - 1])), len(lines))
        lines.insert(spot, f"# fork: setting {i:03d}\n")
        kind = "dropped" if i < drops else "clean"
        status = f"drop-after {_version_of(tree, new)}" if kind == "dropped" else "carry"
        if kind == "clean" and i % 7 == 3:
            status = f"submitted https://github.com/vllm-project/vllm/pull/{30000 + i}"
        _commit(tree, path, "".join(lines), next_subject(kind, path), status)
    return queue


def _version_of(tree: Path, commit: str) -> str:
    text = git(tree, "show", f"{commit}:vllm/_version.py", check=False).stdout
    m = re.search(r"__version__\s*=\s*version\s*=\s*['\"]([0-9.]+)", text) or re.search(
        r"version\s*=\s*['\"]([0-9.]+)", text
    )
    return m.group(1) if m else "0.0.0"
