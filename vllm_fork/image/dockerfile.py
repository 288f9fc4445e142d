"""The Dockerfile and the `docker buildx build` commands: build arguments, base image, labels."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.fs import write_atomic
from vllm_fork.image.wheel import ForkWheel
from vllm_fork.upstream.pin import Pin

DOCKERFILE = "Dockerfile"
#: Build-argument names in the Dockerfile for the base image.
BASE_ARGS = ("VLLM_BASE_IMAGE", "VLLM_BASE_TAG", "VLLM_BASE_DIGEST")
LABEL_PREFIX = "vllm-fork"


def dockerfile_args(dockerfile: Path) -> dict[str, str]:
    """The defaults of the global `ARG`s (those before the first FROM)."""
    args: dict[str, str] = {}
    for line in logical_lines(dockerfile.read_text()):
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            break
        if word.upper() == "ARG":
            name, eq, default = rest.strip().partition("=")
            args[name] = default.strip().strip('"') if eq else ""
    return args


def retarget_base(dockerfile: Path, old_tag: str, new_tag: str) -> bool:
    """Point the Dockerfile's base image at a new release (after a rebase).

    The digest pinned for the old tag no longer applies, so it is cleared; the
    docs/docker.md says how to pin the new one. Returns whether the file changed.
    """
    if not dockerfile.exists():
        return False
    text = dockerfile.read_text()
    new = re.sub(r"(?m)^ARG VLLM_BASE_TAG=.*$", f"ARG VLLM_BASE_TAG={new_tag}", text)
    new = re.sub(r"(?m)^ARG VLLM_BASE_DIGEST=.*$", "ARG VLLM_BASE_DIGEST=", new)
    if old_tag:
        new = new.replace(f"vllm/vllm-openai:{old_tag}", f"vllm/vllm-openai:{new_tag}")
    if new == text:
        return False
    write_atomic(dockerfile, new.encode())
    return True


def logical_lines(text: str) -> list[str]:
    """Dockerfile instructions with continuations joined and comments dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or not stripped:
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append((current + stripped).strip())
        current = ""
    if current:
        lines.append(current.strip())
    return lines


def base_image(dockerfile: Path, pin: Pin, digest: str | None = None) -> dict[str, str]:
    """The base image build args: upstream's image at the pinned tag, by digest when known.

    The Dockerfile's default digest belongs to its default tag; it is used only while the
    pin still names that tag (after a rebase the old digest would pull the old release).
    """
    defaults = dockerfile_args(dockerfile)
    missing = [a for a in BASE_ARGS if a not in defaults]
    if missing:
        raise ForkError(f"{dockerfile} lacks the global build argument(s) {', '.join(missing)}")
    if digest is None:
        digest = defaults["VLLM_BASE_DIGEST"]
        if digest and defaults["VLLM_BASE_TAG"] != pin.tag:
            raise ForkError(
                f"{dockerfile} pins VLLM_BASE_DIGEST for {defaults['VLLM_BASE_TAG']}, but "
                f"upstream.toml pins {pin.tag}. Update VLLM_BASE_TAG and VLLM_BASE_DIGEST there "
                f"(`docker buildx imagetools inspect {defaults['VLLM_BASE_IMAGE']}:{pin.tag}` "
                "prints the digest), or pass --base-digest."
            )
    if digest and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ForkError(f"base digest {digest!r} is not of the form sha256:<64 hex digits>")
    return {
        "VLLM_BASE_IMAGE": defaults["VLLM_BASE_IMAGE"],
        "VLLM_BASE_TAG": pin.tag,
        "VLLM_BASE_DIGEST": digest,
    }


