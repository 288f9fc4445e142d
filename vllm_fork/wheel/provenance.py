"""The provenance record written beside each wheel: `dist/<wheel>.provenance.json`."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from vllm_fork.core.fs import sha256_file, write_atomic
from vllm_fork.core.git import git
from vllm_fork.ops.inputs import load_packaging

SCHEMA = 1
SUFFIX = ".provenance.json"


def provenance_path(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + SUFFIX)


def write(wheel: Path, record: dict) -> Path:
    path = provenance_path(wheel)
    write_atomic(path, (json.dumps(record, indent=2) + "\n").encode())
    return path


def read(wheel: Path) -> dict:
    return json.loads(provenance_path(wheel).read_text())


def patched_package_files(tree: Path, base: str, head: str) -> list[dict]:
    """Files under vllm/ the series changes: path with sha256 of the new content, or deleted."""
    names = git(tree, "diff", "--name-status", "--no-renames", "-z", base, head, "--", "vllm").stdout.split("\0")
    files = []
    for status, path in zip(names[0::2], names[1::2]):
        if not status:
            continue
        if status == "D":
            files.append({"path": path, "deleted": True})
        else:
            data = git(tree, "cat-file", "blob", f"{head}:{path}", text=False).stdout
            files.append({"path": path, "sha256": hashlib.sha256(data).hexdigest()})
    return files


def fork_state(root: Path) -> dict:
    """The fork repository's own commit and whether its work tree was clean (None outside a git clone)."""
    top = git(root, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
        return {"commit": None, "clean": None, "changed": []}
    head = git(root, "rev-parse", "--verify", "--quiet", "HEAD", check=False).stdout.strip() or None
    # Git-ignored outputs (build/, dist/) are not the fork's sources.
    changed = [ln[3:] for ln in git(root, "status", "--porcelain", "--untracked-files=normal").stdout.splitlines()]
    return {"commit": head, "clean": not changed, "changed": changed[:50]}


def changes_requirements(tree: Path, base: str, head: str) -> bool:
    """Whether the series changes what decides the wheel's dependencies (`ops-cache/packaging.toml`)."""
    pathspecs = load_packaging().requirement_pathspecs
    changed = git(tree, "diff", "--name-only", base, head, "--", *pathspecs).stdout
    return bool(changed.strip())


def tool_versions(build_env_tools: dict[str, str] | None = None, nvcc: str | None = None) -> dict:
    try:
        fork_version = version("vllm-fork")
    except PackageNotFoundError:
        fork_version = "source"
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    tools: dict[str, str | dict[str, str]] = {
        "python": platform.python_version(),
        "git": git_version.removeprefix("git version "),
        "vllm-fork": fork_version,
        "platform": f"{sys.platform}-{platform.machine()}",
    }
    if build_env_tools:
        tools["build_env"] = build_env_tools
    if nvcc:
        tools["nvcc"] = nvcc
    return tools


def wheel_summary(wheel: Path) -> dict:
    return {"filename": wheel.name, "sha256": sha256_file(wheel), "size": wheel.stat().st_size}


__all__ = [
    "SCHEMA",
    "SUFFIX",
    "provenance_path",
    "write",
    "read",
    "patched_package_files",
    "changes_requirements",
    "fork_state",
    "tool_versions",
    "wheel_summary",
]
