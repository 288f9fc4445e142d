"""`invoke docker --push` without a Docker engine: append the delta layer in the registry.

As `crane append`, `ko` and `jib` do: read the base image's manifest and config from the
registry, build one layer on this machine, upload it with a new config and manifest, and
tag the result. Nothing is pulled but the base's manifest and config (kilobytes); the
base's layers are mounted from its repository (or copied, when pushing to another
registry). The layer holds what the Dockerfile's `delta` and `image` stages put in theirs:

- the patched wheel's files whose bytes differ from the official wheel's (which is what
  upstream's image installed), and the new ones, at the base's site-packages;
- a whiteout for upstream's dist-info and for every file the patches removed;
- the new dist-info with an installed RECORD (every file, its hash), INSTALLER;
- bytecode for the changed and new sources, compiled here when this Python is the base's
  (else a whiteout for their stale bytecode: Python then compiles them at import);
- the `vllm` console script, as pip writes it; the provenance record and the delta manifest
  under /usr/share/vllm-fork/.

Every entry has a fixed owner, mode and mtime (the wheel's member date), entries are
sorted and gzip's header carries no time: the same wheel over the same base gives the same
layer, config and manifest digest on every machine. The config's labels, environment,
healthcheck and entrypoint are read from the Dockerfile's `image` stage, so both routes
describe the image the same way.
"""

from __future__ import annotations