def image_labels(wheel: ForkWheel, base: dict[str, str], revision: str | None) -> dict[str, str]:
    """Build args carrying the provenance into the image's OCI labels (see the Dockerfile)."""
    rec = wheel.record
    patches = [{"name": p["name"], "sha256": p.get("sha256", "")} for p in rec["series"]["patches"]]
    ops = rec["ops"]
    artifact = ops.get("artifact") or {}
    return {
        "FORK_VERSION": wheel.version,
        "FORK_REVISION": revision or "",
        "FORK_PIN_VERSION": str(rec["pin"]["version"]),
        "FORK_PIN_TAG": str(rec["pin"]["tag"]),
        "FORK_PIN_COMMIT": str(rec["pin"]["commit"]),
        "FORK_SERIES_LABEL": str(rec["series"]["label"]),
        "FORK_SERIES_PATCHES": json.dumps(patches, separators=(",", ":")),
        "FORK_OPS_KEY": str(ops["key"]),
        "FORK_OPS_ARTIFACT_SHA256": str(artifact.get("sha256", "")) if isinstance(artifact, dict) else "",
        "FORK_ROUTE": str(rec.get("route", "")),
        "FORK_BASE_REF": base_ref(base),
    }


def base_ref(base: dict[str, str]) -> str:
    ref = f"{base['VLLM_BASE_IMAGE']}:{base['VLLM_BASE_TAG']}"
    return f"{ref}@{base['VLLM_BASE_DIGEST']}" if base["VLLM_BASE_DIGEST"] else ref


def default_tag(version: str) -> str:
    # Docker tags cannot hold '+', PEP 440's local-version separator.
    return f"vllm-fork/vllm-openai:{version.replace('+', '-')}"


def check_platform(platform: str | None, wheel_platform: str) -> str:
    if platform and platform != wheel_platform:
        raise ForkError(
            f"--platform {platform}: the wheel is built for {wheel_platform} only "
            "(as is upstream's image it replaces vllm in)"
        )
    return wheel_platform


def _build_arg_flags(args: dict[str, str]) -> list[str]:
    flags: list[str] = []
    for name, value in args.items():
        flags += ["--build-arg", f"{name}={value}"]
    return flags


def image_command(
    *,
    root: Path,
    staged: Path,
    wheel: ForkWheel,
    base: dict[str, str],
    tags: list[str],
    platform: str,
    push: bool,
    revision: str | None = None,
    builder: str = "buildx",
) -> list[str]:
    """The build of the final image from the wheel staged in build/docker/dist (route `dist`).

    `builder` is "buildx" (`docker buildx build`, loads or pushes) or "buildkit" (`docker
    build` with DOCKER_BUILDKIT=1, which loads into the engine): the staged wheel is read
    from the main build context, so neither needs named build contexts.
    """
    prefix = ["docker", "buildx", "build"] if builder == "buildx" else ["docker", "build"]
    cmd = [*prefix, "--file", str(root / DOCKERFILE), "--target", "image"]
    # The dist route's steps need no network (a local wheel, --no-deps): none is given.
    cmd += ["--platform", platform, "--network=none"]
    cmd += _build_arg_flags({"WHEEL_FROM": "dist", **base, **image_labels(wheel, base, revision)})
    for tag in tags:
        cmd += ["--tag", tag]
    if builder == "buildx":
        cmd += ["--push"] if push else ["--load"]
    cmd.append(str(root))
    return cmd


def wheel_command(
    *, root: Path, source: str, out: Path, platform: str, seed: Path | None, pip_conf: Path | None
) -> list[str]:
    """`docker buildx build` of the Dockerfile's wheel stage, written out to `out` on the host."""
    cmd = ["docker", "buildx", "build", "--file", str(root / DOCKERFILE), "--target", "wheel"]
    cmd += ["--platform", platform, "--build-arg", f"WHEEL_FROM={source}"]
    if seed is not None:
        cmd += ["--build-context", f"ops-seed={seed}"]
    if pip_conf is not None:
        # A secret mount: pip's index credentials never enter a layer or the build cache.
        cmd += ["--secret", f"id=pip.conf,src={pip_conf}"]
    cmd += ["--output", f"type=local,dest={out}"]
    cmd.append(str(root))
    return cmd


def pip_conf_file() -> Path | None:
    """The user's pip config file, to pass as a secret to in-Docker builds (index and credentials)."""
    env = os.environ.get("PIP_CONFIG_FILE")
    candidates = [Path(env)] if env else []
    candidates += [Path.home() / ".config" / "pip" / "pip.conf", Path.home() / ".pip" / "pip.conf"]
    return next((p for p in candidates if p.is_file()), None)


def render(cmd: list[str]) -> str:
    return shlex.join(cmd)
