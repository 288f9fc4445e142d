"""Invoke tasks for building: `build`, `verify`, and the `ops` collection (`key`, `seed`, `publish`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

from invoke import Collection, Exit, task

from vllm_fork.cli.exit import run_or_exit as _run
from vllm_fork.core.paths import REPO_ROOT, default_tree
from vllm_fork.ops.cache import add_remote, lookup, publish_oci
from vllm_fork.ops.cache import publish as do_publish
from vllm_fork.ops.inputs import load_inputs
from vllm_fork.ops.key import compute_key, patches_touching_inputs
from vllm_fork.ops.oci import is_oci
from vllm_fork.queue.apply import UPSTREAM_REF
from vllm_fork.wheel.build import build as do_build
from vllm_fork.wheel.build import seed_cache, tree_commits
from vllm_fork.wheel.verify import verify as do_verify
from vllm_fork.wheel.version import series_id


@task(
    help={
        "route": "auto (default: fast when it can, else vLLM's precompiled route), fast, or precompiled",
        "no_apply": "build build/vllm as it is, without applying patches/ first",
        "source": "pypi or git (default from upstream.toml)",
        "allow_unexported": "with --no-apply: build a tree whose commits differ from patches/ (version ends .dirty)",
    }
)
def build(c, route="auto", no_apply=False, source=None, allow_unexported=False):
    """apply -> ops key -> ops cache -> dist/<wheel> and its .provenance.json."""
    result = _run(do_build, route=route, apply=not no_apply, source=source, allow_unexported=allow_unexported)
    r = result.record
    print(f"{result.wheel}")
    print(
        f"  route {r['route']}, ops cache {r['cache']} (key {r['ops']['key'][:16]}), "
        f"{r['timings']['total']:.1f}s; provenance {result.provenance.name}"
    )


@task(help={"wheel": "the wheel to check, e.g. dist/vllm-0.33.0+fork.xxxxxxxx-cp38-abi3-manylinux_2_28_x86_64.whl"})
def verify(c, wheel):
    """Check a wheel against its provenance record and the ops artifact."""
    report = _run(do_verify, Path(wheel))
    for line in report.checks:
        print(f"  ok   {line}")
    for line in report.problems:
        print(f"  FAIL {line}", file=sys.stderr)
    if report.problems:
        raise Exit(code=1)
    print("verify: ok")


def explain_key(root: Path | None = None) -> str:
    root = root or REPO_ROOT
    tree = default_tree(root)
    base, head = tree_commits(tree)
    start = time.perf_counter()
    key = compute_key(tree, head, root)
    took = (time.perf_counter() - start) * 1000
    upstream = compute_key(tree, base, root, key.params)
    touches = patches_touching_inputs(tree, base, head, root)
    names = [p["name"] for p in series_id(root).patches]
    counts: dict[str, int] = {}
    for line in key.manifest:
        if line.startswith(("param ", "table ")):
            continue
        path = line.split(" ", 2)[2]
        for entry in load_inputs(root):
            if entry.covers(path):
                counts[str(entry)] = counts.get(str(entry), 0) + 1
                break
    out = [f"ops key {key.key}  ({took:.1f} ms, tree {head[:12]})", "inputs:"]
    for entry in load_inputs(root):
        n = "table" if entry.table else f"{counts.get(str(entry), 0)} file(s)"
        out.append(f"  {str(entry):<32} {n:>12}  # {entry.why}")
    out.append("parameters:")
    out += [f"  {k} = {v!r}" for k, v in key.params.items()]
    same = key.key == upstream.key
    out.append(f"upstream ({UPSTREAM_REF}) key {upstream.key}: {'same' if same else 'DIFFERENT'}")
    if touches:
        out.append("patches touching compiled inputs (the build needs their ops compiled):")
        for t in touches:
            out.append(f"  {names[t.index - 1] if t.index <= len(names) else t.subject}: {', '.join(t.paths[:8])}")
    else:
        out.append("no patch touches compiled inputs")
    stored = lookup(key.key, root)
    out.append(f"ops cache: {'has an artifact (' + stored.file + ')' if stored else 'no artifact for this key'}")
    return "\n".join(out)


@task(help={"explain": "also print the inputs, parameters, upstream's key and the patches touching compiled inputs"})
def key(c, explain=False):
    """The ops key of build/vllm."""
    if explain:
        print(_run(explain_key))
        return

    tree = default_tree()
    _base, head = _run(tree_commits, tree)
    print(_run(compute_key, tree, head).key)


@task
def seed(c):
    """Store the pinned release's compiled ops, from its official wheel, in the ops cache."""
    entry, path, seconds = _run(seed_cache)
    print(f"seeded key {entry.key[:16]}: {path} ({entry.members} members, {entry.size >> 20} MiB, {seconds:.1f}s)")


@task(
    help={
        "remote": "a directory (or file:// URL) other machines read as an ops remote, "
        "or an OCI registry: oci://<host[:port]>/<repository>",
        "key": "default: build/vllm's",
    }
)
def publish(c, remote, key=None):
    """Copy an artifact into a shared directory (or push it to an OCI registry) and list the remote in ops-cache/index.json."""
    if key is None:
        _base, head = _run(tree_commits, default_tree())
        key = _run(compute_key, default_tree(), head).key
    if is_oci(remote):
        ref = _run(publish_oci, key, remote)
        _run(add_remote, remote)
        print(f"pushed {ref} (blob sha256 of the artifact); remote {remote} listed in ops-cache/index.json")
        return
    directory = Path(url2pathname(urlparse(remote).path)) if remote.startswith("file:") else Path(remote)
    dest = _run(do_publish, key, directory.resolve())
    _run(add_remote, directory.resolve().as_uri())
    print(f"published {dest}; remote {directory.resolve().as_uri()} listed in ops-cache/index.json")


ops = Collection("ops", key, seed, publish)
