"""The ops key: sha256 over the patched tree's compiled inputs (git blob ids) and build parameters.

The key depends only on content (blob ids are content hashes) and on the committed
parameter file, so it is the same on every machine, and a patch that touches no
compiled input leaves it equal to upstream's.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import git
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.ops.inputs import Input, load_inputs, load_params

KEY_SCHEMA = "vllm-fork ops key v1"


@dataclass(frozen=True)
class OpsKey:
    key: str
    commit: str
    manifest: list[str] = field(repr=False)
    params: dict[str, str] = field(default_factory=dict)

    @property
    def short(self) -> str:
        return self.key[:16]


def table_digest(tree: Path, commit: str, entry: Input) -> str | None:
    """sha256 of one TOML table of a file at `commit` (None when the file or table is absent)."""
    assert entry.table is not None, f"{entry} names a file, not a table: its blob is in the key"
    proc = git(tree, "cat-file", "blob", f"{commit}:{entry.path}", check=False)
    if proc.returncode != 0:
        return None
    try:
        table = tomllib.loads(proc.stdout).get(entry.table)
    except tomllib.TOMLDecodeError as exc:
        raise ForkError(f"{entry.path} at {commit[:12]} is not valid TOML: {exc}") from None
    if table is None:
        return None
    canonical = json.dumps(table, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def manifest(tree: Path, commit: str, inputs: list[Input], params: dict[str, str]) -> list[str]:
    """Canonical lines: `<mode> <blob> <path>` per input file, one per TOML table, one per parameter."""
    paths = [e.path for e in inputs if e.table is None]
    listing = git(tree, "ls-tree", "-r", "--full-tree", commit, "--", *paths).stdout
    lines = []
    for row in listing.splitlines():
        meta, _, path = row.partition("\t")
        mode, kind, blob = meta.split()
        if kind == "commit":  # a submodule: its commit id is the content
            mode = "160000"
        lines.append(f"{mode} {blob} {path}")
    lines.sort(key=lambda line: line.split(" ", 2)[2])
    for entry in inputs:
        if entry.table is not None:
            lines.append(f"table {table_digest(tree, commit, entry) or 'absent'} {entry}")
    lines += [f"param {name}={params[name]}" for name in sorted(params)]
    return lines


def digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join([KEY_SCHEMA, *lines, ""]).encode()).hexdigest()


def compute_key(
    tree: Path, commit: str = "HEAD", root: Path = REPO_ROOT, params: dict[str, str] | None = None
) -> OpsKey:
    """The ops key of `commit` in the git repo `tree`."""
    full = git(tree, "rev-parse", "--verify", f"{commit}^{{commit}}").stdout.strip()
    params = load_params(root) if params is None else params
    lines = manifest(tree, full, load_inputs(root), params)
    return OpsKey(digest(lines), full, lines, params)


@dataclass(frozen=True)
class Touch:
    """A patch (one commit of the patched branch) that changes compiled inputs."""

    index: int  # 1-based position in the series
    commit: str
    subject: str
    paths: list[str]


def patches_touching_inputs(tree: Path, base: str, head: str = "HEAD", root: Path = REPO_ROOT) -> list[Touch]:
    """The commits in base..head that change a compiled input, with the inputs they change."""
    inputs = load_inputs(root)
    log = git(tree, "log", "--reverse", "--format=%x00%H %s", "--name-only", f"{base}..{head}").stdout
    touches = []
    for index, chunk in enumerate(c for c in log.split("\0") if c.strip()):
        header, *paths = [line for line in chunk.splitlines() if line.strip()]
        commit, _, subject = header.partition(" ")
        hit = []
        for path in paths:
            for entry in inputs:
                if not entry.covers(path):
                    continue
                if entry.table is not None:
                    before = table_digest(tree, f"{commit}^", entry)
                    if before == table_digest(tree, commit, entry):
                        continue
                    path = str(entry)
                hit.append(path)
                break
        if hit:
            touches.append(Touch(index + 1, commit, subject, hit))
    return touches
