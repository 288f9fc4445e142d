"""Wheel metadata made by vLLM's own setup.py (`dist_info`), cached by its inputs.

METADATA (Requires-Dist depends on the CUDA version), entry points, license files
and `vllm/_version.py` come from the same setuptools code the precompiled route
runs, so the fast route's metadata is identical by construction. Only the files
setup.py reads for metadata are checked out; the result is cached under a hash of
their blob ids, the version, the build env and the parameters.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.git import git
from vllm_fork.core.paths import cache_dir
from vllm_fork.ops.inputs import load_packaging
from vllm_fork.wheel.buildenv import BuildEnv
from vllm_fork.wheel.setuppy import run_setup, setup_env


@dataclass(frozen=True)
class WheelMetadata:
    dist_info: dict[str, bytes]  # path inside *.dist-info/ -> content (no WHEEL, no RECORD)
    version_py: bytes  # vllm/_version.py as setuptools-scm writes it
    setuptools: str  # for WHEEL's Generator line

    def wheel_file(self, tag: str) -> bytes:
        return (
            f"Wheel-Version: 1.0\nGenerator: setuptools ({self.setuptools})\nRoot-Is-Purelib: false\nTag: {tag}\n\n"
        ).encode()


def _cache_key(tree: Path, commit: str, version: str, env: BuildEnv, params: dict[str, str]) -> str:
    listing = git(tree, "ls-tree", "-r", "--full-tree", commit, "--", *load_packaging().pathspecs).stdout
    text = json.dumps([listing, version, env.path.name, params], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _load(path: Path) -> WheelMetadata:
    info = json.loads((path / "meta.json").read_text())
    files = {rel: (path / "dist-info" / rel).read_bytes() for rel in info["files"]}
    return WheelMetadata(files, (path / "_version.py").read_bytes(), info["setuptools"])


def wheel_metadata(tree: Path, commit: str, version: str, env: BuildEnv, params: dict[str, str]) -> WheelMetadata:
    key = _cache_key(tree, commit, version, env, params)
    final = cache_dir() / "metadata" / key
    if (final / "meta.json").is_file():
        return _load(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{key}."))
    try:
        src = work / "src"
        src.mkdir()
        archive = git(tree, "archive", "--format=tar", commit, "--", *load_packaging().pathspecs, text=False).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(src, filter="data")
        (src / "out").mkdir()
        run_setup(
            env,
            src,
            ["-q", "dist_info", "--output-dir", "out"],
            setup_env(params, version),
            what="vLLM's setup.py dist_info (wheel metadata)",
        )
        (dist,) = (src / "out").glob("*.dist-info")
        files = sorted(str(p.relative_to(dist)) for p in dist.rglob("*") if p.is_file())
        result = work / "result"
        shutil.copytree(dist, result / "dist-info")
        shutil.copy2(src / "vllm" / "_version.py", result / "_version.py")
        setuptools = env.tool_versions().get("setuptools", "")
        (result / "meta.json").write_text(json.dumps({"files": files, "setuptools": setuptools}))
        try:
            os.replace(result, final)
        except OSError:  # another build stored the same metadata first
            if not (final / "meta.json").is_file():
                raise
        return _load(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
