"""The stand-in base image: upstream's `vllm/vllm-openai` made here from Debian and PyPI.

Upstream's image cannot be pulled here (no registry), so the image tests build the fork's
image over a stand-in made the way upstream's docker/Dockerfile makes it: a Debian root
filesystem (`mmdebstrap`, Debian's packages), python3, `python3 -m pip install uv`, the
official vLLM wheel installed with `uv pip install --system` (UV_COMPILE_BYTECODE=1, as
upstream), the `vllm-rs` symlink on PATH and `ENTRYPOINT ["vllm", "serve"]`. `--no-deps`:
nothing here runs a GPU; only what `import vllm` needs is added (standin.toml).

Built once per machine and cached under the cache directory by a content key (the recipe,
the official wheel's sha256, the other wheels' names): `image-base/<key>/` holds it as an
OCI image (manifest, config, gzip layers), which `push_layout` pushes into any registry
and from there any engine pulls it. Building needs an engine (the tests start one).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from vllm_fork.core.errors import ForkError
from vllm_fork.core.fs import link_or_copy, sha256_file
from vllm_fork.core.log import LogFn
from vllm_fork.core.paths import REPO_ROOT, cache_dir
from vllm_fork.image.engine import Engine
from vllm_fork.upstream.download import fetch
from vllm_fork.upstream.pin import Pin, load_pin

RECIPE_FILE = Path(__file__).with_name("standin.toml")
#: Bumped when the build steps below change in a way the recipe file does not show.
RECIPE_VERSION = "1"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
#: Labels the stand-in carries so the daemonless push knows where its vllm is installed.
LABEL_SITE_PACKAGES = "vllm-fork.base.site-packages"
LABEL_PYTHON = "vllm-fork.base.python"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

DOCKERFILE = """\
# The stand-in for vllm/vllm-openai (see vllm_fork/image/base.py); steps as upstream's.
FROM {rootfs}
ENV PATH={path} LANG=C.UTF-8
# Upstream's interpreter (deadsnakes python3.12) carries no PEP 668 marker; Debian's does.
RUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
# upstream: RUN python3 -m pip install uv
RUN --mount=type=bind,source=uv,target=/tmp/uv \\
    python3 -m pip install --no-cache-dir --no-index /tmp/uv/*.whl
ENV UV_LINK_MODE=copy UV_COMPILE_BYTECODE=1
RUN --mount=type=bind,source=deps,target=/tmp/deps \\
    uv pip install --system --no-deps --offline --no-cache /tmp/deps/*.whl
# upstream: uv pip install --system dist/*.whl (its dependencies are in the line above)
WORKDIR /vllm-workspace
RUN --mount=type=bind,source=dist,target=/vllm-workspace/dist \\
    uv pip install --system --no-deps --offline --no-cache dist/*.whl
# upstream: expose the Rust frontend bundled in the wheel on the container's PATH.
RUN ln -s "$(python3 -c 'import sysconfig; print(sysconfig.get_path("platlib"))')/vllm/vllm-rs" /usr/local/bin/vllm-rs \\
    && vllm-rs --version
LABEL {label_site}="{site}" {label_python}="{python}" vllm-fork.standin.key="{key}"
ENTRYPOINT ["vllm", "serve"]
"""


@dataclass(frozen=True)
class StandIn:
    """The cached stand-in: an OCI image layout-like directory and what is known about it."""

    key: str
    path: Path  # image-base/<key>/
    info: dict

    @property
    def manifest(self) -> bytes:
        return (self.path / "manifest.json").read_bytes()

    @property
    def config(self) -> bytes:
        return (self.path / "config.json").read_bytes()

    def blob(self, digest: str) -> Path:
        return self.path / "blobs" / digest.split(":", 1)[1]

    @property
    def tag(self) -> str:
        return self.info["tag"]


def recipe() -> dict:
    return tomllib.loads(RECIPE_FILE.read_text())


def standin_key(pin: Pin) -> str:
    """The cache key: everything the stand-in is made from, as text."""
    rec = recipe()
    text = json.dumps(
        {
            "recipe_version": RECIPE_VERSION,
            "recipe": rec,
            "dockerfile": DOCKERFILE,
            "wheel": {"file": pin.wheel.filename, "sha256": pin.wheel.sha256},
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def cached(pin: Pin | None = None) -> StandIn | None:
    pin = pin or load_pin(REPO_ROOT)
    key = standin_key(pin)
    path = cache_dir() / "image-base" / key
    info_file = path / "standin.json"
    if not info_file.is_file():
        return None
    return StandIn(key, path, json.loads(info_file.read_text()))


def ensure_standin(engine: Engine, pin: Pin | None = None, log: LogFn = print) -> StandIn:
    """The cached stand-in, built first if this machine has none for the current key."""
    pin = pin or load_pin(REPO_ROOT)
    found = cached(pin)
    if found:
        return found
    key = standin_key(pin)
    root = cache_dir() / "image-base"
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root, prefix=f".{key[:12]}."))
    try:
        info = _build(engine, pin, key, work, log)
        out = work / "image"
        (out / "standin.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        dest = root / key
        try:
            os.replace(out, dest)
        except OSError:
            if not (dest / "standin.json").is_file():  # another builder won the race: use theirs
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    built = cached(pin)
    assert built is not None, f"{root / key} was just put in place"
    return built


def _pip_download(specs: list[str], dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        str(dest),
        *specs,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ForkError(f"pip download {' '.join(specs)} failed (pip's configured index):\n{proc.stderr[-2000:]}")
    return sorted(dest.glob("*.whl"))


def _build(engine: Engine, pin: Pin, key: str, work: Path, log: LogFn) -> dict:
    rec = recipe()
    started = time.monotonic()
    timings: dict[str, float] = {}
    ctx = work / "context"
    official = fetch("vllm", pin.wheel.filename, pin.wheel.sha256)
    (ctx / "dist").mkdir(parents=True)
    link_or_copy(official, ctx / "dist" / official.name)
    wheels = cache_dir() / "image-base" / "wheels"
    for name, specs in (("uv", [rec["wheels"]["uv"]]), ("deps", rec["wheels"]["deps"])):
        staged = _pip_download(specs, work / f"pip-{name}")
        (ctx / name).mkdir()
        for whl in staged:
            kept = wheels / whl.name
            if not kept.exists():
                wheels.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(whl, kept)
            link_or_copy(kept, ctx / name / whl.name)
    timings["wheels_s"] = time.monotonic() - started

    t = time.monotonic()
    rootfs = work / "rootfs.tar"
    cmd = [
        "mmdebstrap",
        f"--variant={rec['rootfs']['variant']}",
        "--mode=root",
        f"--include={','.join(rec['rootfs']['packages'])}",
        rec["rootfs"]["suite"],
        str(rootfs),
    ]
    log(f"stand-in base: {' '.join(cmd)}")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ForkError(
            f"mmdebstrap failed (Debian's mirror in /etc/apt/sources.list must be reachable):\n{proc.stderr[-3000:]}"
        )
    timings["rootfs_s"] = time.monotonic() - t

    t = time.monotonic()
    rootfs_ref = f"vllm-fork-standin/rootfs:{key[:12]}"
    engine.run("import", "--change", f"ENV PATH={PATH_ENV}", str(rootfs), rootfs_ref)
    rootfs.unlink()
    probe = engine.run(
        "run",
        "--rm",
        "--network",
        "none",
        rootfs_ref,
        "python3",
        "-c",
        "import sys, sysconfig; print(sysconfig.get_path('platlib')); print('%d.%d' % sys.version_info[:2])",
    )
    site, python = probe.stdout.decode().split()
    tag = f"{rec['image']['repository']}:{pin.tag}"
    (ctx / "Dockerfile").write_text(
        DOCKERFILE.format(
            rootfs=rootfs_ref,
            path=PATH_ENV,
            key=key,
            site=site,
            python=python,
            label_site=LABEL_SITE_PACKAGES,
            label_python=LABEL_PYTHON,
        )
    )
    log(f"stand-in base: building {tag} ({engine.describe()})")
    engine.run("build", "--network=none", "--tag", tag, str(ctx))
    timings["image_s"] = time.monotonic() - t

    t = time.monotonic()
    layout = work / "image"
    with engine.output_stream("save", tag) as saved:
        manifest = layout_from_save(saved, layout, origin=f"`docker save {tag}`")
    timings["layout_s"] = time.monotonic() - t
    timings["total_s"] = time.monotonic() - started
    return {
        "key": key,
        "tag": tag,
        "site_packages": site,
        "python": python,
        "manifest_digest": "sha256:" + hashlib.sha256(manifest).hexdigest(),
        "timings": {k: round(v, 1) for k, v in timings.items()},
    }


#: Members of `docker save`'s tar up to this size are held in memory until the tar's
#: manifest.json says what they are (configs, small layers); larger ones can only be layers.
SMALL_MEMBER_BYTES = 8 << 20


def layout_from_save(saved: IO[bytes], out: Path, origin: str) -> bytes:
    """`docker save`'s tar, read once as a stream -> out/{manifest.json, config.json, blobs/<sha256>}
    (gzip layers, mtime 0).

    The tar (GBs for the stand-in) is never written to disk: every large member is gzipped into
    a blob as it arrives, small ones wait in memory for manifest.json, which docker writes
    after the blobs.
    """
    blobs = out / "blobs"
    blobs.mkdir(parents=True)
    small: dict[str, bytes] = {}
    packed: dict[str, tuple[Path, str, int]] = {}
    with tarfile.open(fileobj=saved, mode="r|") as tar:
        for member in tar:
            if not member.isfile():
                continue
            src = tar.extractfile(member)
            assert src is not None  # a regular file
            if member.size <= SMALL_MEMBER_BYTES:
                small[member.name] = src.read()
            else:
                packed[member.name] = _gzip_blob(src, blobs)
    if "manifest.json" not in small:
        raise ForkError(f"{origin}: no manifest.json in its output; build the stand-in again")
    index = json.loads(small["manifest.json"])
    if len(index) != 1:
        raise ForkError(f"{origin}: expected one image in docker save's output, found {len(index)}")
    entry = index[0]
    if entry["Config"] not in small:
        raise ForkError(f"{origin}: the image config {entry['Config']} is missing or too large")
    config = small[entry["Config"]]
    layers = []
    for name in entry["Layers"]:
        if name in packed:
            tmp, digest, size = packed.pop(name)
        elif name in small:
            tmp, digest, size = _gzip_blob(io.BytesIO(small[name]), blobs)
        else:
            raise ForkError(f"{origin}: layer {name} is not in its output; build the stand-in again")
        os.replace(tmp, blobs / digest)
        layers.append({"mediaType": OCI_LAYER_GZIP, "digest": f"sha256:{digest}", "size": size})
    for tmp, _, _ in packed.values():  # members no manifest names
        tmp.unlink()
    config_digest = hashlib.sha256(config).hexdigest()
    (blobs / config_digest).write_bytes(config)
    (out / "config.json").write_bytes(config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": f"sha256:{config_digest}", "size": len(config)},
            "layers": layers,
        },
        indent=2,
        sort_keys=True,
    ).encode()
    (out / "manifest.json").write_bytes(manifest)
    return manifest


def _gzip_blob(src: IO[bytes], blobs: Path) -> tuple[Path, str, int]:
    """Gzip `src` into a new temp file under `blobs`: (its path, the gzip's sha256, its size)."""
    digest = hashlib.sha256()
    # Level 1: the stand-in is big and local; the digest only has to be stable here.
    with (
        tempfile.NamedTemporaryFile(dir=blobs, prefix=".layer-", suffix=".gz", delete=False) as raw,
        gzip.GzipFile(fileobj=_Tee(raw, digest), mode="wb", compresslevel=1, mtime=0) as gz,
    ):
        shutil.copyfileobj(src, gz, 1 << 20)
    tmp = Path(raw.name)
    return tmp, digest.hexdigest(), tmp.stat().st_size


class _Tee:
    """A write-only file that also feeds a hash (the compressed bytes' digest, in one pass)."""

    def __init__(self, raw: IO[bytes], digest: hashlib._Hash) -> None:
        self.raw, self.digest = raw, digest

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def verified_blob(standin: StandIn, digest: str) -> Path:
    path = standin.blob(digest)
    if sha256_file(path) != digest.split(":", 1)[1]:
        raise ForkError(f"{path} does not match its digest {digest}: remove {standin.path} to rebuild the stand-in")
    return path
