"""`invoke docker`: staging the build context and the exact `docker buildx build` command.

Inputs are real files: a small wheel and provenance record written the way `invoke build`
writes them (into dist/ of a copy of this repository), real patches, a real git repo.
No Docker engine runs here, so the command is checked, not executed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import git
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.image import plan as img
from vllm_fork.image import stage as docker_stage

VERSION = "0.33.0+fork.abc123"
WHEEL = f"vllm-{VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"
PATCH = "0001-example-python-only.patch"


def make_wheel(dest: Path, version: str = VERSION, name: str | None = None) -> Path:
    """A minimal installable vllm wheel (pure Python stand-in for the patched one)."""
    name = name or f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    path = dest / name
    info = f"vllm-{version}.dist-info"
    files = {
        "vllm/__init__.py": f'__version__ = "{version}"\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\nRequires-Dist: torch==2.13.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp38-abi3-manylinux_2_28_x86_64\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in files.items():
            zf.writestr(n, data)
        zf.writestr(f"{info}/RECORD", record)
    return path


def make_record(wheel: Path, patches: dict[str, bytes], **extra) -> dict:
    record = {
        "pin": {"version": "0.33.0", "tag": "v0.33.0", "commit": "4ba787ec9"},
        "series": {
            "label": "fork.abc123",
            "patches": [{"name": n, "sha256": hashlib.sha256(b).hexdigest()} for n, b in patches.items()],
        },
        "ops": {
            "key": "f" * 64,
            "artifact": {
                "filename": "ops-ffff.zip",
                "sha256": "e" * 64,
                "remote": "https://user:s3cret@cache.example/ops",
            },
        },
        "route": "fast",
        "hit": True,
        "timings": {"total_s": 4.2},
        **extra,
    }
    (wheel.parent / (wheel.name + ".provenance.json")).write_text(json.dumps(record))
    return record


@pytest.fixture()
def repo(tmp_path) -> Path:
    """A copy of this repository's tracked files (a real git repo) with a built wheel in dist/."""
    root = tmp_path / "fork"
    files = git(REPO_ROOT, "ls-files", "-z").stdout.split("\0")
    for rel in filter(None, files):
        src = REPO_ROOT / rel
        if src.is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / rel)
    patch = b"From 0000\nSubject: [PATCH] example\n\n--- a/vllm/x.py\n+++ b/vllm/x.py\n"
    (root / "patches").mkdir(exist_ok=True)
    (root / "patches" / PATCH).write_bytes(patch)
    (root / "patches" / "series").write_text(PATCH + "\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fork")
    (root / "dist").mkdir()
    wheel = make_wheel(root / "dist")
    make_record(wheel, {PATCH: patch})
    return root


def arg(cmd: list[str], flag: str) -> list[str]:
    return [cmd[i + 1] for i, a in enumerate(cmd) if a == flag]


def build_args(cmd: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in arg(cmd, "--build-arg"))


def test_plan_stages_the_wheel_and_forms_the_command(repo):
    plan = img.plan_image(root=repo)
    (cmd,) = plan.commands
    assert cmd[:3] == ["docker", "buildx", "build"] and cmd[-1] == str(repo)
    assert arg(cmd, "--file") == [str(repo / "Dockerfile")]
    assert arg(cmd, "--target") == ["image"]
    assert arg(cmd, "--platform") == ["linux/amd64"]
    assert arg(cmd, "--tag") == ["vllm-fork/vllm-openai:0.33.0-fork.abc123"]
    assert "--load" in cmd and "--push" not in cmd
    staged = repo / "build" / "docker" / "dist"
    assert arg(cmd, "--build-context") == [f"fork-dist={staged}"]
    # The staged context holds exactly the wheel (a hard link, not a copy) and its record.
    assert sorted(p.name for p in staged.iterdir()) == [WHEEL, WHEEL + ".provenance.json"]
    assert (staged / WHEEL).stat().st_ino == (repo / "dist" / WHEEL).stat().st_ino
    args = build_args(cmd)
    assert args["WHEEL_FROM"] == "dist"
    assert args["VLLM_BASE_IMAGE"] == "vllm/vllm-openai" and args["VLLM_BASE_TAG"] == "v0.33.0"
    assert args["FORK_VERSION"] == VERSION
    assert args["FORK_PIN_COMMIT"] == "4ba787ec9"
    assert args["FORK_SERIES_LABEL"] == "fork.abc123"
    assert json.loads(args["FORK_SERIES_PATCHES"])[0]["name"] == PATCH
    assert args["FORK_OPS_KEY"] == "f" * 64 and args["FORK_OPS_ARTIFACT_SHA256"] == "e" * 64
    assert args["FORK_ROUTE"] == "fast"
    assert args["FORK_REVISION"] == git(repo, "rev-parse", "HEAD").stdout.strip()
    # Every build arg the command passes is declared in the Dockerfile (a typo would be ignored).
    declared = (repo / "Dockerfile").read_text()
    for name in args:
        assert f"ARG {name}" in declared, name


