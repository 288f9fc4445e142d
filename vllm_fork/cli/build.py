"""Invoke tasks for building: `build`, `verify`, and the `ops` collection (`key`, `seed`, `publish`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from invoke import Collection, Exit

from vllm_fork.cli import jsonout
from vllm_fork.cli.exit import run_or_exit as _run
from vllm_fork.cli.usage import task
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


@task(
    help={
        "wheel": "the wheel to check, dist/vllm-<version>+fork.<label>-<tag>.whl, as `invoke build` names it",
        "json": "print the checks as JSON (schema: vllm_fork/cli/schemas/verify.schema.json)",
    }
)
def verify(c, wheel, json_=False):
    """Check a wheel against its provenance record and the ops artifact."""
    report = _run(do_verify, Path(wheel))
    if json_:
        jsonout.emit("verify", jsonout.verify_document(wheel, report))
    else:
        for line in report.checks:
            print(f"  ok   {line}")
        for line in report.problems:
            print(f"  FAIL {line}", file=sys.stderr)
    if report.problems:
        raise Exit(code=1)
    if not json_:
        print("verify: ok")


def key_explanation(root: Path | None = None) -> dict[str, Any]:
    """The ops key of build/vllm and what it is made of: inputs, parameters, upstream's key, the
    patches touching compiled inputs, and whether the ops cache has its artifact."""
    root = root or REPO_ROOT
    tree = default_tree(root)
    base, head = tree_commits(tree)
    start = time.perf_counter()
    key = compute_key(tree, head, root)
    took = time.perf_counter() - start
    upstream = compute_key(tree, base, root, key.params)
    touches = patches_touching_inputs(tree, base, head, root)
    names = [p["name"] for p in series_id(root).patches]
    entries = load_inputs(root)
    counts: dict[str, int] = {}
    for line in key.manifest:
        if line.startswith(("param ", "table ")):
            continue
        path = line.split(" ", 2)[2]
        for entry in entries:
            if entry.covers(path):
                counts[str(entry)] = counts.get(str(entry), 0) + 1
                break
    stored = lookup(key.key, root)
    return {
        "key": key.key,
        "tree_commit": head,
        "seconds": round(took, 4),
        "inputs": [
            {"input": str(e), "table": bool(e.table), "files": 0 if e.table else counts.get(str(e), 0), "why": e.why}
            for e in entries
        ],
        "parameters": dict(key.params),
        "upstream": {"ref": UPSTREAM_REF, "key": upstream.key, "same": key.key == upstream.key},
        "patches_touching_inputs": [
            {"patch": names[t.index - 1] if t.index <= len(names) else t.subject, "paths": list(t.paths)}
            for t in touches
        ],
        "artifact": stored.file if stored else None,
    }


def format_explanation(found: dict[str, Any]) -> str:
    out = [f"ops key {found['key']}  ({found['seconds'] * 1000:.1f} ms, tree {found['tree_commit'][:12]})", "inputs:"]
    for i in found["inputs"]:
        n = "table" if i["table"] else f"{i['files']} file(s)"
        out.append(f"  {i['input']:<32} {n:>12}  # {i['why']}")
    out.append("parameters:")
    out += [f"  {k} = {v!r}" for k, v in found["parameters"].items()]
    up = found["upstream"]
    out.append(f"upstream ({up['ref']}) key {up['key']}: {'same' if up['same'] else 'DIFFERENT'}")
    if found["patches_touching_inputs"]:
        out.append("patches touching compiled inputs (the build needs their ops compiled):")
        out += [f"  {t['patch']}: {', '.join(t['paths'][:8])}" for t in found["patches_touching_inputs"]]
    else:
        out.append("no patch touches compiled inputs")
    artifact = found["artifact"]
    out.append(f"ops cache: {'has an artifact (' + artifact + ')' if artifact else 'no artifact for this key'}")
    return "\n".join(out)


@task(
    help={
        "explain": "also print the inputs, parameters, upstream's key and the patches touching compiled inputs",
        "json": "print it as JSON (schema: vllm_fork/cli/schemas/ops-key.schema.json); --explain adds its fields",
    }
)
def key(c, explain=False, json_=False):
    """The ops key of build/vllm."""
    if explain:
        found = _run(key_explanation)
        if json_:
            jsonout.emit("ops-key", found)
        else:
            print(format_explanation(found))
        return
    tree = default_tree()
    _base, head = _run(tree_commits, tree)
    computed = _run(compute_key, tree, head).key
    if json_:
        jsonout.emit("ops-key", {"key": computed, "tree_commit": head})
    else:
        print(computed)


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
