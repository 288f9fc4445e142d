"""`invoke docker`: staging the build context and the exact `docker build` command.

Inputs are real: the wheel and provenance record `invoke apply` + `invoke build` make on a
copy of this repository (once per module, hard-linked into each test's copy), the index's
artifact entry as opscache wrote it, the real patches, a real git repo. The image itself is
built and run on a Docker engine in tests/integration/test_image_engine.py.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.scratch import module_scratch

from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import git
from vllm_fork.image import plan as img
from vllm_fork.image import stage as docker_stage
from vllm_fork.image.engine import BUILDX, builder_kind
from vllm_fork.ops import cache as opscache
from vllm_fork.upstream.pin import load_pin
from vllm_fork_testkit.fork_copy import copy_repository, fork_with_wheel

#: The pinned release: the base image's tag, the wheel versions and the sdist follow it.
PIN = load_pin(Path(__file__).resolve().parents[2])

pytestmark = pytest.mark.slow  # the real wheel (the shared cache; seconds when warm)


@dataclass(frozen=True)
class Real:
    """What the real build wrote: the wheel, its record, and names the tests use."""

    wheel: Path
    record_file: Path
    record: dict

    @property
    def name(self) -> str:
        return self.wheel.name

    @property
    def version(self) -> str:
        return self.record["version"]

    @property
    def first_patch(self) -> str:
        return self.record["series"]["patches"][0]["name"]


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Iterator[Real]:
    with module_scratch(tmp_path_factory, "docker-real") as tmp:
        _, result = fork_with_wheel(tmp / "fork")
        yield Real(result.wheel, result.provenance, result.record)


def add_wheel(real: Real, dist: Path, name: str | None = None, copy: bool = False) -> Path:
    """The real wheel in `dist` (a hard link, or a copy for its own mtime) and a copy of its record."""
    dist.mkdir(parents=True, exist_ok=True)
    wheel = dist / (name or real.name)
    shutil.copyfile(real.wheel, wheel) if copy else os.link(real.wheel, wheel)
    shutil.copyfile(real.record_file, dist / (wheel.name + ".provenance.json"))
    return wheel


@pytest.fixture()
def repo(tmp_path, real) -> Path:
    """A copy of this repository's tracked files (a real git repo) with the real wheel in dist/."""
    root = copy_repository(tmp_path / "fork")
    add_wheel(real, root / "dist")
    return root


def arg(cmd: list[str], flag: str) -> list[str]:
    return [cmd[i + 1] for i, a in enumerate(cmd) if a == flag]


def build_args(cmd: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in arg(cmd, "--build-arg"))


def test_plan_stages_the_wheel_and_forms_the_command(repo, real):
    plan = img.plan_image(root=repo)
    (cmd,) = plan.commands
    assert cmd[:3] == ["docker", "buildx", "build"] and cmd[-1] == str(repo)
    assert arg(cmd, "--file") == [str(repo / "Dockerfile")]
    assert arg(cmd, "--target") == ["image"]
    assert arg(cmd, "--platform") == ["linux/amd64"]
    assert arg(cmd, "--tag") == [f"vllm-fork/vllm-openai:{real.version.replace('+', '-')}"]
    assert "--load" in cmd and "--push" not in cmd and "--network=none" in cmd
    staged = repo / "build" / "docker" / "dist"
    assert arg(cmd, "--build-context") == []  # the wheel comes through the main context
    # The staged context holds exactly the wheel (a hard link, not a copy) and its record.
    assert sorted(p.name for p in staged.iterdir()) == [real.name, real.name + ".provenance.json"]
    assert (staged / real.name).stat().st_ino == (repo / "dist" / real.name).stat().st_ino
    args = build_args(cmd)
    assert args["WHEEL_FROM"] == "dist"
    assert args["VLLM_BASE_IMAGE"] == "vllm/vllm-openai" and args["VLLM_BASE_TAG"] == PIN.tag
    assert args["FORK_VERSION"] == real.version
    assert args["FORK_PIN_COMMIT"] == PIN.commit
    assert args["FORK_SERIES_LABEL"] == real.record["series"]["label"]
    assert json.loads(args["FORK_SERIES_PATCHES"])[0]["name"] == real.first_patch
    entry = opscache.lookup(real.record["ops"]["key"], repo)  # the index entry opscache wrote
    assert args["FORK_OPS_KEY"] == entry.key and args["FORK_OPS_ARTIFACT_SHA256"] == entry.sha256
    assert args["FORK_ROUTE"] == "fast"
    assert args["FORK_REVISION"] == git(repo, "rev-parse", "HEAD").stdout.strip()
    # Every build arg the command passes is declared in the Dockerfile (a typo would be ignored).
    declared = (repo / "Dockerfile").read_text()
    for name in args:
        assert f"ARG {name}" in declared, name


def test_record_credentials_never_reach_the_context(repo, real):
    # The real record, with a remote URL holding credentials (as VLLM_FORK_OPS_REMOTES may).
    record_file = repo / "dist" / (real.name + ".provenance.json")
    record = json.loads(record_file.read_text())
    record["ops"]["remote"] = "https://user:s3cret@cache.example/ops"
    record_file.write_text(json.dumps(record))
    img.plan_image(root=repo)
    staged = repo / "build" / "docker" / "dist" / (real.name + ".provenance.json")
    text = staged.read_text()
    assert "s3cret" not in text and "user:" not in text
    assert json.loads(text)["ops"]["remote"] == "https://cache.example/ops"
    assert json.loads(text)["timings"] == real.record["timings"]  # every other field is kept


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
    assert build_args(cmd)["FORK_BASE_REF"] == f"vllm/vllm-openai:{PIN.tag}@{digest}"
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
    dockerfile.write_text(pinned.replace(f"ARG VLLM_BASE_TAG={PIN.tag}", "ARG VLLM_BASE_TAG=v0.32.0"))
    with pytest.raises(ForkError, match="pins VLLM_BASE_DIGEST for v0.32.0"):
        img.plan_image(root=repo)


