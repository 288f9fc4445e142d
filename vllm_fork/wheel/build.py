"""`invoke build`: apply -> ops key -> ops cache -> wheel in dist/, with a provenance record.

Routes: "fast" (wheel_fast, seconds) whenever the patches stay within what it
handles, else vLLM's "precompiled" route (setup.py, about a minute); both reuse
the cached compiled ops. On a cache miss (a patch touched compiled inputs) the
"compile" route runs where a CUDA toolkit exists and stores the result under the
key; without one the build stops and says what to do.
"""

from __future__ import annotations

import hashlib
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.errors import ConfigError, ForkError
from vllm_fork.core.fs import remove_stale_temps
from vllm_fork.core.git import dirty_paths, git, is_tool_cache, operation_in_progress, rev
from vllm_fork.core.log import LogFn
from vllm_fork.core.log import info as log_info
from vllm_fork.core.log import warning as log_warning
from vllm_fork.core.paths import REPO_ROOT, default_tree
from vllm_fork.ops import cache as opscache
from vllm_fork.ops import seed
from vllm_fork.ops.inputs import INPUTS_FILE, load_inputs, load_params
from vllm_fork.ops.key import OpsKey, Touch, compute_key, patches_touching_inputs
from vllm_fork.queue import apply as queue
from vllm_fork.queue.apply import UPSTREAM_REF
from vllm_fork.queue.export import TreeQueue, tree_queue
from vllm_fork.queue.treelock import locked
from vllm_fork.upstream.identity import check_pin
from vllm_fork.upstream.pin import Pin, load_pin
from vllm_fork.wheel import provenance
from vllm_fork.wheel.buildenv import BuildEnv, ensure_build_env
from vllm_fork.wheel.fast import blockers, build_fast
from vllm_fork.wheel.metadata import wheel_metadata
from vllm_fork.wheel.precompiled import build_compiled, build_precompiled, cuda_toolkit, nvcc_version
from vllm_fork.wheel.version import SeriesId, dirty_series_id, series_id

ROUTES = ("auto", "fast", "precompiled")


@dataclass(frozen=True)
class BuildResult:
    wheel: Path
    provenance: Path
    record: dict


class _Timer:
    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self._start = time.perf_counter()
        self._last = self._start

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.times[name] = round(now - self._last, 3)
        self._last = now

    def total(self) -> dict[str, float]:
        return {**self.times, "total": round(time.perf_counter() - self._start, 3)}


def tree_commits(tree: Path) -> tuple[str, str]:
    """(upstream, head) of the patched tree; refuses a tree with uncommitted work."""
    if not (tree / ".git").exists():
        raise ForkError(f"{tree} does not exist: run `invoke apply` (or `invoke build`, which applies)")
    if operation_in_progress(tree):
        raise ForkError(f"a `git am` is stopped in {tree}: finish it or `invoke apply --abort` first")
    base = rev(tree, UPSTREAM_REF)
    if base is None:
        raise ForkError(f"{tree} has no {UPSTREAM_REF}: make it with `invoke apply`")
    # Tool caches (__pycache__, .ruff_cache, .pytest_cache) are nobody's work: the wheel is built from commits.
    dirty = [p for p in dirty_paths(tree) if not is_tool_cache(p)]
    if dirty:
        raise ForkError(
            f"{tree} has uncommitted changes ({', '.join(dirty[:5])}{'...' if len(dirty) > 5 else ''}); "
            f"the wheel is built from commits. Keep them: `git -C {tree} add -A && git -C {tree} commit` "
            f"(or `--amend` into the patch's commit), then `invoke export`; or drop them: `invoke apply --force`."
        )
    head = rev(tree, "HEAD")
    if head is None:
        raise ForkError(f"{tree} has no HEAD commit: make it with `invoke apply`")
    return base, head


