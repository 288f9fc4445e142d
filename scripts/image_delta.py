#!/usr/bin/env python3
"""The deployment image's delta: only the files the patched wheel changes, over upstream's image.

Installing the patched wheel over upstream's `vllm/vllm-openai` rewrites every file of the
vllm package (~800 MiB), though the fork changes a handful of Python files: the compiled
members are upstream's, byte for byte. Run in a throwaway stage FROM the same base image:

    image_delta.py snapshot BEFORE.json          # sha256 of every installed vllm file
    pip install --no-deps --no-compile WHEEL     # the real install, by pip
    image_delta.py diff BEFORE.json OUT          # OUT/tree: new or changed files only;
                                                 # OUT/delta.json: what to remove, compile
then, in the final stage FROM the base (OUT bind-mounted, so only its effect is a layer):

    image_delta.py apply OUT --expect-version V  # copy the tree, remove, compile, verify

The installed files are found through importlib.metadata (the dist's RECORD), wherever the
base keeps them. Bytecode: upstream's image compiles vllm (UV_COMPILE_BYTECODE=1) without
listing the .pyc files in RECORD. pip's uninstall removes them all, but a .pyc whose source
is unchanged stays valid in the final image (the source there is still the base's file, with
its mtime), so it is kept; changed and new sources are compiled by `apply`.

Stdlib only: it runs under the base image's python3. Standalone, so it is no part of the
vllm_fork package (which the image does not have).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import py_compile
import shutil
import stat
import subprocess
import sys
import tempfile

MANIFEST = "delta.json"
TREE = "tree"


class DeltaError(Exception):
    """A problem the build log should state plainly."""


# --- what is installed --------------------------------------------------------------


def find_dist(name: str) -> importlib.metadata.Distribution:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise DeltaError(
            f"no installed distribution {name!r} for {sys.executable}: the base image is not "
            "upstream's vllm image, or python3 there is another interpreter"
        ) from None


def real(path: str) -> str:
    """The path with its directories' symlinks resolved (not the file's own: RECORD names files)."""
    path = os.path.normpath(os.path.abspath(path))
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_state(path: str) -> dict:
    mode = os.stat(path).st_mode
    # The exec bit is the one mode bit that changes behaviour; other bits differ by installer umask.
    return {"sha256": sha256_file(path), "exec": bool(mode & stat.S_IXUSR)}


def bytecode_of(source: str) -> str | None:
    try:
        return importlib.util.cache_from_source(source)
    except (NotImplementedError, ValueError):
        return None


def source_of(pyc: str) -> str | None:
    try:
        return importlib.util.source_from_cache(pyc)
    except (NotImplementedError, ValueError):
        return None


def installed_state(name: str) -> dict:
    """Every file of the installed dist (RECORD, plus unlisted bytecode of its sources)."""
    dist = find_dist(name)
    root = real(str(dist.locate_file("")))
    files: dict[str, dict] = {}
    for entry in dist.files or []:
        path = real(str(dist.locate_file(entry)))
        if os.path.isfile(path):
            files[path] = file_state(path)
    for path in [p for p in files if p.endswith(".py")]:
        pyc = bytecode_of(path)
        if pyc and pyc not in files and os.path.isfile(pyc):
            files[pyc] = file_state(pyc)
    dirs = set()
    for path in files:
        parent = os.path.dirname(path)
        while parent.startswith(root + os.sep):
            dirs.add(parent)
            parent = os.path.dirname(parent)
    return {"name": name, "version": dist.version, "root": root, "files": files, "dirs": sorted(dirs)}


# --- snapshot / diff ------------------------------------------------------------------


def snapshot(name: str, out: str) -> dict:
    state = installed_state(name)
    write_atomic(out, json.dumps(state, indent=1, sort_keys=True))
    return state


def diff(before_path: str, out: str, name: str) -> dict:
    """Write OUT/tree (new and changed files, at their absolute paths) and OUT/delta.json."""
    if os.path.exists(out):
        raise DeltaError(f"{out} exists already; the delta is written into a new directory")
    with open(before_path) as f:
        before = json.load(f)
    after = installed_state(name)
    old, new = before["files"], after["files"]
    changed = sorted(p for p in new if p in old and new[p] != old[p])
    added = sorted(p for p in new if p not in old)
    # Bytecode pip removed although its source is unchanged stays valid: keep it.
    kept = {
        p for p in old if p not in new and (src := source_of(p)) is not None and src in new and old.get(src) == new[src]
    }
    to_compile = sorted(p for p in changed + added if p.endswith(".py"))
    compiled = {b for p in to_compile if (b := bytecode_of(p))}
    # Bytecode of changed sources is overwritten by `apply`'s compile, not removed.
    gone_files = {p for p in old if p not in new and not os.path.exists(p)} - kept - compiled
    keep_dirs = {d for p in kept | compiled for d in ancestors(p)}
    gone_dirs = {d for d in before["dirs"] if not os.path.exists(d)} - keep_dirs
    removed = compress(gone_files | gone_dirs, gone_dirs)

    tree = os.path.join(out, TREE)
    os.makedirs(tree)
    for path in changed + added:
        copy_into(path, tree)
    manifest = {
        "name": name,
        "from_version": before["version"],
        "version": after["version"],
        "changed": changed,
        "added": added,
        "removed": removed,
        "compile": to_compile,
        "kept_bytecode": len(kept),
        "delta_bytes": sum(os.path.getsize(p) for p in changed + added),
        "unchanged_files": len(new) - len(changed) - len(added),
    }
    write_atomic(os.path.join(out, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True))
    if after["root"] != before["root"]:
        # Still correct, but the delta is then the whole package: say why in the build log.
        print(
            f"warning: pip installed {name} into {after['root']}, upstream's is in {before['root']}; "
            "nothing is shared with the base",
            file=sys.stderr,
        )
    return manifest


def ancestors(path: str):
    parent = os.path.dirname(path)
    while parent != os.path.dirname(parent):
        yield parent
        parent = os.path.dirname(parent)


def compress(paths: set[str], dirs: set[str]) -> list[str]:
    """Paths to remove, without those inside a directory that is removed whole."""
    return sorted(p for p in paths if not any(a in dirs for a in ancestors(p)))


def copy_into(path: str, tree: str) -> None:
    """Copy `path` to tree/<path>, creating its directories with the real ones' modes."""
    dest = os.path.join(tree, path.lstrip(os.sep))
    missing = []
    parent = os.path.dirname(path)
    while not os.path.isdir(os.path.join(tree, parent.lstrip(os.sep))):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for d in reversed(missing):
        target = os.path.join(tree, d.lstrip(os.sep))
        os.mkdir(target)
        os.chmod(target, stat.S_IMODE(os.stat(d).st_mode))
    shutil.copy2(path, dest)


