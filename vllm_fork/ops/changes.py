"""Which compiled inputs (C++/CUDA, CMake, Rust, build requirements) differ between two upstreams.

When any did, the ops key of the new release differs from the old one's, so the ops
cache has no artifact for it until `invoke ops.seed` makes one from the new
release's official wheel. The inputs are the ops key's own list
(`ops-cache/compiled-inputs.txt`, read by `ops_inputs`).
"""

from __future__ import annotations

from pathlib import Path

from vllm_fork.core.git import git
from vllm_fork.ops.inputs import INPUTS_FILE, load_inputs
from vllm_fork.ops.key import table_digest


def changed_compiled_inputs(repo: Path, old: str, new: str, root: Path) -> tuple[list[str], str]:
    """Paths among the compiled inputs that differ between commits `old` and `new` in `repo`."""
    inputs = load_inputs(root)
    changed = git(repo, "diff", "--name-only", "--no-renames", old, new).stdout.splitlines()
    hits = []
    for path in changed:
        entry = next((e for e in inputs if e.covers(path)), None)
        if entry is None:
            continue
        if entry.table and table_digest(repo, old, entry) == table_digest(repo, new, entry):
            continue  # only the packaging metadata of the file changed
        hits.append(str(entry) if entry.table else path)
    return hits, str(INPUTS_FILE)