def test_record_credentials_never_reach_the_context(repo):
    img.plan_image(root=repo)
    staged = repo / "build" / "docker" / "dist" / (WHEEL + ".provenance.json")
    text = staged.read_text()
    assert "s3cret" not in text and "user" not in text
    assert json.loads(text)["ops"]["artifact"]["remote"] == "https://cache.example/ops"
    assert json.loads(text)["timings"] == {"total_s": 4.2}  # extra fields are kept


def test_tags_push_platform_and_digest(repo):
    digest = "sha256:" + "a" * 64
    (cmd,) = img.plan_image(
        root=repo,
        tags=["reg.example/vllm:prod", "reg.example/vllm:1"],
        push=True,
        platform="linux/amd64",
        base_digest=digest,
    ).commands
    assert arg(cmd, "--tag") == ["reg.example/vllm:prod", "reg.example/vllm:1"]
    assert "--push" in cmd and "--load" not in cmd
    assert build_args(cmd)["VLLM_BASE_DIGEST"] == digest
    assert build_args(cmd)["FORK_BASE_REF"] == f"vllm/vllm-openai:v0.33.0@{digest}"
    with pytest.raises(ForkError, match="built for linux/amd64 only"):
        img.plan_image(root=repo, platform="linux/arm64")
    with pytest.raises(ForkError, match="not of the form sha256"):
        img.plan_image(root=repo, base_digest="latest")


def test_digest_in_dockerfile_must_belong_to_the_pinned_tag(repo):
    dockerfile = repo / "Dockerfile"
    text = dockerfile.read_text()
    pinned = text.replace("ARG VLLM_BASE_DIGEST=\n", f"ARG VLLM_BASE_DIGEST=sha256:{'b' * 64}\n")
    dockerfile.write_text(pinned)
    (cmd,) = img.plan_image(root=repo).commands
    assert build_args(cmd)["VLLM_BASE_DIGEST"] == "sha256:" + "b" * 64
    dockerfile.write_text(pinned.replace("ARG VLLM_BASE_TAG=v0.33.0", "ARG VLLM_BASE_TAG=v0.32.0"))
    with pytest.raises(ForkError, match="pins VLLM_BASE_DIGEST for v0.32.0"):
        img.plan_image(root=repo)


def test_a_stale_wheel_is_refused(repo):
    (repo / "patches" / PATCH).write_bytes(b"changed\n")
    with pytest.raises(ForkError, match=f"{PATCH} changed since the wheel was built"):
        img.plan_image(root=repo)
    plan = img.plan_image(root=repo, allow_stale=True)
    assert any("stale" in n for n in plan.notes)


def test_no_wheel_or_no_record_says_what_to_run(repo):
    (repo / "dist" / (WHEEL + ".provenance.json")).unlink()
    with pytest.raises(ForkError, match="Run `invoke build` first"):
        img.plan_image(root=repo)
    with pytest.raises(ForkError, match="has no provenance record"):
        img.plan_image(root=repo, wheel=repo / "dist" / WHEEL)


def test_newest_wheel_for_the_pin_is_chosen(repo):
    old = make_wheel(repo / "dist", "0.32.0+fork.old")
    make_record(old, {})
    newer = make_wheel(repo / "dist", "0.33.0+fork.def456")
    make_record(newer, {PATCH: (repo / "patches" / PATCH).read_bytes()})
    os.utime(newer, (2_000_000_000, 2_000_000_000))
    (cmd,) = img.plan_image(root=repo).commands
    assert build_args(cmd)["FORK_VERSION"] == "0.33.0+fork.def456"


