"""Running vLLM's own setup.py in the build env, with progress."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from vllm_fork.core import log
from vllm_fork.core.errors import BuildError
from vllm_fork.wheel.buildenv import BuildEnv

# Inherited settings that would change what vLLM's setup.py does; the build sets its own.
_DROP_PREFIXES = ("VLLM_", "SETUPTOOLS_SCM", "CMAKE_", "PIP_")


def setup_env(
    params: dict[str, str], version: str, precompiled_wheel: Path | None = None, extra: dict[str, str] | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_PREFIXES)}
    env.pop("TORCH_CUDA_ARCH_LIST", None)
    env.update(
        VLLM_TARGET_DEVICE=params["target_device"],
        VLLM_VERSION_OVERRIDE=version,
        PYTHONDONTWRITEBYTECODE="1",
        SOURCE_DATE_EPOCH="315532800",  # 1980-01-01: zip timestamps independent of checkout time
    )
    if precompiled_wheel is not None:
        env.update(VLLM_USE_PRECOMPILED="1", VLLM_PRECOMPILED_WHEEL_LOCATION=str(precompiled_wheel))
    if extra:
        env.update(extra)
    return env


class SetupProgress:
    """Progress of a long setup.py run, read from its output lines (one `log.Progress` per stage).

    Each stage is (name, pattern, total) or (name, pattern, total, weights): with
    weights, a matching line counts weights[group(1)] (e.g. bytes of a wheel member,
    so a 500 MB .so counts for what it costs), else 1. Total 0 means the line says
    how far it is itself, like ninja's `[12/345]`.
    """

    def __init__(self, stages: list[tuple], log_fn: Callable[[str], None] = log.info) -> None:
        self.stages = [s if len(s) == 4 else (*s, None) for s in stages]
        self.progress = {s[0]: log.Progress(s[0], s[2], log=log_fn) for s in self.stages}

    def feed(self, line: str) -> None:
        for name, pattern, total, weights in self.stages:
            match = pattern.search(line)
            if not match:
                continue
            progress = self.progress[name]
            if total == 0 and match.groups():
                done, of = (int(g) for g in match.groups()[:2])
                progress.update(done, of)
            elif weights is not None:
                progress.advance(weights.get(match.group(1), weights.get("", 1)))
            else:
                progress.advance()
            return


def run_setup(
    env_: BuildEnv,
    cwd: Path,
    args: list[str],
    env: dict[str, str],
    progress: SetupProgress | None = None,
    what: str = "vLLM's setup.py",
) -> list[str]:
    """Run `python setup.py args` in `cwd`; return its output lines; ForkError with the tail on failure."""
    proc = subprocess.Popen(
        [str(env_.python), "setup.py", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        lines.append(line)
        if progress:
            progress.feed(line)
    if proc.wait() != 0:
        tail = "\n".join(lines[-40:])
        raise BuildError(
            f"{what} failed (exit {proc.returncode}) in {cwd}:\n{tail}\n"
            "The cache and dist/ were not changed. The full log is above; "
            "run with the same tree again after fixing the cause."
        )
    return lines
