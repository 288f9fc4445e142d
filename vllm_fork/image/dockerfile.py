"""The Dockerfile and the `docker buildx build` commands: build arguments, base image, labels.

The Dockerfile is read with `dockerfile-parse` (continuations, comments, the escape
directive, both ENV/LABEL forms, variable expansion), not by hand.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

from dockerfile_parse import DockerfileParser
from dockerfile_parse.parser import image_from
from dockerfile_parse.util import WordSplitter

from vllm_fork.core.errors import ForkError
from vllm_fork.core.fs import write_atomic
from vllm_fork.core.image_ref import ImageRef
from vllm_fork.image.wheel import ForkWheel
from vllm_fork.upstream.pin import Pin

DOCKERFILE = "Dockerfile"
#: Build-argument names in the Dockerfile for the base image.
BASE_ARGS = ("VLLM_BASE_IMAGE", "VLLM_BASE_TAG", "VLLM_BASE_DIGEST")
LABEL_PREFIX = "vllm-fork"


def parse(dockerfile: Path, build_args: dict[str, str] | None = None, base_env: dict | None = None) -> Any:
    """The Dockerfile's parser; `base_env` is the environment a stage's base image sets."""
    try:
        data = dockerfile.read_bytes()
    except OSError as exc:
        raise ForkError(f"cannot read {dockerfile}: {exc.strerror or exc}") from None
    return DockerfileParser(
        fileobj=io.BytesIO(data), env_replace=True, build_args=dict(build_args or {}), parent_env=dict(base_env or {})
    )


def dockerfile_args(dockerfile: Path) -> dict[str, str]:
    """The defaults of the global `ARG`s (those before the first FROM)."""
    args: dict[str, str] = {}
    for insn in parse(dockerfile).structure:
        if insn["instruction"] == "FROM":
            break
        if insn["instruction"] == "ARG":
            name, eq, default = insn["value"].strip().partition("=")
            args[name] = WordSplitter(default).dequote() if eq else ""
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
    """Dockerfile instructions (keyword upper-cased) with continuations joined and comments dropped."""
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()), env_replace=False)
    return [f"{i['instruction']} {i['value'].strip()}" for i in parser.structure if i["instruction"] != "COMMENT"]


HEALTHCHECK_OPTIONS = {
    "interval": "Interval",
    "timeout": "Timeout",
    "start-period": "StartPeriod",
    "start-interval": "StartInterval",
    "retries": "Retries",
}
_MODIFIER = re.compile(r"\$\{\w+:[-+?]")


def stage_config(dockerfile: Path, stage: str, build_args: dict[str, str], base_env: list[str]) -> dict:
    """What a stage sets in the image config: Labels, Env, ExposedPorts, Healthcheck, Entrypoint, Cmd.

    Variables expand as `docker build` expands them: the build arguments, the stage's
    ARGs and ENVs, and the base image's environment (`base_env`, its `KEY=value` list),
    so `ENV PATH=/opt/bin:${PATH}` extends the base's PATH. A shell-form ENTRYPOINT or CMD
    becomes `["/bin/sh", "-c", ...]` and a shell-form HEALTHCHECK `CMD-SHELL`, as Docker
    makes them. Entrypoint and Cmd are None when the stage does not set them.
    """
    env = {key: value for key, _, value in (e.partition("=") for e in base_env)}
    parser = parse(dockerfile, build_args, env)
    out: dict[str, Any] = {"Labels": {}, "Env": {}, "ExposedPorts": {}, "Healthcheck": None}
    out["Entrypoint"] = out["Cmd"] = None
    current: str | None = None
    for insn, context in zip(parser.structure, parser.context_structure, strict=True):
        word, value, line = insn["instruction"], insn["value"].strip(), insn["startline"] + 1
        if word == "FROM":
            current = image_from(value)[1]
            continue
        if current != stage:
            continue
        where = f"{dockerfile}:{line}"
        if word in ("ENV", "LABEL") and _MODIFIER.search(value):
            raise ForkError(
                f"{where}: {word} uses ${{NAME:-...}}-style expansion, which the registry route does not "
                "read; write it with plain ${NAME}"
            )
        if word == "ENV":
            out["Env"].update(context.line_envs)
        elif word == "LABEL":
            out["Labels"].update(context.line_labels)
        elif word == "EXPOSE":
            for port in WordSplitter(value, args=context.args, envs=context.envs).split():
                out["ExposedPorts"][port if "/" in port else f"{port}/tcp"] = {}
        elif word in ("ENTRYPOINT", "CMD"):
            out["Entrypoint" if word == "ENTRYPOINT" else "Cmd"] = command(value)
        elif word == "HEALTHCHECK":
            out["Healthcheck"] = healthcheck(value, where)
    return out


def command(value: str) -> list[str]:
    """An exec-form (JSON array of strings) or shell-form instruction's argument list."""
    if value.startswith("["):
        try:
            argv = json.loads(value)
        except ValueError:
            argv = None
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            return argv
    # Docker takes what is not a JSON array of strings as shell form.
    return ["/bin/sh", "-c", value]


def healthcheck(value: str, where: str) -> dict:
    """HEALTHCHECK [--option=value ...] CMD ... | NONE, as the image config's Healthcheck."""
    match = re.fullmatch(r"((?:--[\w-]+=\S+\s+)*)(CMD|NONE)\b\s*(.*)", value, re.IGNORECASE | re.DOTALL)
    if not match:
        raise ForkError(f"{where}: cannot read HEALTHCHECK {value!r} (expected [--option=value ...] CMD ... or NONE)")
    if match[2].upper() == "NONE":
        return {"Test": ["NONE"]}
    argv = command(match[3])
    check: dict[str, Any] = {"Test": ["CMD", *argv] if argv[:2] != ["/bin/sh", "-c"] else ["CMD-SHELL", match[3]]}
    for option in match[1].split():
        name, _, text = option[2:].partition("=")
        key = HEALTHCHECK_OPTIONS.get(name)
        if key is None:
            raise ForkError(f"{where}: unknown HEALTHCHECK option --{name}")
        check[key] = int(text) if key == "Retries" else duration_ns(text, where)
    return check


def duration_ns(text: str, where: str) -> int:
    """A Go duration (`30s`, `1m30s`, `500ms`) in nanoseconds, as Docker reads HEALTHCHECK's."""
    units = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ForkError(f"{where}: cannot read the duration {text!r} in HEALTHCHECK (e.g. 30s, 1m30s)")
    return round(sum(float(n) * units[u] for n, u in parts))


def base_image(dockerfile: Path, pin: Pin, digest: str | None = None, repository: str | None = None) -> dict[str, str]:
    """The base image build args: upstream's image at the pinned tag, by digest when known.

    The Dockerfile's default digest belongs to its default tag; it is used only while the
    pin still names that tag (after a rebase the old digest would pull the old release).
    `repository` (--base-image) replaces the Dockerfile's; `REPO@sha256:...` pins it by digest.
    """
    if repository:
        given = ImageRef.parse(repository).digest  # checks the name and the digest
        repository = repository.partition("@")[0]
        if ":" in repository.rsplit("/", 1)[-1]:
            raise ForkError(f"--base-image {repository}: give the repository only (the tag is the pin's, {pin.tag})")
        if given and digest and given != digest:
            raise ForkError(f"--base-image {repository}@{given} and --base-digest {digest} name two digests; give one")
        digest = given or digest
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
        "VLLM_BASE_IMAGE": repository or defaults["VLLM_BASE_IMAGE"],
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