def run_invoke(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", "docker", *args], cwd=repo, capture_output=True, text=True)


def test_invoke_docker_dry_run_prints_the_exact_command(repo):
    proc = run_invoke(repo, "--dry-run", "--tag", "reg.example/vllm:prod")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    cmd = shlex.split(line)
    assert cmd == img.plan_image(root=repo, tags=["reg.example/vllm:prod"]).commands[0]
    assert "pinned by tag only" in proc.stderr  # no digest in the Dockerfile yet: said so


def test_invoke_docker_without_buildx_fails_clearly(repo):
    if shutil.which("docker") and subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode == 0:
        pytest.skip("docker buildx is available here: this test is for machines without it")
    proc = run_invoke(repo)
    assert proc.returncode == 1
    assert "error:" in proc.stderr and "--dry-run" in proc.stderr and "Traceback" not in proc.stderr


def test_wheel_from_build_plans_the_wheel_stage(repo, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    (cache / "downloads" / "vllm-0.33.0.tar.gz").write_bytes(b"sdist")
    (cache / "downloads" / "unrelated.whl").write_bytes(b"x")
    (cache / "ops" / "ab").mkdir(parents=True)
    (cache / "ops" / "ab" / "ops-abcd.zip").write_bytes(b"artifact")
    (repo / "ops-cache").mkdir(exist_ok=True)
    (repo / "ops-cache" / "index.json").write_text(
        json.dumps({"artifacts": {"abcd": {"filename": "ops-abcd.zip", "sha256": "0" * 64}}})
    )
    monkeypatch.setenv("VLLM_FORK_CACHE", str(cache))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    (tmp_path / "pip.conf").write_text("[global]\nindex-url = https://u:p@idx.example/simple\n")
    cmd, out = img.plan_wheel(root=repo, source="build")
    assert arg(cmd, "--target") == ["wheel"] and build_args(cmd) == {"WHEEL_FROM": "build"}
    assert arg(cmd, "--output") == [f"type=local,dest={out}"]
    assert arg(cmd, "--secret") == [f"id=pip.conf,src={tmp_path / 'pip.conf'}"]
    seed = repo / "build" / "docker" / "ops-seed"
    assert arg(cmd, "--build-context") == [f"ops-seed={seed}"]
    seeded = sorted(str(p.relative_to(seed)) for p in seed.rglob("*") if p.is_file())
    assert seeded == ["downloads/vllm-0.33.0.tar.gz", "ops/ab/ops-abcd.zip"]
    # The same through invoke: the wheel stage's command, then how to finish.
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "docker", "--dry-run", "--wheel-from", "compile"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert proc.returncode == 0, proc.stderr
    first, then = proc.stdout.splitlines()
    assert build_args(shlex.split(first)) == {"WHEEL_FROM": "compile"}
    assert then.startswith("# then: invoke docker --wheel ")


def test_seed_cache_adds_only_what_is_missing(tmp_path):
    seed, cache = tmp_path / "seed", tmp_path / "cache"
    (seed / "downloads").mkdir(parents=True)
    (seed / "downloads" / "a").write_bytes(b"seed-a")
    (seed / "downloads" / "b").write_bytes(b"seed-b")
    (cache / "downloads").mkdir(parents=True)
    (cache / "downloads" / "a").write_bytes(b"cached-a")
    added = docker_stage.seed_cache(seed, cache)
    assert added == [Path("downloads/b")]
    assert (cache / "downloads" / "a").read_bytes() == b"cached-a"
    assert (cache / "downloads" / "b").read_bytes() == b"seed-b"
    assert not list(cache.rglob(".*"))  # no temp files left


def test_collect_and_export_ops_inside_the_stage(tmp_path):
    dist, out, cache = tmp_path / "dist", tmp_path / "out", tmp_path / "cache"
    dist.mkdir()
    wheel = make_wheel(dist)
    record = make_record(wheel, {})
    artifact = cache / "ops" / "ff" / "ops-ffff.zip"
    artifact.parent.mkdir(parents=True)
    artifact.write_bytes(b"compiled")
    record["ops"]["artifact"]["sha256"] = hashlib.sha256(b"compiled").hexdigest()
    (dist / (WHEEL + ".provenance.json")).write_text(json.dumps(record))
    assert docker_stage.main(["collect", str(dist), str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [WHEEL, WHEEL + ".provenance.json"]
    assert (
        docker_stage.main(["export-ops", str(out / (WHEEL + ".provenance.json")), str(cache), str(tmp_path / "ops")])
        == 0
    )
    assert (tmp_path / "ops" / "ops" / "ff" / "ops-ffff.zip").read_bytes() == b"compiled"
    make_wheel(dist, "0.33.0+fork.other")
    assert docker_stage.main(["collect", str(dist), str(tmp_path / "out2")]) == 1  # two wheels: refuse


# The Dockerfile's delta and final stages are run for real in tests/integration/test_image_delta.py.
