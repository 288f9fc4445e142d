"""Which paths of the vLLM tree its compiled build reads (`ops-cache/compiled-inputs.txt`)."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.paths import REPO_ROOT

INPUTS_FILE = Path("ops-cache") / "compiled-inputs.txt"
PARAMS_FILE = Path("ops-cache") / "build-params.toml"
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
            raise ForkError(f"{INPUTS_FILE}:{number}: {spec!r} must be a plain relative path")
        entries.append(Input(path, table, why.strip()))
    if not entries:
        raise ForkError(f"{INPUTS_FILE} lists no compiled inputs")
    return entries


def load_inputs(root: Path = REPO_ROOT) -> list[Input]:
    try:
        return parse_inputs((root / INPUTS_FILE).read_text())
    except FileNotFoundError:
        raise ForkError(f"{root / INPUTS_FILE} is missing: it lists what the ops key covers") from None


def load_params(root: Path = REPO_ROOT, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The build parameters; TORCH_CUDA_ARCH_LIST from the environment overrides the file's."""
    environ = os.environ if environ is None else environ
    path = root / PARAMS_FILE
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ForkError(f"{path} is missing: it holds the build parameters of the ops key") from None
    missing = [n for n in PARAM_NAMES if n not in data]
    if missing:
        raise ForkError(f"{path} lacks {', '.join(missing)}")
    params = {n: str(data[n]) for n in PARAM_NAMES}
    if environ.get("TORCH_CUDA_ARCH_LIST"):
        params["cuda_arch_list"] = environ["TORCH_CUDA_ARCH_LIST"]
    return params
