"""`invoke status`: the pin, the source, and what each patch touches."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import dirty_paths, is_tool_cache, operation_in_progress, rev
from vllm_fork.core.paths import REPO_ROOT, default_tree, patches_dir
from vllm_fork.queue.apply import UPSTREAM_REF, rebase_stopped
from vllm_fork.queue.carry import upstream_status
from vllm_fork.queue.export import tree_queue
from vllm_fork.queue.patchfile import parse_patch
from vllm_fork.queue.series import series_entries
from vllm_fork.upstream.pin import load_pin


@dataclass(frozen=True)
class TreeState:
    """build/vllm as `invoke status` reports it."""

    head: str | None
    stopped: str | None  # "am" or "rebase": a git operation stopped half-way
    fork_rebase: bool  # `invoke rebase` is stopped (its state in build/rebase)
    dirty: list[str] = field(default_factory=list)  # uncommitted changes (tool caches left out)
    unexported: list[str] = field(default_factory=list)  # "<id> <subject>" of commits patches/ lacks
    missing: list[str] = field(default_factory=list)  # patches/ files the tree does not hold

    def lines(self) -> list[str]:
        out = []
        if self.fork_rebase:
            out.append("  `invoke rebase` is stopped: `invoke rebase --continue` or `invoke rebase --abort`")
        if self.stopped == "am" and not self.fork_rebase:
            out.append("  a `git am` is stopped: resolve and `invoke apply --continue`, or `invoke apply --abort`")
        elif self.stopped == "rebase":
            out.append("  a `git rebase` is stopped: `git rebase --continue` or `git rebase --abort` there")
        if self.dirty:
            out.append(f"  uncommitted changes ({len(self.dirty)}): " + ", ".join(self.dirty[:8]))
        if self.unexported:
            out.append("  commits not in patches/ (`invoke export` writes them):")
            out += [f"      {c}" for c in self.unexported]
        if self.missing:
            out.append("  patches/ files the tree does not hold (`invoke apply`):")
            out += [f"      {m}" for m in self.missing]
        return out


def tree_state(tree: Path, root: Path = REPO_ROOT) -> TreeState | None:
    """What build/vllm holds beyond patches/ (None when it is not made yet)."""
    if not (tree / ".git").exists():
        return None
    stopped = operation_in_progress(tree)
    dirty = [p for p in dirty_paths(tree) if not is_tool_cache(p)]
    unexported: list[str] = []
    missing: list[str] = []
    if not stopped and rev(tree, UPSTREAM_REF):
        try:
            queue = tree_queue(tree, root)
            unexported, missing = queue.unexported, queue.missing
        except ForkError as exc:  # a broken series or a merge commit: say so, status goes on
            unexported = [f"(cannot compare with patches/: {exc})"]
    return TreeState(
        rev(tree, "HEAD"), stopped, rebase_stopped(tree) and stopped != "rebase", dirty, unexported, missing
    )


def status_report(root: Path = REPO_ROOT, source: str | None = None) -> str:
    pin = load_pin(root)
    lines = [
        f"upstream: vLLM {pin.version} (tag {pin.tag}, commit {pin.commit or 'unknown'})",
        f"source:   {source or pin.source}"
        + (f" ({pin.sdist.filename})" if (source or pin.source) == "pypi" else f" ({pin.git_remote})"),
        f"wheel:    {pin.wheel.filename}",
    ]
    tree = default_tree(root)
    state = tree_state(tree, root)
    if state is not None:
        details = state.lines()
        clean = "" if details else ", clean: it holds patches/ exactly"
        lines.append(f"tree:     {tree} at {(state.head or '?')[:12]}{clean}")
        lines.extend(details)
    else:
        lines.append(f"tree:     {tree} (not made yet: `invoke apply`)")
    entries = series_entries(patches_dir(root))
    lines.append(f"patches:  {len(entries)}")
    for i, entry in enumerate(entries, 1):
        try:
            patch = parse_patch(patches_dir(root) / entry)
        except (ForkError, OSError) as exc:
            lines.append(f"  {i:>2}. {entry}  [unreadable: {exc}]")
            continue
        lines.append(f"  {i:>2}. {entry}")
        lines.append(f"      {patch.subject}")
        try:
            carried = str(upstream_status(patch))
        except ValueError as exc:
            carried = f"malformed: {exc}"
        lines.append(f"      Upstream-Status: {carried}")
        lines.extend(f"        {path}" for path in patch.touched)
    return "\n".join(lines)
