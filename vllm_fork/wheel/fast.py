"""The fast route: the same wheel as vLLM's precompiled route, assembled in seconds.

vLLM's precompiled route (setuptools with setuptools-scm's git file finder) puts
into the wheel every file git tracks under `vllm/`, the regenerated
`vllm/_version.py`, the members it extracts from the precompiled zip, and the
dist-info. This route writes exactly that list in bdist_wheel's order, copying
compiled members raw from the artifact and unchanged files raw from a deflated
layer of upstream's files; only files the patches changed are compressed. Its
output is tested member-for-member (sha256) against the precompiled route's.

It handles patches that change Python files under `vllm/` and files that never
reach the wheel (docs, tests, ...). Anything else (requirements, packaging
metadata, non-Python package files, symlinks, the vendored compiled trees) makes
`blockers()` non-empty, and the build takes the precompiled route instead.
"""

from __future__ import annotations

import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.fs import atomic_path
from vllm_fork.core.git import git
from vllm_fork.ops.inputs import load_packaging
from vllm_fork.ops.seed import is_precompiled_member
from vllm_fork.wheel.metadata import WheelMetadata
from vllm_fork.wheel.pylayer import open_layer, read_blobs
from vllm_fork.wheel.writer import WheelWriter, walk_key

PACKAGE = "vllm/"


def blockers(tree: Path, base: str, head: str) -> list[str]:
    """Why the fast route cannot build `head` (changes since `base` it does not handle); [] if it can."""
    raw = git(tree, "diff", "--raw", "--no-renames", "-z", base, head).stdout
    fields = raw.split("\0")
    packaging = load_packaging()
    reasons = []
    for meta, path in zip(fields[0::2], fields[1::2]):
        if not meta:
            continue
        _old_mode, new_mode, _a, _b, status = meta.lstrip(":").split()
        if path.startswith(PACKAGE):
            dirs = path.split("/")[:-1]
            if any("." in d for d in dirs):
                reasons.append(f"{path}: in a directory setuptools does not treat as a package")
            elif status != "D" and new_mode not in ("100644", "100755"):
                reasons.append(f"{path}: not a regular file (mode {new_mode})")
            elif not path.endswith(".py"):
                reasons.append(f"{path}: a non-Python file in the package")
            elif is_precompiled_member(path):
                reasons.append(f"{path}: inside a vendored tree the precompiled wheel provides")
        elif packaging.shapes_wheel(path) or path.endswith(".gitattributes"):
            reasons.append(f"{path}: packaging metadata or requirements")
    return reasons


@dataclass(frozen=True)
class FastResult:
    path: Path
    members: int
    compressed_fresh: int
    seconds: float


def build_fast(
    tree: Path,
    base: str,
    head: str,
    version: str,
    tag: str,
    artifact: Path,
    artifact_record: dict[str, tuple[str, int]],
    meta: WheelMetadata,
    out_dir: Path,
) -> FastResult:
    start = time.perf_counter()
    dist_info = f"vllm-{version}.dist-info"
    listing = git(tree, "ls-tree", "-r", "--full-tree", head, "--", "vllm").stdout
    sources: dict[str, tuple] = {}
    for row in listing.splitlines():
        info, _, path = row.partition("\t")
        mode, kind, blob = info.split()
        if kind == "blob":
            sources[path] = ("blob", blob, 0o100755 if mode == "100755" else 0o100644)
    sources["vllm/_version.py"] = ("bytes", meta.version_py)
    with zipfile.ZipFile(artifact) as art:
        art_infos = {i.filename: i for i in art.infolist()}
    for name in art_infos:  # extracted over the checkout, so they win
        sources[name] = ("artifact",)
    for rel, data in meta.dist_info.items():
        sources[f"{dist_info}/{rel}"] = ("bytes", data)
    sources[f"{dist_info}/WHEEL"] = ("bytes", meta.wheel_file(tag))

    layer_fp = open_layer(tree, base)  # sha256-verified through this handle; entries are copied from it
    with zipfile.ZipFile(layer_fp) as layer_zip:
        layer = {i.filename: i for i in layer_zip.infolist()}
    fresh = [s[1] for s in sources.values() if s[0] == "blob" and s[1] not in layer]
    fresh_data = read_blobs(tree, sorted(set(fresh)))

    filename = f"vllm-{version}-{tag}.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / filename
    try:
        with atomic_path(final, ".part") as tmp:
            writer = WheelWriter(tmp, dist_info)
            with open(artifact, "rb") as art_fp, layer_fp:
                for name in sorted(sources, key=lambda n: walk_key(n, dist_info)):
                    src = sources[name]
                    if src[0] == "artifact":
                        art_digest, art_size = artifact_record[name]
                        writer.add_raw(art_fp, art_infos[name], name, art_digest, art_size)
                    elif src[0] == "bytes":
                        writer.add_bytes(name, src[1])
                    elif src[1] in layer:
                        info = layer[src[1]]
                        digest, size = info.comment.decode().split(",")
                        # The layer is keyed by blob, which has no mode: the mode comes from the tree.
                        writer.add_raw(layer_fp, info, name, digest, int(size), mode=member_mode(name, src[2]))
                    else:
                        writer.add_bytes(name, fresh_data[src[1]], mode=member_mode(name, src[2]))
            writer.close()
    finally:
        layer_fp.close()
    return FastResult(final, len(sources) + 1, len(fresh), time.perf_counter() - start)


__all__ = ["blockers", "build_fast", "FastResult", "member_mode"]


def member_mode(name: str, tree_mode: int) -> int:
    """A wheel member's mode as setuptools' build_py gives it (what the official wheel has).

    Modules are copied without their mode (0644 even where the tree's file is executable);
    package data keeps it, so e.g. vllm/utils/numa_wrapper.sh stays executable.
    """
    return 0o100644 if name.endswith(".py") else tree_mode & 0o777 | 0o100000
