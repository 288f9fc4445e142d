"""The image's delta layer (scripts/image_delta.py and the Dockerfile's `delta` and `image` stages).

Run for real, without Docker: a venv stands in for upstream's image, holding a stand-in
vllm 0.33.0 installed as upstream's image installs it (files, dist-info, RECORD, bytecode
compiled but not listed in RECORD, as `uv` with UV_COMPILE_BYTECODE=1 leaves it). The shell
of the Dockerfile's two RUN steps is taken from the Dockerfile itself (only the `--mount`
flags dropped, the mount paths pointed at test directories) and run against it with a real
`pip install` of a real wheel that changes, adds and removes files.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.image.dockerfile import logical_lines

pytestmark = pytest.mark.slow  # makes venvs and runs pip

SCRIPT = REPO_ROOT / "scripts" / "image_delta.py"
FORK = "0.33.0+fork.abc123"
TAG = "cp38-abi3-manylinux_2_28_x86_64"
EXEC = 0o755
ENTRY_POINTS = "[console_scripts]\nvllm = vllm.entrypoints.cli:main\n"

# The stand-in upstream package: path -> (bytes, mode).
UPSTREAM = {
    "vllm/__init__.py": (b'__version__ = "0.33.0"\n', 0o644),
    "vllm/config/__init__.py": (b"", 0o644),
    "vllm/config/multimodal.py": (b"mm_processor_cache_gb: float = 4\n", 0o644),
    "vllm/engine/__init__.py": (b"", 0o644),
    "vllm/engine/core.py": (b"def run():\n    return 'engine'\n", 0o644),
    "vllm/entrypoints/__init__.py": (b"", 0o644),
    "vllm/entrypoints/cli.py": (b"def main():\n    print('serve')\n", 0o644),
    "vllm/_C.abi3.so": (bytes(range(256)) * 64, 0o755),  # compiled: identical in the fork's wheel
    "vllm/vllm-rs": (b"\x7fELF" + b"\0" * 4000, 0o755),
    "vllm/scripts/run.sh": (b'#!/bin/sh\nexec vllm serve "$@"\n', 0o644),
    "vllm/old_module.py": (b"GONE = True\n", 0o644),
    "vllm/legacy/__init__.py": (b"", 0o644),
    "vllm/legacy/impl.py": (b"def old():\n    pass\n", 0o644),
}
# The fork's wheel: two sources changed, one script made executable, a subpackage added,
# a module and a subpackage removed; everything else byte-identical.
FORK_FILES = {
    **{k: v for k, v in UPSTREAM.items() if not k.startswith(("vllm/old_module", "vllm/legacy/"))},
    "vllm/__init__.py": (f'__version__ = "{FORK}"\n'.encode(), 0o644),
    "vllm/config/multimodal.py": (b"mm_processor_cache_gb: float = 16\n", 0o644),
    "vllm/scripts/run.sh": (UPSTREAM["vllm/scripts/run.sh"][0], EXEC),
    "vllm/offload/__init__.py": (b"", 0o644),
    "vllm/offload/tower.py": (b"def stream():\n    return 'tower'\n", 0o644),
}
CHANGED = {"vllm/__init__.py", "vllm/config/multimodal.py", "vllm/scripts/run.sh"}
ADDED_PACKAGE = {"vllm/offload/__init__.py", "vllm/offload/tower.py"}


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(dest: Path, version: str, files: dict[str, tuple[bytes, int]]) -> Path:
    """A real wheel: members with modes, METADATA (requiring torch), entry points, RECORD."""
    info = f"vllm-{version}.dist-info"
    members = dict(files)
    members[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\nRequires-Dist: torch==2.13.0\n".encode(),
        0o644,
    )
    members[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {TAG}\n".encode(),
        0o644,
    )
    members[f"{info}/entry_points.txt"] = (ENTRY_POINTS.encode(), 0o644)
    record = "".join(f"{n},{record_hash(d)},{len(d)}\n" for n, (d, _) in members.items())
    members[f"{info}/RECORD"] = ((record + f"{info}/RECORD,,\n").encode(), 0o644)
    path = dest / f"vllm-{version}-{TAG}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode) in members.items():
            entry = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            entry.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(entry, data)
    return path


def stage_script(stage: str, **paths: Path) -> str:
    """The shell of the one RUN in a Dockerfile stage, `--mount` flags dropped, paths replaced."""
    lines = logical_lines((REPO_ROOT / "Dockerfile").read_text())
    start = next(i for i, ln in enumerate(lines) if ln.startswith("FROM ") and ln.endswith(f" AS {stage}"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("FROM ")), len(lines))
    (run,) = [ln for ln in lines[start:end] if ln.startswith("RUN ")]
    script = " ".join(w for w in run[4:].split(" ") if not w.startswith("--mount="))
    for image_path, here in paths.items():
        script = script.replace(image_path, str(here))
    return script


def run_sh(env_dir: Path, script: str, **extra: str) -> subprocess.CompletedProcess:
    environ = {
        **os.environ,
        "PATH": f"{env_dir / 'bin'}:{os.environ['PATH']}",
        "PIP_NO_INDEX": "1",
        "VLLM_BASE_IMAGE": "vllm/vllm-openai",
        "VLLM_BASE_TAG": "v0.33.0",
        **extra,
    }
    environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the Dockerfile sets it where it matters
    return subprocess.run(["sh", "-c", script], env=environ, capture_output=True, text=True)


def site_packages(env_dir: Path) -> Path:
    (site,) = (env_dir / "lib").glob("python3.*/site-packages")
    return site


def make_upstream_env(root: Path) -> Path:
    """A venv holding 'upstream' vllm 0.33.0 the way upstream's image has it."""
    env_dir = root / "env"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python3"
    wheels = root / "upstream-wheel"
    wheels.mkdir()
    wheel = make_wheel(wheels, "0.33.0", UPSTREAM)
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile", wheel], check=True)
    # uv's UV_COMPILE_BYTECODE=1: bytecode for every source, not listed in RECORD.
    subprocess.run([py, "-m", "compileall", "-q", site_packages(env_dir) / "vllm"], check=True)
    return env_dir


