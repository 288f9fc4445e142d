"""Builders for real test inputs: a small upstream project and a fork checkout of it."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.paths import default_tree, patches_dir
from vllm_fork.upstream.pin import Artifact, Pin, save_pin

TAG = "v1.0.0"
ZERO = "0" * 64


#: A fixed identity and date for the commits tests make; user and system git config ignored.
GIT_ENV = {
    "PATH": "/usr/bin:/bin:/usr/local/bin",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "Up Stream",
    "GIT_AUTHOR_EMAIL": "up@example.com",
    "GIT_COMMITTER_NAME": "Up Stream",
    "GIT_COMMITTER_EMAIL": "up@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}


def sh(cwd: Path, *args: str, input: str | None = None) -> str:
    return subprocess.run(
        list(args), cwd=cwd, check=True, capture_output=True, text=True, input=input, env=GIT_ENV
    ).stdout.strip()


def write_files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


UPSTREAM_FILES = {
    "setup.py": "from setuptools import setup\nsetup(name='mini')\n",
    "mini/__init__.py": "__version__ = '1.0.0'\n",
    "mini/config.py": "".join(f"OPTION_{i} = {i}\n" for i in range(40)),
    "mini/engine.py": "def run(x):\n    return x * 2\n",
    "csrc/ops.cu": "// kernel\n",
    ".gitignore": "*.so\nbuild/\n",
}


def make_upstream_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A git repository with one commit tagged v1.0.0, standing in for vLLM's remote."""
    path.mkdir(parents=True)
    sh(path, "git", "init", "-q", "-b", "main")
    write_files(path, files or UPSTREAM_FILES)
    sh(path, "git", "add", "-A")
    sh(path, "git", "commit", "-qm", "mini 1.0.0")
    sh(path, "git", "tag", "-a", TAG, "-m", TAG)
    return path


class ForkPaths:
    """Where a fork checkout at `root` keeps its patched tree and its queue (as the tool says)."""

    root: Path

    @property
    def tree(self) -> Path:
        return default_tree(self.root)

    @property
    def patches(self) -> Path:
        return patches_dir(self.root)


@dataclass
class ForkRepo(ForkPaths):
    root: Path
    remote: Path

    @classmethod
    def create(cls, root: Path, remote: Path) -> ForkRepo:
        (root / "patches").mkdir(parents=True)
        (root / "patches" / "series").write_text("")
        commit = sh(remote, "git", "rev-parse", f"{TAG}^{{commit}}")
        save_pin(
            Pin(
                version="1.0.0",
                tag=TAG,
                commit=commit,
                source="git",
                git_remote=str(remote),
                sdist=Artifact("mini-1.0.0.tar.gz", ZERO),
                wheel=Artifact("mini-1.0.0-py3-none-any.whl", ZERO),
            ),
            root,
        )
        return cls(root, remote)

    def commit_in_tree(self, path: str, old: str, new: str, subject: str, body: str) -> None:
        """Edit a file of the patched tree and commit it, as a developer would."""
        target = self.tree / path
        text = target.read_text() if target.exists() else ""
        if old:
            assert old in text, f"{old!r} not in {path}"
            text = text.replace(old, new, 1)
        else:
            text += new
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        sh(self.tree, "git", "add", "-A")
        sh(self.tree, "git", "commit", "-q", "-F", "-", input=f"{subject}\n\n{body}\n")

    def snapshot(self) -> dict[str, bytes]:
        """Every file of patches/ and the pin, to prove an operation changed nothing."""
        files = {p.relative_to(self.root).as_posix(): p.read_bytes() for p in self.patches.iterdir()}
        files["upstream.toml"] = (self.root / "upstream.toml").read_bytes()
        return files

    def clone(self, dest: Path) -> ForkRepo:
        shutil.copytree(self.root, dest, ignore=shutil.ignore_patterns("build"))
        return ForkRepo(dest, self.remote)