def test_a_stale_wheel_is_refused(repo, real):
    (repo / "patches" / real.first_patch).write_bytes(b"changed\n")
    with pytest.raises(ForkError, match=f"{real.first_patch} changed since the wheel was built"):
        img.plan_image(root=repo)
    plan = img.plan_image(root=repo, allow_stale=True)
    assert any("stale" in n for n in plan.notes)


def test_no_wheel_or_no_record_says_what_to_run(repo, real):
    (repo / "dist" / (real.name + ".provenance.json")).unlink()
    with pytest.raises(ForkError, match="Run `invoke build` first"):
        img.plan_image(root=repo)
    with pytest.raises(ForkError, match="has no provenance record"):
        img.plan_image(root=repo, wheel=repo / "dist" / real.name)


def test_newest_wheel_for_the_pin_is_chosen(repo, real):
    tag = real.name.split("-", 2)[2]
    add_wheel(real, repo / "dist", f"vllm-0.32.0+fork.old-{tag}")  # another pin: never chosen
    # Sorts before the real one by name: only its newer mtime makes it the choice.
    newer = add_wheel(real, repo / "dist", f"vllm-{PIN.version}+fork.000000-{tag}", copy=True)
    os.utime(newer, (2_000_000_000, 2_000_000_000))
    (cmd,) = img.plan_image(root=repo).commands
    assert build_args(cmd)["FORK_VERSION"] == f"{PIN.version}+fork.000000"


def run_invoke(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", "docker", *args], cwd=repo, capture_output=True, text=True)


def test_invoke_docker_dry_run_prints_the_exact_command(repo):
    proc = run_invoke(repo, "--dry-run", "--tag", "reg.example/vllm:prod")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    cmd = shlex.split(line)
    # The builder this machine has: buildx where the client has the plugin, else `docker build`.
    kind = builder_kind()
    assert cmd == img.plan_image(root=repo, tags=["reg.example/vllm:prod"], builder=kind).commands[0]
    assert cmd[:3] == (["docker", "buildx", "build"] if kind == BUILDX else ["docker", "build", "--file"])
    assert "pinned by tag only" in proc.stderr  # no digest in the Dockerfile yet: said so


def test_invoke_docker_without_buildx_fails_clearly(repo):
    if shutil.which("docker") and subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode == 0:
        pytest.skip("docker buildx is available here: this test is for machines without it")
    proc = run_invoke(repo)
    assert proc.returncode == 1
    assert "error:" in proc.stderr and "--dry-run" in proc.stderr and "Traceback" not in proc.stderr


def test_wheel_from_build_plans_the_wheel_stage(repo, real, cache, tmp_path, monkeypatch):
    # A cache holding the sdist, an unrelated file and the artifact the committed index lists.
    (cache / "downloads").mkdir(parents=True)
    (cache / "downloads" / PIN.sdist.filename).write_bytes(b"sdist")
    (cache / "downloads" / "unrelated.whl").write_bytes(b"x")
    artifact = opscache.ops_dir() / opscache.lookup(real.record["ops"]["key"], repo).file
    artifact.write_bytes(b"artifact")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    (tmp_path / "pip.conf").write_text("[global]\nindex-url = https://u:p@idx.example/simple\n")
    cmd, out = img.plan_wheel(root=repo, source="build")
    assert arg(cmd, "--target") == ["wheel"] and build_args(cmd) == {"WHEEL_FROM": "build"}
    assert arg(cmd, "--output") == [f"type=local,dest={out}"]
    assert arg(cmd, "--secret") == [f"id=pip.conf,src={tmp_path / 'pip.conf'}"]
    seed = repo / "build" / "docker" / "ops-seed"
    assert arg(cmd, "--build-context") == [f"ops-seed={seed}"]
    seeded = sorted(str(p.relative_to(seed)) for p in seed.rglob("*") if p.is_file())
    # The sdist and the artifact the index lists under `file` (as opscache.put writes it).
    assert seeded == [f"downloads/{PIN.sdist.filename}", str(artifact.relative_to(cache))]
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


def test_collect_and_export_ops_inside_the_stage(tmp_path, real, real_cache):
    dist, out = tmp_path / "dist", tmp_path / "out"
    add_wheel(real, dist)
    assert docker_stage.main(["collect", str(dist), str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [real.name, real.name + ".provenance.json"]
    # The record's artifact (as build.py records opscache's entry), found in the cache by its `file`.
    record = str(out / (real.name + ".provenance.json"))
    assert docker_stage.main(["export-ops", record, str(real_cache), str(tmp_path / "ops")]) == 0
    entry = real.record["ops"]["artifact"]
    exported = tmp_path / "ops" / "ops" / entry["file"]  # laid out as in the cache
    assert exported.stat().st_size == entry["size"]
    add_wheel(real, dist, real.name.replace("+fork.", "+fork.other"))
    assert docker_stage.main(["collect", str(dist), str(tmp_path / "out2")]) == 1  # two wheels: refuse


# The Dockerfile's delta and final stages are run for real in tests/integration/test_image_delta.py.