def tree(root: Path) -> dict[str, tuple[str, object]]:
    """Relative path -> ("dir", None) | ("link", target) | ("file", (bytes, exec bit))."""
    found: dict[str, tuple[str, object]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = ("dir", None)
            else:
                found[rel] = ("file", (path.read_bytes(), bool(path.stat().st_mode & stat.S_IXUSR)))
    return found


def pyc_is_fresh(source: Path) -> bool:
    """Whether the source's bytecode is what the import system would use without recompiling."""
    data = Path(importlib.util.cache_from_source(str(source))).read_bytes()
    magic, flags = data[:4], struct.unpack("<I", data[4:8])[0]
    if magic != importlib.util.MAGIC_NUMBER:
        return False
    if flags & 1:  # hash-based
        return data[8:16] == importlib.util.source_hash(source.read_bytes())
    mtime, size = struct.unpack("<II", data[8:16])
    st = source.stat()
    return mtime == (int(st.st_mtime) & 0xFFFFFFFF) and size == (st.st_size & 0xFFFFFFFF)


@pytest.fixture()
def built(tmp_path):
    """The delta stage run for real: upstream env, its pristine copy, the delta, pip's result."""
    env_dir = make_upstream_env(tmp_path)
    original = tmp_path / "original"
    shutil.copytree(env_dir, original, symlinks=True)
    dist = tmp_path / "dist"
    dist.mkdir()
    wheel = make_wheel(dist, FORK, FORK_FILES)
    (dist / (wheel.name + ".provenance.json")).write_text('{"pin": {"version": "0.33.0"}}\n')
    out = tmp_path / "delta-out"
    proc = run_sh(
        env_dir,
        stage_script(
            "delta",
            **{
                "/tmp/fork-dist": dist,
                "/opt/image-delta/image_delta.py": SCRIPT,
                "/tmp/vllm-before.json": tmp_path / "before.json",
                "/delta-out": out,
            },
        ),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = tmp_path / "installed"
    env_dir.rename(installed)  # what pip made; the env goes back to upstream's state
    shutil.copytree(original, env_dir, symlinks=True)
    return {
        "env": env_dir,
        "original": original,
        "installed": installed,
        "out": out,
        "tmp": tmp_path,
        "wheel": wheel,
        "log": proc.stdout,
    }


def apply_final(built, fork_version: str = FORK, share: str = "share") -> subprocess.CompletedProcess:
    script = stage_script("image", **{"/tmp/fork-delta": built["out"], "/usr/share/vllm-fork": built["tmp"] / share})
    return run_sh(built["env"], script, FORK_VERSION=fork_version)


def restore(built) -> None:
    shutil.rmtree(built["env"])
    shutil.copytree(built["original"], built["env"], symlinks=True)


def test_delta_holds_exactly_what_the_wheel_changes(built):
    site = site_packages(built["installed"])
    env_site = site_packages(built["env"])  # the same absolute paths pip wrote to, in the image
    manifest = json.loads((built["out"] / "delta.json").read_text())
    old_info, new_info = "vllm-0.33.0.dist-info", f"vllm-{FORK}.dist-info"
    new_info_files = {f"{new_info}/{p.name}" for p in (site / new_info).iterdir()}
    assert {"RECORD", "METADATA", "INSTALLER"} <= {Path(p).name for p in new_info_files}

    def at(rels):
        return sorted(str(env_site / r) for r in rels)

    assert manifest["changed"] == at(CHANGED)
    assert manifest["added"] == at(ADDED_PACKAGE | new_info_files)
    # Removed: the dropped module and its bytecode, the dropped subpackage and the old
    # dist-info as whole directories; nothing else (no bytecode of unchanged sources).
    old_pyc = importlib.util.cache_from_source(str(env_site / "vllm/old_module.py"))
    assert manifest["removed"] == sorted(
        [str(env_site / "vllm/old_module.py"), old_pyc, str(env_site / "vllm/legacy"), str(env_site / old_info)]
    )
    assert manifest["compile"] == at({"vllm/__init__.py", "vllm/config/multimodal.py"} | ADDED_PACKAGE)
    assert manifest["version"] == FORK and manifest["from_version"] == "0.33.0"
    # The tree holds exactly the changed and new files, at their absolute paths, as pip wrote them.
    files = {str(Path("/") / p) for p, (kind, _) in tree(built["out"] / "tree").items() if kind == "file"}
    assert files == set(manifest["changed"]) | set(manifest["added"])
    for path in files:
        in_tree = built["out"] / "tree" / path.lstrip("/")
        pip_wrote = Path(path.replace(str(built["env"]), str(built["installed"])))
        assert in_tree.read_bytes() == pip_wrote.read_bytes()
        assert in_tree.stat().st_mode == pip_wrote.stat().st_mode
    # The compiled members and the unchanged console script are not in it.
    assert not any(p.endswith(("_C.abi3.so", "vllm-rs", "/bin/vllm", "core.py")) for p in files)
    assert "3 changed" in built["log"] and "4 removed" in built["log"]


def test_applying_the_delta_reproduces_pips_install(built):
    proc = apply_final(built)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ours, pips, before = tree(built["env"]), tree(built["installed"]), tree(built["original"])
    vllm_rel = str(site_packages(built["env"]).relative_to(built["env"]) / "vllm")

    def is_bytecode(rel: str) -> bool:
        return "__pycache__" in Path(rel).parts and rel.startswith(vllm_rel)

    # Byte for byte (and exec bit) equal to pip's install, everywhere, bytecode of vllm aside.
    assert {k: v for k, v in ours.items() if not is_bytecode(k)} == {
        k: v for k, v in pips.items() if not is_bytecode(k)
    }
    # Bytecode: one fresh .pyc per vllm source; upstream's own for the unchanged ones.
    sources = [built["env"] / k for k in ours if k.startswith(vllm_rel) and k.endswith(".py")]
    assert sources and all(pyc_is_fresh(s) for s in sources)
    pycs = {k for k, (kind, _) in ours.items() if kind == "file" and is_bytecode(k)}
    assert pycs == {str(Path(importlib.util.cache_from_source(str(s))).relative_to(built["env"])) for s in sources}
    unchanged = [s for s in sources if "core.py" in s.name or s.name == "cli.py"]
    for source in unchanged:
        rel = str(Path(importlib.util.cache_from_source(str(source))).relative_to(built["env"]))
        assert ours[rel] == before[rel], f"{rel}: upstream's bytecode should be kept"
    # It runs: the fork's version, the new module, not the removed ones, no dependency added.
    py = str(built["env"] / "bin" / "python3")
    check = (
        "import importlib.metadata as m, vllm, vllm.offload.tower, vllm.config.multimodal as mm;"
        "print(m.version('vllm'), vllm.__version__, mm.mm_processor_cache_gb)"
    )
    out = subprocess.run([py, "-c", check], capture_output=True, text=True, check=True).stdout.split()
    assert out == [FORK, FORK, "16"]
    for gone in ("vllm.old_module", "vllm.legacy", "torch"):
        assert subprocess.run([py, "-c", f"import {gone}"], capture_output=True).returncode != 0, gone
    # The provenance record and the delta's manifest are in the image.
    share = built["tmp"] / "share"
    assert sorted(p.name for p in share.iterdir()) == [built["wheel"].name + ".provenance.json", "vllm-delta.json"]


def test_the_final_stage_refuses_a_wrong_result(built):
    # Labels describing another version than the wheel's stop the build.
    proc = apply_final(built, "0.33.0+fork.other", "share-a")
    assert proc.returncode != 0 and "labels describe 0.33.0+fork.other" in proc.stderr
    # A delta that fails to remove upstream's dist-info leaves two: refused.
    restore(built)
    manifest = built["out"] / "delta.json"
    data = json.loads(manifest.read_text())
    data["removed"] = [p for p in data["removed"] if not p.endswith("vllm-0.33.0.dist-info")]
    manifest.write_text(json.dumps(data))
    proc = apply_final(built, FORK, "share-b")
    assert proc.returncode != 0 and "expected exactly one vllm dist-info" in proc.stderr
    assert "vllm-0.33.0.dist-info" in proc.stderr and f"vllm-{FORK}.dist-info" in proc.stderr


def test_the_delta_stage_needs_exactly_one_wheel(tmp_path):
    empty = tmp_path / "dist"
    empty.mkdir()
    script = stage_script("delta", **{"/tmp/fork-dist": empty, "/delta-out": tmp_path / "out"})
    proc = run_sh(tmp_path, script)
    assert proc.returncode != 0 and "build/docker/dist/" in proc.stderr


def test_snapshot_without_vllm_says_what_is_wrong(tmp_path):
    env = {**os.environ, "PYTHONPATH": ""}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--name", "no-such-dist-xyz", "snapshot", str(tmp_path / "s.json")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 1 and "no installed distribution 'no-such-dist-xyz'" in proc.stderr
    assert not (tmp_path / "s.json").exists()