import base64
import calendar
import csv
import gzip
import hashlib
import importlib.util
import io
import json
import marshal
import os
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from vllm_fork.core.errors import ForkError
from vllm_fork.core.image_ref import ImageRef
from vllm_fork.core.log import LogFn
from vllm_fork.core.paths import REPO_ROOT, patches_dir
from vllm_fork.image.base import LABEL_PYTHON, LABEL_SITE_PACKAGES
from vllm_fork.image.dockerfile import DOCKERFILE, base_image, check_platform, image_labels, stage_config
from vllm_fork.image.plan import fork_revision
from vllm_fork.image.wheel import ForkWheel, find_wheel, load_wheel, stale_reasons, strip_userinfo
from vllm_fork.ops.oci import Registry
from vllm_fork.upstream.download import fetch
from vllm_fork.upstream.pin import Pin, load_pin

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
#: Where upstream's vllm/vllm-openai installs vllm (python3.12 from deadsnakes, `uv pip install
#: --system`), for bases without the stand-in's labels. Not checkable from this machine.
UPSTREAM_LAYOUT = {"site_packages": "/usr/local/lib/python3.12/dist-packages", "python": "3.12"}
PROVENANCE_DIR = "usr/share/vllm-fork"
INSTALLER = "vllm-fork\n"
#: pip's console-script template (pip/_internal/operations/install/wheel.py), so the script
#: is the one the Dockerfile route's `pip install` writes.
SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from {module} import {attr}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit({attr}())
"""


# --- manifests and blobs ---------------------------------------------------------------------


def push_target(tag: str) -> ImageRef:
    """A --tag to push to: REGISTRY/REPOSITORY:TAG (a digest names what exists, not where to push)."""
    ref = ImageRef.parse(tag)
    if ref.digest:
        raise ForkError(f"--tag {tag}: push to a tag (REGISTRY/REPOSITORY:TAG), not a digest")
    return ref


def get_manifest(reg: Registry, reference: str) -> tuple[bytes, str]:
    """The manifest bytes and media type for a tag or digest."""
    try:
        with reg.open("GET", reg.url(f"manifests/{reference}"), headers={"Accept": ACCEPT}) as resp:
            return resp.read(), resp.headers.get("Content-Type", "").split(";")[0]
    except urllib.error.HTTPError as exc:
        raise ForkError(
            f"{reg.remote}:{reference}: the registry answered {exc.code} {exc.reason} for the "
            "base image's manifest; push the base there first, or name it with --base-image"
        ) from None
    except urllib.error.URLError as exc:
        raise ForkError(f"{reg.remote}: {reg.describe(exc)}") from None


def get_blob(reg: Registry, digest: str) -> bytes:
    try:
        with reg.open("GET", reg.url(f"blobs/{digest}")) as resp:
            data = resp.read()
    except urllib.error.HTTPError as exc:
        raise ForkError(f"{reg.remote}: the registry answered {exc.code} {exc.reason} for the blob {digest}") from None
    except urllib.error.URLError as exc:
        raise ForkError(f"{reg.remote}: {reg.describe(exc)}") from None
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise ForkError(f"{reg.remote}: blob {digest} does not match its digest")
    return data


def put_manifest(reg: Registry, reference: str, data: bytes, media_type: str) -> None:
    with reg.open("PUT", reg.url(f"manifests/{reference}"), data=data, headers={"Content-Type": media_type}) as resp:
        if resp.status not in (200, 201):
            raise ForkError(f"{reg.remote}: storing the manifest {reference} answered {resp.status}")


def mount_or_copy(src: Registry, dest: Registry, digest: str) -> None:
    """Make `dest` hold a blob `src` has: a cross-repository mount on one registry, else a copy."""
    if dest.has_blob(digest):
        return
    if src.endpoint == dest.endpoint:
        query = urllib.parse.urlencode({"mount": digest, "from": src.repository})
        with dest.open("POST", dest.url(f"blobs/uploads/?{query}"), data=b"") as resp:
            if resp.status == 201:
                return
            # 202: the registry started an ordinary upload instead; fall through and copy.
    with tempfile.TemporaryDirectory() as tmp:
        path = src.fetch_blob(digest.split(":", 1)[1], Path(tmp) / "blob")
        dest.push_blob(path, digest)


def platform_manifest(reg: Registry, tag: str, platform: str) -> tuple[bytes, str]:
    data, media = get_manifest(reg, tag)
    if media in (OCI_INDEX, DOCKER_LIST) or (not media and b'"manifests"' in data):
        os_, arch = platform.split("/")
        for m in json.loads(data)["manifests"]:
            p = m.get("platform", {})
            if p.get("os") == os_ and p.get("architecture") == arch:
                return get_manifest(reg, m["digest"])
        raise ForkError(f"{reg.remote}:{tag} has no {platform} image")
    return data, media or json.loads(data).get("mediaType", OCI_MANIFEST)


# --- the delta layer ---------------------------------------------------------------------


def _record(zf: zipfile.ZipFile, dist_info: str) -> dict[str, tuple[str, str]]:
    """RECORD as path -> (hash, size)."""
    rows = csv.reader(io.TextIOWrapper(zf.open(f"{dist_info}/RECORD"), encoding="utf-8"))
    return {row[0]: (row[1], row[2]) for row in rows if row}


def _dist_info(zf: zipfile.ZipFile) -> str:
    names = {n.split("/")[0] for n in zf.namelist() if n.split("/")[0].endswith(".dist-info")}
    if len(names) != 1:
        raise ForkError(f"{zf.filename}: expected one .dist-info directory, found {sorted(names)}")
    return names.pop()


def _b64_sha256(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclass
class LayerFile:
    path: str  # absolute, in the image
    data: bytes | None  # None: a whiteout or a directory
    mode: int = 0o644
    kind: str = "file"  # file | whiteout | dir


def delta_files(official: Path, patched: Path, site: str, python: str, mtime: int) -> tuple[list[LayerFile], dict]:
    """The files of the layer and the delta manifest (the shape image_delta.py's has)."""
    site = site.rstrip("/")
    with zipfile.ZipFile(official) as old_zf, zipfile.ZipFile(patched) as new_zf:
        old_info, new_info = _dist_info(old_zf), _dist_info(new_zf)
        old_rec, new_rec = _record(old_zf, old_info), _record(new_zf, new_info)
        in_package = lambda name: not name.split("/")[0].endswith(".dist-info")  # noqa: E731
        changed = sorted(n for n in new_rec if in_package(n) and n in old_rec and old_rec[n] != new_rec[n])
        added = sorted(n for n in new_rec if in_package(n) and n not in old_rec)
        removed = sorted(n for n in old_rec if in_package(n) and n not in new_rec)
        files: list[LayerFile] = []
        for name in changed + added:
            info = new_zf.getinfo(name)
            data = new_zf.read(name)
            if _b64_sha256(data) != new_rec[name][0]:
                raise ForkError(f"{patched.name}: {name} does not match its RECORD hash")
            exec_bit = (info.external_attr >> 16) & 0o111
            files.append(LayerFile(f"{site}/{name}", data, 0o755 if exec_bit else 0o644))
        meta = {n: new_zf.read(n) for n in new_rec if n.startswith(new_info + "/") and n != f"{new_info}/RECORD"}
        entry_points = meta.get(f"{new_info}/entry_points.txt", b"").decode()

    # bytecode of changed and new sources: compiled here when this interpreter is the base's.
    tag = f"cpython-{python.replace('.', '')}"
    same_python = f"{sys.version_info[0]}.{sys.version_info[1]}" == python
    to_compile = [n for n in changed + added if n.endswith(".py")]
    for name in to_compile:
        src = f"{site}/{name}"
        pyc = f"{site}/{PurePosixPath(name).parent}/__pycache__/{PurePosixPath(name).stem}.{tag}.pyc"
        source = next(f.data for f in files if f.path == src)
        assert source is not None, f"{src} was added above as a file, with its bytes"
        if same_python:
            files.append(LayerFile(pyc, _bytecode(source, src, mtime)))
        elif name in changed:
            files.append(LayerFile(pyc, None, kind="whiteout"))
    for name in removed:
        files.append(LayerFile(f"{site}/{name}", None, kind="whiteout"))
        if name.endswith(".py"):
            pyc = f"{site}/{PurePosixPath(name).parent}/__pycache__/{PurePosixPath(name).stem}.{tag}.pyc"
            files.append(LayerFile(pyc, None, kind="whiteout"))
    files.append(LayerFile(f"{site}/{old_info}", None, kind="whiteout"))

    # the installed dist-info: the wheel's metadata, INSTALLER, the scripts, and RECORD.
    for name, data in meta.items():
        files.append(LayerFile(f"{site}/{name}", data))
    files.append(LayerFile(f"{site}/{new_info}/INSTALLER", INSTALLER.encode()))
    scripts = _console_scripts(entry_points)
    bindir = "/usr/local/bin"
    for script, target in scripts.items():
        module, _, attr = target.partition(":")
        body = SCRIPT.format(python="/usr/bin/python3", module=module, attr=attr.split(".")[0]).encode()
        files.append(LayerFile(f"{bindir}/{script}", body, 0o755))
    # Every installed file with its hash: the wheel's rows, then what the install wrote.
    record_rows = {n: row for n, row in new_rec.items() if n != f"{new_info}/RECORD"}
    for f in files:
        if f.kind == "file" and (f.path.startswith(f"{site}/{new_info}/") or f.path.startswith(bindir + "/")):
            assert f.data is not None, f"{f.path}: a file entry carries its bytes"
            record_rows[os.path.relpath(f.path, site)] = (_b64_sha256(f.data), str(len(f.data)))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name in sorted(record_rows):
        writer.writerow([name, *record_rows[name]])
    writer.writerow([f"{new_info}/RECORD", "", ""])
    files.append(LayerFile(f"{site}/{new_info}/RECORD", record.getvalue().encode()))

    manifest = {
        "name": "vllm",
        "route": "registry",
        "from_version": old_info[len("vllm-") : -len(".dist-info")],
        "version": new_info[len("vllm-") : -len(".dist-info")],
        "changed": [f"{site}/{n}" for n in changed],
        "added": [f"{site}/{n}" for n in added],
        "removed": [f"{site}/{n}" for n in removed] + [f"{site}/{old_info}"],
        "compile": [f"{site}/{n}" for n in to_compile] if same_python else [],
        "delta_bytes": sum(len(f.data) for f in files if f.data is not None),
    }
    return files, manifest


def _console_scripts(entry_points: str) -> dict[str, str]:
    scripts, section = {}, None
    for line in entry_points.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "console_scripts" and "=" in line:
            name, _, target = line.partition("=")
            scripts[name.strip()] = target.strip()
    return scripts


def _bytecode(source: bytes, path: str, mtime: int) -> bytes:
    """A timestamp-based .pyc, as py_compile writes it, for a source with this mtime."""
    code = compile(source, path, "exec", dont_inherit=True)
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (mtime & 0xFFFFFFFF).to_bytes(4, "little") + (len(source) & 0xFFFFFFFF).to_bytes(4, "little")
    return header + marshal.dumps(code)


def layer_tar(files: list[LayerFile], mtime: int) -> bytes:
    """The layer as a tar: sorted, parents first, owner root, fixed modes and mtime."""
    entries: dict[str, LayerFile] = {}
    for f in files:
        rel = f.path.lstrip("/")
        if f.kind == "whiteout":
            p = PurePosixPath(rel)
            rel = str(p.parent / f".wh.{p.name}")
        entries[rel] = f
        for parent in PurePosixPath(rel).parents:
            if str(parent) != "." and str(parent) not in entries:
                entries[str(parent)] = LayerFile("/" + str(parent), None, 0o755, "dir")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(entries):
            f = entries[rel]
            info = tarfile.TarInfo(rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
            if f.kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                data = f.data or b""
                info.size, info.mode = len(data), f.mode
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


# --- the config, from the Dockerfile's image stage ---------------------------------------


def new_config(base_config: dict, stage: dict, diff_id: str, created: str, summary: str) -> dict:
    config = json.loads(json.dumps(base_config))
    c = config.setdefault("config", {})
    c["Labels"] = {**(c.get("Labels") or {}), **stage["Labels"]}
    env = [e for e in c.get("Env") or [] if e.split("=", 1)[0] not in stage["Env"]]
    c["Env"] = env + [f"{k}={v}" for k, v in stage["Env"].items()]
    c["ExposedPorts"] = {**(c.get("ExposedPorts") or {}), **stage["ExposedPorts"]}
    if stage["Healthcheck"]:
        c["Healthcheck"] = stage["Healthcheck"]
    if stage["Entrypoint"] is not None:
        c["Entrypoint"] = stage["Entrypoint"]
        c["Cmd"] = stage["Cmd"]  # an ENTRYPOINT resets the base's CMD: only the stage's own stays
    elif stage["Cmd"] is not None:
        c["Cmd"] = stage["Cmd"]
    config["rootfs"]["diff_ids"] = [*config["rootfs"]["diff_ids"], diff_id]
    config["history"] = [*(config.get("history") or []), {"created": created, "created_by": summary}]
    config["created"] = created
    config.pop("container", None)
    config.pop("container_config", None)
    return config


# --- the push -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pushed:
    refs: list[str]
    digest: str  # the manifest's
    layer_digest: str
    layer_size: int
    files: int
    manifest: dict


def push_image(
    *,
    root: Path,
    pin: Pin,
    wheel: ForkWheel,
    base: str,
    tags: list[str],
    labels: dict[str, str],
    platform: str,
    base_digest: str = "",
    log: LogFn = print,
) -> Pushed:
    """Append the delta layer to `base` (REGISTRY/REPO:TAG, read by `base_digest` when given)."""
    base_ref = ImageRef.parse(base)
    base_reg = Registry.of_image(base_ref)
    manifest_bytes, media = platform_manifest(base_reg, base_digest or base_ref.reference, platform)
    base_manifest = json.loads(manifest_bytes)
    base_config = json.loads(get_blob(base_reg, base_manifest["config"]["digest"]))
    base_labels = (base_config.get("config") or {}).get("Labels") or {}
    site = base_labels.get(LABEL_SITE_PACKAGES, UPSTREAM_LAYOUT["site_packages"])
    python = base_labels.get(LABEL_PYTHON, UPSTREAM_LAYOUT["python"])

    official = fetch("vllm", pin.wheel.filename, pin.wheel.sha256)
    with zipfile.ZipFile(wheel.path) as zf:
        mtime = calendar.timegm(zf.getinfo(f"{_dist_info(zf)}/METADATA").date_time + (0, 0, 0))
    files, delta = delta_files(official, wheel.path, site, python, mtime)
    record = strip_userinfo(wheel.record)
    files.append(
        LayerFile(
            f"/{PROVENANCE_DIR}/{wheel.record_path.name}",
            (json.dumps(record, indent=2, sort_keys=True) + "\n").encode(),
        )
    )
    files.append(
        LayerFile(f"/{PROVENANCE_DIR}/vllm-delta.json", (json.dumps(delta, indent=1, sort_keys=True) + "\n").encode())
    )
    tar = layer_tar(files, mtime)
    layer = gzip_bytes(tar)
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()

    docker_types = media == DOCKER_MANIFEST
    created = base_config.get("created") or "1970-01-01T00:00:00Z"
    summary = (
        f"vllm-fork: vllm {delta['from_version']} -> {delta['version']} appended in the registry "
        f"({len(delta['changed'])} changed, {len(delta['added'])} new, {len(delta['removed'])} removed)"
    )
    base_env = (base_config.get("config") or {}).get("Env") or []
    stage = stage_config(root / DOCKERFILE, "image", labels, base_env)
    config = json.dumps(new_config(base_config, stage, diff_id, created, summary), sort_keys=True).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": media,
        "config": {
            "mediaType": DOCKER_CONFIG if docker_types else OCI_CONFIG,
            "digest": config_digest,
            "size": len(config),
        },
        "layers": [
            *base_manifest["layers"],
            {"mediaType": DOCKER_LAYER if docker_types else OCI_LAYER, "digest": layer_digest, "size": len(layer)},
        ],
    }
    manifest_out = json.dumps(manifest, indent=2, sort_keys=True).encode()
    digest = "sha256:" + hashlib.sha256(manifest_out).hexdigest()

    refs = []
    reg = base_reg
    try:
        for tag in tags:
            ref = push_target(tag)
            reg = Registry.of_image(ref)
            for layer_desc in base_manifest["layers"]:
                mount_or_copy(base_reg, reg, layer_desc["digest"])
            reg.push_blob(layer, layer_digest)
            reg.push_blob(config, config_digest)
            put_manifest(reg, ref.reference, manifest_out, media)
            refs.append(f"{ref}@{digest}")
            log(f"pushed {ref}@{digest}")
    except urllib.error.HTTPError as exc:
        raise ForkError(
            f"the registry answered {exc.code} {exc.reason} ({exc.url}); check that it allows pushes to the repository"
        ) from None
    except urllib.error.URLError as exc:
        raise ForkError(f"registry {reg.endpoint.host} unreachable: {reg.describe(exc)}") from None
    return Pushed(refs, digest, layer_digest, len(layer), sum(1 for f in files if f.kind == "file"), delta)


def run(
    *,
    wheel: Path | None,
    tags: list[str],
    platform: str | None,
    base_digest: str | None,
    base_repository: str | None,
    allow_stale: bool,
    dry_run: bool,
    root: Path | None = None,
    log: LogFn = print,
) -> Pushed | None:
    """`invoke docker --push`: the checks `invoke docker` makes, then the append in the registry."""
    root = root or REPO_ROOT
    if not tags:
        raise ForkError("--push needs --tag REGISTRY/REPOSITORY:TAG (where to push the image)")
    pin = load_pin(root)
    fork_wheel = load_wheel(wheel) if wheel else find_wheel(root / "dist", pin)
    stale = stale_reasons(fork_wheel, pin, patches_dir(root))
    if stale and not allow_stale:
        detail = "".join(f"\n  - {r}" for r in stale)
        raise ForkError(
            f"{fork_wheel.path.name} is not the build of the current pin and series:{detail}\n"
            "Run `invoke build` to rebuild it (or pass --allow-stale to ship it anyway)."
        )
    base = base_image(root / DOCKERFILE, pin, base_digest, base_repository)
    base_ref = f"{base['VLLM_BASE_IMAGE']}:{base['VLLM_BASE_TAG']}"
    labels = {**base, **image_labels(fork_wheel, base, fork_revision(root))}
    platform = check_platform(platform, fork_wheel.platform)
    if dry_run:
        log(
            f"# no engine: append the delta of {fork_wheel.path.name} to {base_ref} in the registry, "
            f"then tag {', '.join(tags)}"
        )
        return None
    pushed = push_image(
        root=root,
        pin=pin,
        wheel=fork_wheel,
        base=base_ref,
        tags=tags,
        labels=labels,
        platform=platform,
        base_digest=base["VLLM_BASE_DIGEST"],
        log=log,
    )
    log(f"delta layer {pushed.layer_digest}: {pushed.files} files, {pushed.layer_size} bytes compressed")
    return pushed


def push_layout(layout_dir: Path, ref: str) -> str:
    """Push an image kept as manifest.json + blobs/<sha256> (the stand-in's cache) to `ref`."""
    target = push_target(ref)
    reg = Registry.of_image(target)
    manifest_bytes = (layout_dir / "manifest.json").read_bytes()
    manifest = json.loads(manifest_bytes)
    for desc in [*manifest["layers"], manifest["config"]]:
        reg.push_blob(layout_dir / "blobs" / desc["digest"].split(":", 1)[1], desc["digest"])
    put_manifest(reg, target.reference, manifest_bytes, manifest["mediaType"])
    return "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
