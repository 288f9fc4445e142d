"""The deployment image: plan a build (stage the contexts, pick the command) and run it.

The image is upstream's `vllm/vllm-openai` for the pinned release with only the vllm
package replaced by the patched wheel (`Dockerfile`, final stage). The wheel comes
from one of three places, chosen by the Dockerfile's `WHEEL_FROM` build argument:

- `dist`: the wheel `invoke build` made on this host, handed in as the named build
  context `fork-dist` (the wheel and its provenance record, nothing else);
- `build`: `invoke build` run inside the builder on the cache-hit route;
- `compile`: the same on a CUDA devel image, for a cache miss.

`invoke docker` always builds the final image from a wheel on the host (route `dist`),
so the labels come from the wheel's own provenance record; with `--wheel-from
build|compile` it first runs the Dockerfile's wheel stage with `--output` to get it.

The Dockerfile and commands are in `image.dockerfile`, the wheel and its record in
`image.wheel`, the helpers the Dockerfile's wheel stages run in `image.stage`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core import log
from vllm_fork.core.errors import ForkError
from vllm_fork.core.fs import link_or_copy
from vllm_fork.core.git import git
from vllm_fork.core.paths import REPO_ROOT, cache_dir, patches_dir
from vllm_fork.image.dockerfile import (
    DOCKERFILE,
    base_image,
    base_ref,
    check_platform,
    default_tag,
    image_command,
    pip_conf_file,
    render,
    wheel_command,
)
from vllm_fork.image.wheel import find_wheel, load_wheel, stage_dist, stale_reasons
from vllm_fork.ops.cache import read_index
from vllm_fork.upstream.pin import Pin, load_pin

#: Where `invoke docker` stages what it hands to the builder (under build/, git-ignored).
STAGE_DIR = Path("build") / "docker"
WHEEL_SOURCES = ("dist", "build", "compile")


def fork_revision(root: Path) -> str | None:
    """The fork's commit, for the image's `revision` label (with `-dirty` for local edits)."""
    proc = git(root, "rev-parse", "--verify", "--quiet", "HEAD", check=False)
    head = proc.stdout.strip()
    if not head:
        return None
    dirty = git(root, "status", "--porcelain", "--untracked-files=no", check=False).stdout.strip()
    return head + ("-dirty" if dirty else "")


def stage_seed(root: Path, pin: Pin, dest: Path) -> Path:
    """A directory of cache files for an in-Docker build: the sdist and the ops artifacts.

    Laid out as in the cache (hard links where possible), so the wheel stage can copy it
    into its cache mount and `invoke build` finds them as it would on this host.
    Artifacts are the files named in ops-cache/index.json that this host's cache holds.
    """
    cache = cache_dir()
    wanted = {pin.sdist.filename} | _index_filenames(root)
    tmp = Path(tempfile.mkdtemp(dir=_mkdir(dest.parent), prefix=f".{dest.name}."))
    try:
        tmp.chmod(0o755)
        for path in cache.rglob("*"):
            if path.name in wanted and path.is_file() and not path.is_symlink():
                target = tmp / path.relative_to(cache)
                target.parent.mkdir(parents=True, exist_ok=True)
                link_or_copy(path, target)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _index_filenames(root: Path) -> set[str]:
    """The file name of every artifact in the ops cache index (`file`, as ops.cache writes it)."""
    try:
        artifacts = read_index(root)["artifacts"]
    except ForkError:
        return set()
    return {os.path.basename(entry["file"]) for entry in artifacts.values() if entry.get("file")}


@dataclass(frozen=True)
class Plan:
    """What `invoke docker` will run, in order, and what it prints on --dry-run."""

    commands: list[list[str]]
    notes: list[str]


def plan_image(
    *,
    root: Path = REPO_ROOT,
    wheel: Path | None = None,
    tags: list[str] | None = None,
    push: bool = False,
    platform: str | None = None,
    base_digest: str | None = None,
    allow_stale: bool = False,
    builder: str = "buildx",
    base_image_name: str | None = None,
) -> Plan:
    """Stage the wheel for the builder and form the final-image command (route `dist`).

    Staging happens on --dry-run too (hard links, cheap), so the printed command runs as is.
    """
    pin = load_pin(root)
    fork_wheel = load_wheel(wheel) if wheel else find_wheel(root / "dist", pin)
    notes: list[str] = []
    stale = stale_reasons(fork_wheel, pin, patches_dir(root))
    if stale:
        detail = "".join(f"\n  - {r}" for r in stale)
        if not allow_stale:
            raise ForkError(
                f"{fork_wheel.path.name} is not the build of the current pin and series:{detail}\n"
                "Run `invoke build` to rebuild it (or pass --allow-stale to ship it anyway)."
            )
        notes.append(f"warning: shipping a stale wheel:{detail}")
    base = base_image(root / DOCKERFILE, pin, base_digest, base_image_name)
    if not base["VLLM_BASE_DIGEST"]:
        notes.append(
            f"note: the base {base_ref(base)} is pinned by tag only; pin its digest with "
            "--base-digest or VLLM_BASE_DIGEST in the Dockerfile (see docs/docker.md)"
        )
    staged = stage_dist(fork_wheel, root / STAGE_DIR / "dist")
    cmd = image_command(
        root=root,
        staged=staged,
        wheel=fork_wheel,
        base=base,
        tags=list(tags or [default_tag(fork_wheel.version)]),
        platform=check_platform(platform, fork_wheel.platform),
        push=push,
        revision=fork_revision(root),
        builder=builder,
    )
    return Plan([cmd], notes)


def plan_wheel(
    *, root: Path = REPO_ROOT, source: str, platform: str | None = None, seed: bool = True
) -> tuple[list[str], Path]:
    """The command that builds the wheel inside Docker and writes it to the host; its output dir."""
    if source not in ("build", "compile"):
        raise ForkError(f"--wheel-from must be one of {WHEEL_SOURCES}, not {source!r}")
    pin = load_pin(root)
    out = root / STAGE_DIR / f"wheel-{source}"
    seed_dir = stage_seed(root, pin, root / STAGE_DIR / "ops-seed") if seed else None
    cmd = wheel_command(
        root=root,
        source=source,
        out=out,
        platform=check_platform(platform, "linux/amd64"),
        seed=seed_dir,
        pip_conf=pip_conf_file(),
    )
    return cmd, out


def run_command(cmd: list[str], env: dict[str, str] | None = None) -> None:
    log.info(f"+ {render(cmd)}")
    proc = subprocess.run(cmd, check=False, env=env)
    if proc.returncode != 0:
        raise ForkError(f"`{' '.join(cmd[:3])}` failed ({proc.returncode}); its output is above")
