"""`invoke docker`: the deployment image (upstream's vllm-openai with the patched wheel)."""

from __future__ import annotations

import sys
from pathlib import Path

from vllm_fork.cli.exit import user_errors
from vllm_fork.cli.usage import task
from vllm_fork.core.errors import ForkError
from vllm_fork.image import engine as engines
from vllm_fork.image import plan as img
from vllm_fork.image import registry_push
from vllm_fork.image.dockerfile import render


@task(
    auto_shortflags=False,  # -h must stay --help
    iterable=["tag"],
    help={
        "tag": "image tag (repeatable; default vllm-fork/vllm-openai:<wheel version, + as ->)",
        "push": "append the delta layer to the base image in the registry, without a Docker engine "
        "(each --tag is REGISTRY/REPO:TAG; the base must be in a registry: --base-image)",
        "platform": "target platform; must match the wheel (linux/amd64 for upstream's wheel)",
        "dry_run": "print the exact docker build command(s) and stop",
        "wheel": "the wheel to ship (default: the newest for the pin in dist/)",
        "wheel_from": "dist (a wheel made by `invoke build` here, default), build (invoke build "
        "inside Docker, cache hits only) or compile (the CUDA devel stage, for a cache miss)",
        "base_digest": "pin upstream's image by digest (sha256:...), overriding the Dockerfile's",
        "allow_stale": "ship a wheel built from another pin or series than the current one",
        "base_image": "the base image's repository (default the Dockerfile's vllm/vllm-openai; "
        "the tag is the pin's), e.g. a mirror or the stand-in base",
    },
)
def docker(
    c,
    tag=None,
    push=False,
    platform=None,
    dry_run=False,
    wheel=None,
    wheel_from="dist",
    base_digest=None,
    allow_stale=False,
    base_image=None,
):
    """Build the deployment image: upstream's vllm/vllm-openai with the patched wheel."""
    with user_errors():
        if wheel_from != "dist":
            if wheel:
                raise ForkError("--wheel and --wheel-from build|compile exclude each other")
            cmd, out = img.plan_wheel(source=wheel_from, platform=platform)
            if dry_run:
                print(render(cmd))
                print(f"# then: invoke docker --wheel {out}/dist/<the wheel it wrote>" + _rest(tag, push, platform))
                return
            engine = engines.find_engine()
            engines.require_named_contexts(engine, wheel_from)
            img.run_command([engine.client, *cmd[1:]], engine.environ())
            built = sorted((out / "dist").glob("vllm-*.whl"))
            if len(built) != 1:
                raise ForkError(f"the wheel stage wrote {len(built)} wheels to {out}/dist, expected one")
            wheel = built[0]
        if push:
            registry_push.run(
                wheel=Path(wheel) if wheel else None,
                tags=tag or [],
                platform=platform,
                base_digest=base_digest,
                base_repository=base_image,
                allow_stale=allow_stale,
                dry_run=dry_run,
            )
            return
        plan = img.plan_image(
            wheel=Path(wheel) if wheel else None,
            tags=tag or None,
            push=False,
            platform=platform,
            base_digest=base_digest,
            allow_stale=allow_stale,
            builder=engines.builder_kind(),
            base_image_name=base_image,
        )
        for note in plan.notes:
            print(note, file=sys.stderr)
        if dry_run:
            for cmd in plan.commands:
                print(render(cmd))
            return
        engine = engines.find_engine()
        print(f"building with {engine.describe()}", file=sys.stderr)
        for cmd in plan.commands:
            img.run_command([engine.client, *cmd[1:]], engine.environ())


def _rest(tags: list[str] | None, push: bool, platform: str | None) -> str:
    flags = "".join(f" --tag {t}" for t in tags or [])
    flags += " --push" if push else ""
    flags += f" --platform {platform}" if platform else ""
    return flags
