"""Which compiled inputs (C++/CUDA, CMake, Rust, build requirements) differ between two upstreams.

When any did, the ops cache holds no artifact for the new release yet and must be
seeded from it. The list of inputs is `ops-cache/compiled-inputs.txt` when the
repository has it (the ops key's own list); otherwise a built-in fallback.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from .gitutil import git

#: Used only while `ops-cache/compiled-inputs.txt` does not exist.
FALLBACK_INPUTS = (
    "csrc/",
    "cmake/",
    "CMakeLists.txt",
    "setup.py",
    "pyproject.toml",
    "requirements/build",  # requirements/build.txt and requirements/build/
    "rust/",
    "rust-toolchain.toml",
)
INPUTS_FILE = Path("ops-cache") / "compiled-inputs.txt"


@dataclass(frozen=True)
class InputSpec:
    path: str
    table: str | None = None  # `pyproject.toml:[build-system]`: only that TOML table counts

    def covers(self, changed: str) -> bool:
        if self.path.endswith("/"):
            return changed.startswith(self.path)
        return changed == self.path or (
            self.path == "requirements/build" and changed.startswith("requirements/build")
        )


def load_specs(root: Path) -> tuple[list[InputSpec], str]:
    """The compiled-input entries and where they came from."""
    path = root / INPUTS_FILE
    if not path.exists():
        return [InputSpec(p) for p in FALLBACK_INPUTS], "built-in list (no ops-cache/compiled-inputs.txt)"
    specs = []
    for raw in path.read_text().splitlines():
        spec = raw.split("#", 1)[0].strip()
        if not spec:
            continue
        table = None
        if spec.endswith("]") and ":[" in spec:
            spec, _, table = spec[:-1].partition(":[")
        specs.append(InputSpec(spec, table))
    return specs, str(INPUTS_FILE)


def _table(repo: Path, commit: str, path: str, table: str):
    proc = git(repo, "cat-file", "blob", f"{commit}:{path}", check=False)
    if proc.returncode != 0:
        return None
    try:
        return tomllib.loads(proc.stdout).get(table)
    except tomllib.TOMLDecodeError:
        return proc.stdout  # unparsable: compare the text


def changed_compiled_inputs(repo: Path, old: str, new: str, root: Path) -> tuple[list[str], str]:
    """Paths among the compiled inputs that differ between commits `old` and `new` in `repo`."""
    specs, origin = load_specs(root)
    changed = git(repo, "diff", "--name-only", "--no-renames", old, new).stdout.splitlines()
    hits = []
    for path in changed:
        for spec in specs:
            if not spec.covers(path):
                continue
            if spec.table and _table(repo, old, path, spec.table) == _table(repo, new, path, spec.table):
                continue  # only the packaging metadata of the file changed
            hits.append(f"{path}:[{spec.table}]" if spec.table else path)
            break
    return hits, origin
