"""The one loader of the per-release data under `ops-cache/`.

`compiled-inputs.txt` (what the compiled build reads), `build-params.toml` (the
ops key's parameters), `packaging.toml` (what setup.py reads for the wheel's
metadata) and `precompiled-members.toml` (the members vLLM's precompiled path
extracts). Rebasing onto a new release means reviewing these files, not code.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.errors import ConfigError
from vllm_fork.core.fs import read_toml
from vllm_fork.core.paths import REPO_ROOT

INPUTS_FILE = Path("ops-cache") / "compiled-inputs.txt"
PARAMS_FILE = Path("ops-cache") / "build-params.toml"
PACKAGING_FILE = Path("ops-cache") / "packaging.toml"
MEMBERS_FILE = Path("ops-cache") / "precompiled-members.toml"
PARAM_NAMES = ("target_device", "cuda", "torch", "cuda_arch_list", "platform_tag", "python_abi")


@dataclass(frozen=True)
class Input:
    """One entry: a file, a directory (`dir/`), or one TOML table of a file."""

    path: str
    table: str | None = None
    why: str = ""

    @property
    def is_dir(self) -> bool:
        return self.path.endswith("/")

    def covers(self, changed_path: str) -> bool:
        """Whether a changed file lies under this entry (tables: the file as a whole)."""
        if self.is_dir:
            return changed_path.startswith(self.path)
        return changed_path == self.path

    def __str__(self) -> str:
        return f"{self.path}:[{self.table}]" if self.table else self.path


def parse_inputs(text: str) -> list[Input]:
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        spec, _, why = raw.partition("#")
        spec = spec.strip()
        if not spec:
            continue
        path, table = spec, None
        if spec.endswith("]") and ":[" in spec:
            path, _, table = spec[:-1].partition(":[")
        if path.startswith("/") or ".." in Path(path).parts or " " in path:
            raise ConfigError(f"{INPUTS_FILE}:{number}: {spec!r} must be a plain relative path")
        entries.append(Input(path, table, why.strip()))
    if not entries:
        raise ConfigError(f"{INPUTS_FILE} lists no compiled inputs")
    return entries


def load_inputs(root: Path = REPO_ROOT) -> list[Input]:
    try:
        return parse_inputs((root / INPUTS_FILE).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{root / INPUTS_FILE} is missing: it lists what the ops key covers") from None


def load_params(root: Path = REPO_ROOT, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The build parameters; TORCH_CUDA_ARCH_LIST from the environment overrides the file's."""
    environ = os.environ if environ is None else environ
    path = root / PARAMS_FILE
    data = read_toml(path, "it holds the build parameters of the ops key")
    missing = [n for n in PARAM_NAMES if n not in data]
    if missing:
        raise ConfigError(f"{path} lacks {', '.join(missing)}")
    params = {n: str(data[n]) for n in PARAM_NAMES}
    if environ.get("TORCH_CUDA_ARCH_LIST"):
        params["cuda_arch_list"] = environ["TORCH_CUDA_ARCH_LIST"]
    return params


def _load_toml(root: Path, name: Path, what: str, keys: tuple[str, ...]) -> dict:
    path = root / name
    data = read_toml(path, f"it lists {what}")
    missing = [k for k in keys if k not in data]
    if missing:
        raise ConfigError(f"{path} lacks {', '.join(missing)}")
    return data


@dataclass(frozen=True)
class Packaging:
    """What vLLM's setup.py reads for the wheel's metadata (`ops-cache/packaging.toml`)."""

    metadata_inputs: tuple[str, ...]  # outside vllm/; `dir/` for a directory
    package_inputs: tuple[str, ...]  # inside vllm/
    requirements: tuple[str, ...]  # the subset of metadata_inputs that decides the dependencies

    @property
    def pathspecs(self) -> list[str]:
        """All of it as git pathspecs (the metadata cache key, the checkout for `dist_info`)."""
        return [p.rstrip("/") for p in self.metadata_inputs + self.package_inputs]

    @property
    def requirement_pathspecs(self) -> list[str]:
        return [p.rstrip("/") for p in self.requirements]

    def shapes_wheel(self, path: str) -> bool:
        """Whether a changed path outside vllm/ is one of metadata_inputs."""
        return any(path.startswith(p) if p.endswith("/") else path == p for p in self.metadata_inputs)


@functools.cache
def load_packaging(root: Path = REPO_ROOT) -> Packaging:
    keys = ("metadata_inputs", "package_inputs", "requirements")
    data = _load_toml(root, PACKAGING_FILE, "what setup.py reads for the wheel's metadata", keys)
    packaging = Packaging(*(tuple(data[k]) for k in keys))
    stray = [r for r in packaging.requirements if r not in packaging.metadata_inputs]
    if stray:
        raise ConfigError(f"{root / PACKAGING_FILE}: requirements {stray} must also be in metadata_inputs")
    return packaging


@dataclass(frozen=True)
class PrecompiledMembers:
    """The wheel members vLLM's precompiled path extracts (`ops-cache/precompiled-members.toml`)."""

    exact: frozenset[str]
    rust_extension: re.Pattern
    vendored: tuple[re.Pattern, ...]
    source_controlled: frozenset[str]

    def covers(self, name: str) -> bool:
        """Whether vLLM's precompiled path extracts this wheel member."""
        if name in self.exact or self.rust_extension.match(name):
            return True
        if self.vendored[0].match(name) and name in self.source_controlled:
            return False
        return any(p.match(name) for p in self.vendored)


@functools.cache
def load_precompiled_members(root: Path = REPO_ROOT) -> PrecompiledMembers:
    keys = ("exact", "rust_extension", "vendored", "source_controlled")
    data = _load_toml(root, MEMBERS_FILE, "the members of the ops artifact", keys)
    try:
        return PrecompiledMembers(
            frozenset(data["exact"]),
            re.compile(data["rust_extension"]),
            tuple(re.compile(p) for p in data["vendored"]),
            frozenset(data["source_controlled"]),
        )
    except re.error as exc:
        raise ConfigError(f"{root / MEMBERS_FILE}: a pattern is not a valid regular expression: {exc}") from None