# --- apply (in the final stage) -------------------------------------------------------


def apply(delta: str, root: str, expect_version: str | None) -> dict:
    """Copy the delta's tree onto `root`, remove what the wheel removed, compile, verify."""
    with open(os.path.join(delta, MANIFEST)) as f:
        manifest = json.load(f)
    tree = os.path.join(delta, TREE)
    for dirpath, dirnames, filenames in os.walk(tree):
        rel = os.path.relpath(dirpath, tree)
        target_dir = os.path.normpath(os.path.join(root, rel))
        for d in dirnames:
            target = os.path.join(target_dir, d)
            if not os.path.isdir(target):
                os.mkdir(target)
                os.chmod(target, stat.S_IMODE(os.stat(os.path.join(dirpath, d)).st_mode))
        for name in filenames:
            replace_file(os.path.join(dirpath, name), os.path.join(target_dir, name))
    for path in manifest["removed"]:
        target = rooted(root, path)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.unlink(target)
    for path in manifest["compile"]:
        py_compile.compile(rooted(root, path), doraise=True)
    verify(manifest["name"], manifest["version"], expect_version)
    return manifest


def rooted(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip(os.sep))


def replace_file(src: str, dest: str) -> None:
    """Write dest whole or not at all (temp file beside it, then rename)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=f".{os.path.basename(dest)}.")
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_VERIFY = """
import importlib.metadata as m, json, os, re, sys
name = sys.argv[1]
norm = lambda s: re.sub(r"[-_.]+", "-", s or "").lower()
found = {}
for d in m.distributions():
    if norm(d.metadata["Name"]) == norm(name):
        found[os.path.realpath(str(getattr(d, "_path", d.locate_file(""))))] = d.version
print(json.dumps({"version": m.version(name), "dists": found}))
"""


def verify(name: str, version: str, expect_version: str | None) -> None:
    """In a fresh interpreter (no stale metadata caches): one dist of `name`, at `version`."""
    proc = subprocess.run([sys.executable, "-c", _VERIFY, name], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DeltaError(f"could not read {name}'s metadata after applying the delta:\n{proc.stderr}")
    seen = json.loads(proc.stdout)
    if len(seen["dists"]) != 1:
        listing = ", ".join(f"{p} ({v})" for p, v in sorted(seen["dists"].items())) or "none"
        raise DeltaError(f"expected exactly one {name} dist-info after applying the delta, found: {listing}")
    if seen["version"] != version:
        raise DeltaError(f"installed {name} {seen['version']}, but the delta was made for {version}")
    if expect_version and seen["version"] != expect_version:
        raise DeltaError(f"installed {name} {seen['version']}, but the labels describe {expect_version}")


# --- helpers, command line ------------------------------------------------------------


def write_atomic(path: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".delta.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def summary(manifest: dict) -> str:
    return (
        f"{manifest['name']} {manifest['from_version']} -> {manifest['version']}: "
        f"{len(manifest['changed'])} changed, {len(manifest['added'])} added "
        f"({manifest['delta_bytes'] / 2**20:.2f} MiB), {len(manifest['removed'])} removed, "
        f"{manifest['unchanged_files']} unchanged; {len(manifest['compile'])} to compile, "
        f"{manifest['kept_bytecode']} bytecode files kept"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="image_delta.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="vllm", help="the distribution to follow (default vllm)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("snapshot", help="record sha256 of every installed file of the dist")
    p.add_argument("state")
    p = sub.add_parser("diff", help="after the install: write the changed files and delta.json")
    p.add_argument("state")
    p.add_argument("out")
    p = sub.add_parser("apply", help="copy the delta onto ROOT, remove, compile and verify")
    p.add_argument("delta")
    p.add_argument("--root", default=os.sep)
    p.add_argument("--expect-version", default="", help="fail unless the result has this version")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "snapshot":
            state = snapshot(args.name, args.state)
            print(f"{args.name} {state['version']}: {len(state['files'])} files under {state['root']}")
        elif args.cmd == "diff":
            print(summary(diff(args.state, args.out, args.name)))
        else:
            print("applied " + summary(apply(args.delta, args.root, args.expect_version or None)))
    except DeltaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
