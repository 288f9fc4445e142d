"""The reusable build environment for vLLM's own setup.py (made once, kept in the cache).

It holds vLLM's pinned CUDA build requirements (`requirements/build/cuda.txt` of the
tree) except torch, which is a stand-in: on the precompiled route and for metadata,
vLLM's setup.py only reads `torch.__version__`, `torch.version.cuda/hip/xpu` and
`torch.utils.cpp_extension.CUDA_HOME/ROCM_HOME`. The stand-in reports the torch
release and CUDA version the official wheel was built against (these decide the
wheel's Requires-Dist), and costs kilobytes instead of a multi-gigabyte install.
A compile (cache miss) needs the real torch; `real_torch=True` installs it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.errors import BuildError
from vllm_fork.core.log import LogFn
from vllm_fork.core.log import info as log_info
from vllm_fork.core.paths import cache_dir

STANDIN_VERSION = 1  # bump when the stand-in's files change

_TORCH_LINE = re.compile(r"^\s*torch\s*(==|>=|<=|~=|;|$)", re.I)


@dataclass(frozen=True)
class BuildEnv:
    path: Path
    torch: str
    cuda: str
    real_torch: bool

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def tool_versions(self) -> dict[str, str]:
        """Versions of the build tools inside the env (for provenance)."""
        script = (
            "import importlib.metadata as m, json\n"
            "names=['setuptools','setuptools-scm','setuptools-rust','wheel','packaging','torch']\n"
            "out={}\n"
            "for n in names:\n"
            "    try: out[n]=m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))"
        )

        try:
            proc = subprocess.run([str(self.python), "-c", script], capture_output=True, text=True)
        except OSError as exc:
            raise BuildError(
                f"the build env's python {self.python} cannot run ({exc.strerror}); delete {self.path} "
                "and run the build again (it is made afresh)"
            ) from None
        versions = json.loads(proc.stdout) if proc.returncode == 0 else {}
        if not self.real_torch and "torch" in versions:
            versions["torch"] += f" (stand-in, cuda {self.cuda})"
        return versions


def build_requirements(requirements_text: str) -> list[str]:
    """vLLM's CUDA build requirements without torch (the stand-in provides it)."""
    reqs = []
    for line in requirements_text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-") or _TORCH_LINE.match(line):
            continue
        reqs.append(line)
    return reqs


def _standin_files(torch_version: str, cuda: str) -> dict[str, str]:
    dist = f"torch-{torch_version}.dist-info"
    return {
        "torch/__init__.py": (
            '"""Stand-in for torch in vllm-fork\'s build env: version attributes only."""\n'
            "from . import version\n"
            "__version__ = version.__version__\n"
        ),
        "torch/version.py": (
            f"__version__ = {torch_version!r}\n"
            f"cuda = {cuda!r}\n"
            "hip = None\n"
            "xpu = None\n"
            "git_version = 'vllm-fork-standin'\n"
        ),
        "torch/utils/__init__.py": "",
        "torch/utils/cpp_extension.py": (
            "import os\n"
            "# Like torch: CUDA_HOME from the environment or nvcc on PATH; never used on the\n"
            "# precompiled route beyond this lookup.\n"
            "import shutil\n"
            "_nvcc = shutil.which('nvcc')\n"
            "CUDA_HOME = os.environ.get('CUDA_HOME') or os.environ.get('CUDA_PATH') or (\n"
            "    os.path.dirname(os.path.dirname(_nvcc)) if _nvcc else None)\n"
            "ROCM_HOME = None\n"
        ),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version}\n",
        f"{dist}/INSTALLER": "vllm-fork\n",
        f"{dist}/RECORD": "",
        f"{dist}/top_level.txt": "torch\n",
    }


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(out)


def env_id(requirements: list[str], torch_version: str, cuda: str, real_torch: bool) -> str:
    text = "\n".join(
        [
            f"python {sys.version_info.major}.{sys.version_info.minor}",
            f"torch {torch_version} cuda {cuda} {'real' if real_torch else f'standin{STANDIN_VERSION}'}",
            *requirements,
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _usable(env: BuildEnv) -> bool:
    """Finished, and its python still runs (a dangling venv link reads as missing)."""
    return (env.path / ".complete").exists() and os.access(env.python, os.X_OK)


def ensure_build_env(
    requirements_text: str,
    torch_version: str,
    cuda: str,
    real_torch: bool = False,
    log: LogFn = log_info,
) -> BuildEnv:
    """The build env for these requirements, made once (atomically, under a lock)."""
    reqs = build_requirements(requirements_text)
    ident = env_id(reqs, torch_version, cuda, real_torch)
    root = cache_dir() / "buildenv"
    root.mkdir(parents=True, exist_ok=True)
    final = root / ident
    env = BuildEnv(final, torch_version, cuda, real_torch)
    if _usable(env):
        return env
    with open(root / f".{ident}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second build waits for the first to finish
        if _usable(env):
            return env
        if final.exists():
            # Made once, then broken: its python is gone (the base interpreter was removed
            # or upgraded, the venv's link dangles). Made afresh, as on first use.
            log(f"the build env {final} is broken (no {env.python}); making it again")
            broken = Path(tempfile.mkdtemp(dir=root, prefix=f".{ident}.broken."))
            os.replace(final, broken / "env")
            shutil.rmtree(broken, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{ident}."))
        try:
            log(f"making the build env {final} (once; later builds reuse it)")
            subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True)
            py = tmp / "bin" / "python"
            if real_torch:
                reqs = reqs + [f"torch=={torch_version}"]
            else:
                site = _site_packages(py)
                for rel, text in _standin_files(torch_version, cuda).items():
                    (site / rel).parent.mkdir(parents=True, exist_ok=True)
                    (site / rel).write_text(text)
            log(f"  pip install {' '.join(reqs)}")
            proc = subprocess.run(
                [str(py), "-m", "pip", "install", "--progress-bar", "on", *reqs],
                stdout=None if sys.stderr.isatty() else subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            if proc.returncode != 0:
                raise BuildError(
                    "installing vLLM's build requirements into the build env failed:\n"
                    f"{(proc.stdout or '')[-3000:]}\n"
                    "Check `pip config list` (the index must serve these packages); "
                    "nothing was left behind, run the build again."
                )
            (tmp / ".complete").write_text(ident + "\n")
            # venv scripts embed their path, but we only ever run bin/python, which
            # resolves its prefix from pyvenv.cfg: renaming the directory is safe.
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return env