def seed_cache(
    root: Path = REPO_ROOT, tree: Path | None = None, log: LogFn = log_info
) -> tuple[opscache.Entry, Path, float]:
    """Store the pinned release's compiled members (from the official wheel) under upstream's key."""
    pin = load_pin(root)
    tree = tree or default_tree(root)
    base = rev(tree, UPSTREAM_REF) if (tree / ".git").exists() else None
    if base is None:
        raise ForkError(f"{tree} has no {UPSTREAM_REF}: run `invoke apply` first (seeding keys on upstream's tree)")
    key = compute_key(tree, base, root)
    start = time.perf_counter()
    wheel = seed.official_wheel(pin)
    seeded = seed.make_artifact(wheel, opscache.ops_dir(), log=log)
    # The official wheel was sha256-checked against the pin, so its RECORD is trusted
    # for the members copied from it byte for byte.
    entry, path = opscache.put(
        key.key, seeded.path, seed.seed_provenance(pin, wheel, seeded), root, record=seeded.record
    )
    return entry, path, time.perf_counter() - start


def ensure_artifact(
    key: OpsKey, upstream_key: OpsKey, root: Path, tree: Path, log: LogFn
) -> tuple[opscache.Entry, Path] | None:
    """The verified artifact for the key; re-seeds the pinned release's own key when its file is missing."""
    try:
        found = opscache.get(key.key, root, log=log)
    except ConfigError:
        raise  # a broken index.json or remote list: say so before touching the cache
    except ForkError as exc:
        if key.key != upstream_key.key:
            raise
        # The release's own artifact can always be made again from the official wheel;
        # what the remotes did wrong is still worth a line.
        log_warning(f"ops cache: the release's artifact could not be fetched ({exc}); seeding it instead")
        found = None
    if found is None and key.key == upstream_key.key:
        log(f"ops cache: no artifact for the release's key {key.short}; seeding it from the official wheel")
        entry, path, _ = seed_cache(root, tree, log)
        return entry, path
    return found


def miss_error(key: OpsKey, touches: list[Touch], patch_names: list[str]) -> ForkError:
    lines = []
    for t in touches:
        name = patch_names[t.index - 1] if t.index <= len(patch_names) else t.subject
        shown = ", ".join(t.paths[:6]) + (" ..." if len(t.paths) > 6 else "")
        lines.append(f"  - {name}: {shown}")
    why = "\n".join(lines) or "  (no patch: the build parameters or compiled-inputs list differ from the cached ones)"
    return ForkError(
        f"ops cache miss: no compiled ops for key {key.short}, because these patches touch compiled inputs:\n"
        f"{why}\n"
        "Compiling them needs a CUDA toolkit (nvcc), and none was found (CUDA_HOME, PATH). Ways forward:\n"
        "  - build on a CUDA host: `invoke build` there compiles (20-40 min) and stores the result in the cache;\n"
        "  - use the Docker image's compile stage, which has the toolkit;\n"
        "  - fetch the artifact from a shared remote: list it in ops-cache/index.json `remotes` "
        f"or {opscache.REMOTES_ENV} after someone built this key;\n"
        f"  - or drop/rework the patch so it leaves the compiled inputs ({INPUTS_FILE}) alone."
    )


def build(
    root: Path = REPO_ROOT,
    route: str = "auto",
    apply: bool = True,
    source: str | None = None,
    out_dir: Path | None = None,
    log: LogFn = log_info,
    allow_unexported: bool = False,
) -> BuildResult:
    """Apply (unless told not to), then build the wheel and its provenance record into `out_dir`.

    A tree whose commits differ from `patches/` (only with `apply=False`) is refused unless
    `allow_unexported`: then the wheel's label ends in `.dirty` and its provenance lists them.

    Holds build/vllm's lock throughout: a second build in this clone waits, and a
    build killed half-way is recovered by the next one (see queue.treelock).
    """
    if route not in ROUTES:
        raise ForkError(f"unknown route {route!r}; one of {', '.join(ROUTES)}")
    out_dir = out_dir or root / "dist"
    with locked(default_tree(root), "build"):
        if out_dir.is_dir():
            # Wheels and records a killed build left half-written; under the lock no other
            # build of this clone writes there.
            for pattern in (".*.part", ".*.tmp"):
                remove_stale_temps(out_dir, pattern, age=0)
        result = _build(root, route, apply, source, out_dir, log, allow_unexported)
    return result


