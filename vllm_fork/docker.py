"""The deployment image: stage the build context and form the `docker buildx build` command.

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

The helpers the Dockerfile's wheel stages run are in `docker_stage`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from .errors import ForkError
from .gitutil import git
from .paths import REPO_ROOT, cache_dir, patches_dir
from .pin import Pin, load_pin, write_atomic

DOCKERFILE = "Dockerfile"
#: Where `invoke docker` stages what it hands to the builder (under build/, git-ignored).
STAGE_DIR = Path("build") / "docker"
WHEEL_SOURCES = ("dist", "build", "compile")
#: Build-argument names in the Dockerfile for the base image.
BASE_ARGS = ("VLLM_BASE_IMAGE", "VLLM_BASE_TAG", "VLLM_BASE_DIGEST")
RECORD_SUFFIX = ".provenance.json"
LABEL_PREFIX = "vllm-fork"
#: Wheel platform tag -> Docker platform. The wheel decides what the image can run on.
PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}

_WHEEL_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)


@dataclass(frozen=True)
class ForkWheel:
    """A patched wheel in dist/ and its provenance record (as `invoke build` wrote it)."""

    path: Path
    record: dict

    @property
    def record_path(self) -> Path:
        return record_path(self.path)

    @property
    def version(self) -> str:
        return _WHEEL_RE.match(self.path.name)["version"]

    @property
    def platform(self) -> str:
        """The Docker platform the wheel runs on, from its platform tag."""
        tag = _WHEEL_RE.match(self.path.name)["platform"]
        for arch, platform in PLATFORMS.items():
            if tag.endswith(arch):
                return platform
        raise ForkError(f"{self.path.name}: no Linux platform for wheel platform tag {tag!r}")


def record_path(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + RECORD_SUFFIX)


def _required(record: dict, dotted: str, where: Path):
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ForkError(
                f"{where} lacks `{dotted}`: it is not a provenance record `invoke build` wrote. "
                "Run `invoke build` again."
            )
        value = value[key]
    return value


def load_wheel(wheel: Path) -> ForkWheel:
    """The wheel and its record, checked for the fields the image labels need."""
    wheel = Path(wheel)
    if not wheel.is_file() or not _WHEEL_RE.match(wheel.name):
        raise ForkError(f"{wheel} is not a wheel file. Run `invoke build` to make one in dist/.")
    rec_path = record_path(wheel)
    try:
        record = json.loads(rec_path.read_text())
    except FileNotFoundError:
        raise ForkError(
            f"{wheel.name} has no provenance record ({rec_path.name}) beside it; the image "
            "labels come from it. Run `invoke build` to make the wheel and its record."
        ) from None
    except json.JSONDecodeError as exc:
        raise ForkError(f"{rec_path} is not valid JSON ({exc}). Run `invoke build` again.") from None
    for field in ("pin.version", "pin.tag", "pin.commit", "series.label", "series.patches", "ops.key"):
        _required(record, field, rec_path)
    return ForkWheel(wheel, record)


def find_wheel(dist: Path, pin: Pin) -> ForkWheel:
    """The newest wheel in `dist` built on the pinned release and carrying a record."""
    prefix = f"vllm-{pin.version}+"
    candidates = [
        p for p in Path(dist).glob("vllm-*.whl") if p.name.startswith(prefix) and record_path(p).is_file()
    ]
    if not candidates:
        raise ForkError(
            f"no patched wheel for vLLM {pin.version} with a provenance record in {dist}. "
            "Run `invoke build` first, or pass `--wheel PATH`, or build the wheel inside "
            "Docker with `invoke docker --wheel-from build`."
        )
    newest = max(candidates, key=lambda p: (p.stat().st_mtime_ns, p.name))
    return load_wheel(newest)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stale_reasons(wheel: ForkWheel, pin: Pin, patches: Path) -> list[str]:
    """Why the wheel is not the build of the current pin and patch series (empty: it is)."""
    reasons: list[str] = []
    rec_pin = wheel.record["pin"]
    for field in ("version", "tag"):
        if str(rec_pin.get(field)) != str(getattr(pin, field)):
            reasons.append(
                f"pin {field} is {rec_pin.get(field)!r} in the record, {getattr(pin, field)!r} in upstream.toml"
            )
    built = {p["name"]: p.get("sha256") for p in wheel.record["series"]["patches"]}
    series_file = patches / "series"
    current_names = (
        [ln.strip() for ln in series_file.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        if series_file.is_file()
        else []
    )
    if list(built) != current_names:
        reasons.append(f"the series is {current_names} now, {list(built)} when the wheel was built")
    else:
        for name in current_names:
            path = patches / name
            if path.is_file() and built[name] and sha256_bytes(path.read_bytes()) != built[name]:
                reasons.append(f"{name} changed since the wheel was built")
    return reasons


def _strip_userinfo(value):
    """A copy of a JSON value with credentials removed from any URL in it."""
    if isinstance(value, dict):
        return {k: _strip_userinfo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_userinfo(v) for v in value]
    if isinstance(value, str) and "@" in value and "://" in value:
        parts = urllib.parse.urlsplit(value)
        if parts.username or parts.password:
            host = parts.hostname or ""
            netloc = host + (f":{parts.port}" if parts.port else "")
            return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return value


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def stage_dist(wheel: ForkWheel, dest: Path) -> Path:
    """Make `dest` hold exactly the wheel and its record (credentials stripped from URLs).

    Built beside `dest` and renamed into place, so a failure leaves the old staging intact.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would follow the files into the build
        _link_or_copy(wheel.path, tmp / wheel.path.name)
        clean = _strip_userinfo(wheel.record)
        (tmp / record_path(wheel.path).name).write_text(json.dumps(clean, indent=2, sort_keys=True) + "\n")
        old = dest.with_name(f".{dest.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def dockerfile_args(dockerfile: Path) -> dict[str, str]:
    """The defaults of the global `ARG`s (those before the first FROM)."""
    args: dict[str, str] = {}
    for line in _logical_lines(dockerfile.read_text()):
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
    README says how to pin the new one. Returns whether the file changed.
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


def _logical_lines(text: str) -> list[str]:
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
                _link_or_copy(path, target)
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
    """The file name of every artifact in the ops cache index (`file`, as opscache writes it)."""
    from . import opscache  # the index's reader and layout are opscache's

    try:
        artifacts = opscache.read_index(root)["artifacts"]
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
    base = base_image(root / DOCKERFILE, pin, base_digest)
    if base_image_name:
        base["VLLM_BASE_IMAGE"] = base_image_name
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
    print(f"+ {render(cmd)}", file=sys.stderr)
    proc = subprocess.run(cmd, check=False, env=env)
    if proc.returncode != 0:
        raise ForkError(f"`{' '.join(cmd[:3])}` failed ({proc.returncode}); its output is above")
