"""`invoke status`: the pin, the source, and what each patch touches."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import operation_in_progress, rev
from vllm_fork.core.paths import REPO_ROOT, default_tree, patches_dir
from vllm_fork.queue.carry import upstream_status
from vllm_fork.queue.patchfile import parse_patch
from vllm_fork.queue.series import series_entries
from vllm_fork.upstream.pin import load_pin


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
    head: str = ""  # build/vllm's HEAD; '' when the tree is not made yet
    stopped: str = ""  # a stopped git operation in the tree (am, rebase, ...); '' when none
    patches: list[PatchStatus] = field(default_factory=list)

    @property
    def made(self) -> bool:
        return bool(self.head)


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
    if (tree / ".git").exists():
        found.head = rev(tree, "HEAD") or "?"
        found.stopped = operation_in_progress(tree) or ""
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
    if found.made:
        state = f", a `git {found.stopped}` is stopped" if found.stopped else ""
        lines.append(f"tree:     {found.tree} at {found.head[:12]}{state}")
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