def build_series(
    tree: Path, root: Path, allow_unexported: bool, log: LogFn, applied: bool = False
) -> tuple[SeriesId, TreeQueue]:
    """The series the wheel is named after: `patches/`, or (when allowed) the tree's own differing commits.

    `applied`: this build just applied patches/, so the tree holds them by construction.
    """
    if applied:
        sid = series_id(root)
        return sid, TreeQueue(sid.patches)
    state = tree_queue(tree, root)
    if state.matches:
        return series_id(root), state
    if not allow_unexported:
        raise ForkError(
            f"{tree} does not hold the queue in patches/, so a wheel named after patches/ would not hold it:\n"
            f"{state.describe()}\n"
            "Keep them: `invoke export` (then commit patches/) and build again; or drop them: "
            "`invoke apply --force`, then `invoke build`; or name the wheel after the tree: "
            "`invoke build --no-apply --allow-unexported` (its version ends in `.dirty`)."
        )
    sid = dirty_series_id(state.patches)
    log_warning(f"building from commits patches/ does not hold; the wheel is labelled {sid.label}:\n{state.describe()}")
    return sid, state


def _build(
    root: Path, route: str, apply: bool, source: str | None, out_dir: Path, log: LogFn, allow_unexported: bool
) -> BuildResult:
    timer = _Timer()
    pin: Pin = load_pin(root)
    tree = default_tree(root)
    if apply:
        queue.apply(root=root, source=source)
    base, head = tree_commits(tree)
    check_pin(pin, tree, base)
    sid, state = build_series(tree, root, allow_unexported, log, applied=apply)
    timer.lap("apply")

    version = sid.version(pin.version)
    params = load_params(root)
    key = compute_key(tree, head, root, params)
    upstream_key = key if head == base else compute_key(tree, base, root, params)
    touches = patches_touching_inputs(tree, base, head, root)
    timer.lap("key")
    tag = f"{params['python_abi']}-{params['platform_tag']}"
    requirements = git(tree, "show", f"{head}:requirements/build/cuda.txt").stdout

    found = ensure_artifact(key, upstream_key, root, tree, log)
    timer.lap("cache")
    reasons: list[str] = []
    nvcc = None
    if found is not None:
        cache = "hit"
        entry, artifact = found
        reasons = blockers(tree, base, head)
        if route == "fast" and reasons:
            raise ForkError("the fast route cannot build this series:\n" + "\n".join(f"  - {r}" for r in reasons))
        taken = "precompiled" if route == "precompiled" or reasons else "fast"
        env = ensure_build_env(requirements, params["torch"], params["cuda"], log=log)
        if taken == "fast":
            meta = wheel_metadata(tree, head, version, env, params)
            members = opscache.load_member_record(entry, artifact)
            timer.lap("metadata")
            wheel = build_fast(tree, base, head, version, tag, artifact, members, meta, out_dir).path
        else:
            if reasons:
                log(
                    "the fast route falls back to vLLM's precompiled route (about a minute), because the "
                    "series changes what the fast route does not handle:\n" + "\n".join(f"  - {r}" for r in reasons)
                )
            tracked = len(git(tree, "ls-tree", "-r", "--name-only", head, "--", "vllm").stdout.splitlines())
            setup = build_precompiled(
                tree,
                head,
                version,
                params,
                artifact,
                entry.members,
                env,
                out_dir,
                root / "build",
                log=log,
                expected_members=tracked + entry.members + 5,
                member_sizes={n: size for n, (_h, size) in opscache.load_member_record(entry, artifact).items()},
            )
            wheel = setup.path
            with_names = set(setup.extracted)
            with zipfile.ZipFile(artifact) as zf:
                stored = set(zf.namelist())
            if with_names != stored:
                raise ForkError(
                    f"vLLM's setup.py extracted {len(with_names)} members from the artifact, which holds "
                    f"{len(stored)}; seed.py's member list no longer matches this vLLM: update it. "
                    f"Differences: {sorted(with_names ^ stored)[:10]}"
                )
        timer.lap("wheel")
    else:
        cache = "miss"
        toolkit = cuda_toolkit()
        if toolkit is None:
            raise miss_error(key, touches, [p["name"] for p in sid.patches])
        taken = "compile"
        nvcc = nvcc_version(toolkit)
        env = ensure_build_env(requirements, params["torch"], params["cuda"], real_torch=True, log=log)
        wheel = build_compiled(tree, head, version, params, toolkit, env, out_dir, root / "build", log=log).path
        timer.lap("wheel")
        seeded = seed.make_artifact(wheel, opscache.ops_dir(), log=log)
        entry, artifact = opscache.put(
            key.key,
            seeded.path,
            {"source": "compile", "tree_commit": head, "nvcc": nvcc, "members": seeded.members},
            root,
        )
        timer.lap("store")

    try:
        path, record = _write_provenance(
            wheel,
            version,
            pin,
            base,
            head,
            sid,
            state,
            key,
            upstream_key,
            touches,
            entry,
            taken,
            reasons,
            cache,
            env,
            nvcc,
            timer,
            root,
            tree,
        )
    except BaseException:
        # A wheel in dist/ always has its record: one whose record cannot be written goes.
        wheel.unlink(missing_ok=True)
        raise
    return BuildResult(wheel, path, record)


