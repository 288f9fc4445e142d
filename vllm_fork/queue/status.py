"""`invoke status`: the pin, the source, and what each patch touches."""

from __future__ import annotations

from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import operation_in_progress, rev
from vllm_fork.core.paths import REPO_ROOT, default_tree, patches_dir
from vllm_fork.queue.patchfile import parse_patch
from vllm_fork.queue.series import series_entries
from vllm_fork.upstream.pin import load_pin


def status_report(root: Path = REPO_ROOT, source: str | None = None) -> str:
    pin = load_pin(root)
    lines = [
        f"upstream: vLLM {pin.version} (tag {pin.tag}, commit {pin.commit or 'unknown'})",
        f"source:   {source or pin.source}"
        + (f" ({pin.sdist.filename})" if (source or pin.source) == "pypi" else f" ({pin.git_remote})"),
        f"wheel:    {pin.wheel.filename}",
    ]
    tree = default_tree(root)
    if (tree / ".git").exists():
        head = rev(tree, "HEAD") or "?"
        op = operation_in_progress(tree)
        state = f", a `git {op}` is stopped" if op else ""
        lines.append(f"tree:     {tree} at {head[:12]}{state}")
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
        lines.extend(f"        {path}" for path in patch.touched)
    return "\n".join(lines)
