"""vLLM's own routes through its setup.py: precompiled (reuse the ops) and compile (nvcc).

Both run in a throw-away clone of the patched tree (so build/vllm stays clean and
setuptools-scm's git file finder sees the committed files), inside the reusable
build env, and leave the wheel in `out_dir` through a rename.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import git
from vllm_fork.core.log import LogFn
from vllm_fork.core.log import info as log_info
from vllm_fork.wheel.buildenv import BuildEnv
from vllm_fork.wheel.setuppy import SetupProgress, run_setup, setup_env

_EXTRACT = re.compile(r"^\[extract\] (.+)$")
_ADDING = re.compile(r"^adding '([^']+)'")
_COPYING = re.compile(r"^copying ")
#: Weight of a wheel member whose size is not known in advance (a Python file).
_SMALL = 16 << 10


@dataclass(frozen=True)
class SetupResult:
    path: Path
    extracted: list[str]
    seconds: float


def _scratch_clone(tree: Path, commit: str, parent: Path) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=parent, prefix="setup-"))
    git(None, "clone", "-q", "--shared", "--no-checkout", str(tree), str(scratch / "vllm"))
    git(scratch / "vllm", "checkout", "-q", "--detach", commit)
    return scratch


def _bdist_args(tag_platform: str, dist: Path) -> list[str]:
    return ["bdist_wheel", "--py-limited-api=cp38", f"--plat-name={tag_platform}", "--dist-dir", str(dist)]


def _take_wheel(dist: Path, out_dir: Path) -> Path:
    wheels = list(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise ForkError(f"vLLM's setup.py left {len(wheels)} wheels in {dist}, expected one")
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / wheels[0].name
    shutil.move(str(wheels[0]), str(out_dir / f".{final.name}.part"))
    os.replace(out_dir / f".{final.name}.part", final)
    return final


def build_precompiled(
    tree: Path,
    commit: str,
    version: str,
    params: dict[str, str],
    artifact: Path,
    artifact_members: int,
    env: BuildEnv,
    out_dir: Path,
    work_parent: Path,
    log: LogFn = log_info,
    expected_members: int | None = None,
    member_sizes: dict[str, int] | None = None,
) -> SetupResult:
    """setup.py bdist_wheel with VLLM_USE_PRECOMPILED=1 and the artifact as the precompiled wheel."""
    start = time.perf_counter()
    scratch = _scratch_clone(tree, commit, work_parent)
    try:
        log(f"precompiled route: vLLM's setup.py in {scratch} (takes about a minute on 2 cores)")
        expected = expected_members or artifact_members
        sizes = dict(member_sizes or {})
        others = max(expected - len(sizes), 0)
        sizes[""] = _SMALL
        stages = [
            ("extract compiled members", _EXTRACT, artifact_members),
            # build_py, then install into the bdist dir: each copies every file once
            ("copy files into setuptools' build dirs", _COPYING, 2 * expected),
            (
                "compress wheel members (by bytes)",
                _ADDING,
                sum(member_sizes.values()) + others * _SMALL if member_sizes else expected,
                sizes if member_sizes else None,
            ),
        ]
        lines = run_setup(
            env,
            scratch / "vllm",
            _bdist_args(params["platform_tag"], scratch / "dist"),
            setup_env(params, version, precompiled_wheel=artifact),
            SetupProgress(stages, log),
            what="vLLM's precompiled route (setup.py bdist_wheel)",
        )
        extracted = [m.group(1) for line in lines if (m := _EXTRACT.match(line))]
        wheel = _take_wheel(scratch / "dist", out_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return SetupResult(wheel, extracted, time.perf_counter() - start)


def cuda_toolkit(environ: Mapping[str, str] | None = None) -> Path | None:
    """CUDA_HOME with an nvcc in it, or the toolkit of the nvcc on PATH; None without one."""
    env = os.environ if environ is None else environ
    for home in (env.get("CUDA_HOME"), env.get("CUDA_PATH")):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home)
    nvcc = shutil.which("nvcc", path=env.get("PATH", ""))
    if nvcc:
        return Path(os.path.realpath(nvcc)).parent.parent
    return None


COMPILE_PASSTHROUGH = (
    "TORCH_CUDA_ARCH_LIST",
    "MAX_JOBS",
    "NVCC_THREADS",
    "CMAKE_BUILD_TYPE",
    "CCACHE_DIR",
    "SCCACHE_DIR",
)


def build_compiled(
    tree: Path,
    commit: str,
    version: str,
    params: dict[str, str],
    toolkit: Path,
    env: BuildEnv,
    out_dir: Path,
    work_parent: Path,
    log: LogFn = log_info,
) -> SetupResult:
    """setup.py bdist_wheel compiling every extension with nvcc (20-40 min). Needs a real torch."""
    start = time.perf_counter()
    scratch = _scratch_clone(tree, commit, work_parent)
    try:
        extra = {k: os.environ[k] for k in COMPILE_PASSTHROUGH if os.environ.get(k)}
        if params.get("cuda_arch_list"):
            extra.setdefault("TORCH_CUDA_ARCH_LIST", params["cuda_arch_list"])
        extra["CUDA_HOME"] = str(toolkit)
        extra["PATH"] = f"{toolkit / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        log(f"compile route: nvcc from {toolkit}, {', '.join(f'{k}={v}' for k, v in extra.items() if k != 'PATH')}")
        run_setup(
            env,
            scratch / "vllm",
            _bdist_args(params["platform_tag"], scratch / "dist"),
            setup_env(params, version, extra=extra),
            SetupProgress([("compile", re.compile(r"^\[(\d+)/(\d+)\]"), 0)], log),
            what="vLLM's compile route (setup.py bdist_wheel with nvcc)",
        )
        wheel = _take_wheel(scratch / "dist", out_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return SetupResult(wheel, [], time.perf_counter() - start)


def nvcc_version(toolkit: Path) -> str:
    proc = subprocess.run([str(toolkit / "bin" / "nvcc"), "--version"], capture_output=True, text=True)
    match = re.search(r"release ([\d.]+)", proc.stdout)
    return match.group(1) if match else "unknown"
