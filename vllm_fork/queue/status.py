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


@dataclass
class PatchStatus:
    """One entry of patches/series, as its file says."""

    index: int  # 1-based place in the series
    name: str
    subject: str = ""
    upstream_status: str = ""  # the trailer's value, 'none', or 'malformed: ...'
    files: list[str] = field(default_factory=list)  # the paths it touches
    error: str = ""  # why the file cannot be read; '' when it can


@dataclass
class Status:
    """What `invoke status` shows: the pin, the source, the tree, and each patch."""

    version: str
    tag: str
    commit: str  # '' when the pin does not record it
    source: str  # pypi or git
    origin: str  # the sdist file (pypi) or the git remote (git)
    wheel: str
    tree: str
    state: TreeState | None = None  # None when build/vllm is not made yet
    patches: list[PatchStatus] = field(default_factory=list)

    @property
    def made(self) -> bool:
        return self.state is not None


def status(root: Path = REPO_ROOT, source: str | None = None) -> Status:
    pin = load_pin(root)
    source = source or pin.source
    tree = default_tree(root)
    found = Status(
        version=pin.version,
        tag=pin.tag,
        commit=pin.commit or "",
        source=source,
        origin=pin.sdist.filename if source == "pypi" else pin.git_remote,
        wheel=pin.wheel.filename,
        tree=str(tree),
    )
    found.state = tree_state(tree, root)
    for i, entry in enumerate(series_entries(patches_dir(root)), 1):
        try:
            patch = parse_patch(patches_dir(root) / entry)
        except (ForkError, OSError) as exc:
            found.patches.append(PatchStatus(i, entry, error=str(exc)))
            continue
        try:
            carried = str(upstream_status(patch))
        except ValueError as exc:
            carried = f"malformed: {exc}"
        found.patches.append(PatchStatus(i, entry, patch.subject, carried, list(patch.touched)))
    return found


def format_status(found: Status) -> str:
    lines = [
        f"upstream: vLLM {found.version} (tag {found.tag}, commit {found.commit or 'unknown'})",
        f"source:   {found.source} ({found.origin})",
        f"wheel:    {found.wheel}",
    ]
    if found.state is not None:
        details = found.state.lines()
        clean = "" if details else ", clean: it holds patches/ exactly"
        lines.append(f"tree:     {found.tree} at {(found.state.head or '?')[:12]}{clean}")
        lines.extend(details)
    else:
        lines.append(f"tree:     {found.tree} (not made yet: `invoke apply`)")
    lines.append(f"patches:  {len(found.patches)}")
    for p in found.patches:
        if p.error:
            lines.append(f"  {p.index:>2}. {p.name}  [unreadable: {p.error}]")
            continue
        lines.append(f"  {p.index:>2}. {p.name}")
        lines.append(f"      {p.subject}")
        lines.append(f"      Upstream-Status: {p.upstream_status}")
        lines.extend(f"        {path}" for path in p.files)
    return "\n".join(lines)


def status_report(root: Path = REPO_ROOT, source: str | None = None) -> str:
    return format_status(status(root, source))