def _write_provenance(
    wheel: Path,
    version: str,
    pin: Pin,
    base: str,
    head: str,
    sid: SeriesId,
    state: TreeQueue,
    key: OpsKey,
    upstream_key: OpsKey,
    touches: list[Touch],
    entry: opscache.Entry,
    taken: str,
    reasons: list[str],
    cache: str,
    env: BuildEnv,
    nvcc: str | None,
    timer: _Timer,
    root: Path,
    tree: Path,
) -> tuple[Path, dict]:
    """The wheel's provenance record, written beside it (last: a reader seeing it sees the wheel)."""
    record = {
        "schema": provenance.SCHEMA,
        "wheel": provenance.wheel_summary(wheel),
        "version": version,
        "pin": {"version": pin.version, "tag": pin.tag, "commit": pin.commit, "source": pin.source},
        "upstream_commit": base,
        "tree_commit": head,
        "fork": provenance.fork_state(root),
        "series": {
            "label": sid.label,
            "patches": sid.patches,
            "unexported": state.unexported,
            "missing": state.missing,
        },
        "ops": {
            "key": key.key,
            "upstream_key": upstream_key.key,
            "inputs": {
                "list": str(INPUTS_FILE),
                "entries": [str(e) for e in load_inputs(root)],
                "files": sum(1 for line in key.manifest if not line.startswith(("param ", "table "))),
                "manifest_sha256": hashlib.sha256("\n".join(key.manifest).encode()).hexdigest(),
            },
            "params": key.params,
            "touched_by": [{"patch": t.index, "subject": t.subject, "paths": t.paths} for t in touches],
            "artifact": entry.to_json(),
        },
        "route": taken,
        "fallback_reasons": reasons,
        "cache": cache,
        "patched_files": provenance.patched_package_files(tree, base, head),
        "changes_requirements": provenance.changes_requirements(tree, base, head),
        "tools": provenance.tool_versions(env.tool_versions(), nvcc),
        "timings": timer.total(),
    }
    return provenance.write(wheel, record), record
