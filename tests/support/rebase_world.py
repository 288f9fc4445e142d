"""Small real worlds for rebase tests: an upstream git remote with releases, and a fork checkout."""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from support.forkrepo import ZERO, ForkPaths, sh, write_files
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue import apply as queue
from vllm_fork.queue.export import export as export_queue
from vllm_fork.upstream.pin import Artifact, Pin, save_pin


def isolate(tmp: Path, monkeypatch) -> None:
    """A private cache and an empty package index: no rebase test touches the network or shared state."""
    monkeypatch.setenv("VLLM_FORK_CACHE", str(tmp / "cache"))
    (tmp / "empty-index").mkdir()
    monkeypatch.setenv("PIP_INDEX_URL", (tmp / "empty-index").as_uri() + "/")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)


def config_py(overrides: dict[int, str] | None = None) -> str:
    overrides = overrides or {}
    return "".join(overrides.get(i, f"OPTION_{i} = {i}\n") for i in range(40))


BASE_FILES = {
    "setup.py": "from setuptools import setup\nsetup(name='mini')\n",
    "mini/__init__.py": "__version__ = '1.0.0'\n",
    "mini/config.py": config_py(),
    "mini/engine.py": "def run(x):\n    return x * 2\n\n\ndef stop():\n    return None\n",
    "csrc/ops.cu": "// kernel v1\n",
    "README.md": "mini\n",
}


@dataclass
class World(ForkPaths):
    """An upstream remote (tags v1.0.0, later v1.1.0 ...) and a fork checkout pinned on v1.0.0."""

    remote: Path
    root: Path

    def release(self, version: str, files: dict[str, str]) -> str:
        """Commit `files` on the remote and tag it v<version>; return the commit."""
        write_files(self.remote, files)
        sh(self.remote, "git", "add", "-A")
        sh(self.remote, "git", "commit", "-qm", f"mini {version}")
        sh(self.remote, "git", "tag", "-a", f"v{version}", "-m", version)
        return sh(self.remote, "git", "rev-parse", "HEAD")

    def add_patch(self, path: str, old: str, new: str, subject: str, why: str) -> None:
        """Edit the patched tree, commit, export, and commit the fork: as a developer does."""
        target = self.tree / path
        text = target.read_text()
        assert old in text, (old, path)
        target.write_text(text.replace(old, new, 1))
        sh(self.tree, "git", "commit", "-qam", f"{subject}\n\n{why}\n")
        export_queue(self.tree, self.root)
        sh(self.root, "git", "add", "-A")
        sh(self.root, "git", "commit", "-qm", f"patch: {subject}")

    def snapshot(self) -> dict:
        """Everything a rebase --abort must give back, byte for byte."""
        files = {}
        for base in (self.patches, self.tree):
            for p in sorted(base.rglob("*")):
                if p.is_file() and ".git" not in p.relative_to(base).parts:
                    files[str(p.relative_to(self.root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        files["upstream.toml"] = hashlib.sha256((self.root / "upstream.toml").read_bytes()).hexdigest()
        refs = sh(self.tree, "git", "for-each-ref", "--format=%(refname) %(objectname)")
        return {
            "files": files,
            "tree_head": sh(self.tree, "git", "symbolic-ref", "HEAD") + " " + sh(self.tree, "git", "rev-parse", "HEAD"),
            "tree_refs": refs,
            "tree_status": sh(self.tree, "git", "status", "--porcelain", "--ignored"),
            "root_head": sh(self.root, "git", "symbolic-ref", "HEAD") + " " + sh(self.root, "git", "rev-parse", "HEAD"),
            "root_status": sh(self.root, "git", "status", "--porcelain"),
            "root_branches": sh(self.root, "git", "branch", "--list"),
        }


def make_world(tmp: Path) -> World:
    remote = tmp / "upstream"
    remote.mkdir()
    sh(remote, "git", "init", "-q", "-b", "main")
    write_files(remote, BASE_FILES)
    sh(remote, "git", "add", "-A")
    sh(remote, "git", "commit", "-qm", "mini 1.0.0")
    sh(remote, "git", "tag", "-a", "v1.0.0", "-m", "1.0.0")
    commit = sh(remote, "git", "rev-parse", "HEAD")
    root = tmp / "fork"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("")
    (root / ".gitignore").write_text("/build/\n")
    # The ops key's list of compiled inputs, which the rebase report compares.
    (root / "ops-cache").mkdir()
    shutil.copy(REPO_ROOT / "ops-cache" / "compiled-inputs.txt", root / "ops-cache")
    # The fork's Dockerfile names upstream's image of the pinned release.
    (root / "Dockerfile").write_text(
        "ARG VLLM_BASE_IMAGE=vllm/vllm-openai\nARG VLLM_BASE_TAG=v1.0.0\n"
        "ARG VLLM_BASE_DIGEST=sha256:" + "1" * 64 + "\n"
        "FROM ${VLLM_BASE_IMAGE}:${VLLM_BASE_TAG}${VLLM_BASE_DIGEST:+@}${VLLM_BASE_DIGEST}\n"
    )
    save_pin(
        Pin(
            "1.0.0",
            "v1.0.0",
            commit,
            "git",
            str(remote),
            Artifact("vllm-1.0.0.tar.gz", ZERO),
            Artifact("vllm-1.0.0-py3-none-any.whl", ZERO),
        ),
        root,
    )
    sh(root, "git", "init", "-q", "-b", "main")
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-qm", "fork on mini 1.0.0")
    world = World(remote, root)
    queue.apply(root)
    return world


def two_patch_world(tmp: Path) -> World:
    """The fork carries two patches: OPTION_5 5 -> 50 (config.py), run() doubles -> triples (engine.py)."""
    world = make_world(tmp)
    world.add_patch(
        "mini/config.py",
        "OPTION_5 = 5\n",
        "OPTION_5 = 50\n",
        "Raise option 5 to 50",
        "Production traffic needs ten times the default; 5 starves the pool.",
    )
    world.add_patch(
        "mini/engine.py",
        "return x * 2",
        "return x * 3",
        "Triple in run()",
        "Our batches need a factor of three to keep the GPU busy.",
    )
    return world


def sdist_bytes(version: str, files: dict[str, str]) -> bytes:
    """A small deterministic sdist `vllm-<version>.tar.gz` holding `files`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def file_index(dir: Path, files: dict[str, bytes]) -> str:
    """A PEP 503 file:// index for project vllm serving `files`; returns its URL."""
    project = dir / "vllm"
    project.mkdir(parents=True, exist_ok=True)
    links = []
    for name, data in files.items():
        (project / name).write_bytes(data)
        links.append(f'<a href="{name}#sha256={hashlib.sha256(data).hexdigest()}">{name}</a>')
    (project / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return dir.as_uri() + "/"
