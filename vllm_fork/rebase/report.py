"""The rebase report, in Markdown fit to be a pull-request body."""

from __future__ import annotations

from pathlib import Path

from packaging.version import InvalidVersion, Version

from vllm_fork.rebase.classify import CLEAN, CONFLICT, DROPPED, RESOLVED, SKIPPED, THREE_WAY, PatchResult
from vllm_fork.rebase.state import RebaseState, new_pin_of, old_pin_of
from vllm_fork.upstream.pin import Pin

_MARK = {
    CLEAN: "clean",
    THREE_WAY: "3-way merge",
    DROPPED: "dropped: already upstream",
    CONFLICT: "**conflict**",
    RESOLVED: "conflict, resolved by hand",
    SKIPPED: "dropped by hand",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _reproduce(state: RebaseState, new: Pin) -> str:
    to = new.commit if not new.tag else new.version
    src = f" --source {state.source}"
    remote = f" --remote {state.remote}" if state.remote else ""
    return f"```sh\ngit checkout {_base_hint(state)}\ninvoke rebase --to {to}{src}{remote}\n```\n"


def _base_hint(state: RebaseState) -> str:
    return state.orig.get("root_head", "")[:12] or "<the commit this branch started from>"


def _table(results: list[PatchResult]) -> list[str]:
    lines = ["| # | patch | outcome | new file | notes |", "|---|---|---|---|---|"]
    for i, r in enumerate(results, 1):
        notes = "; ".join(r.notes + ([f"{len(r.by_eye)} hunk(s) to check by eye"] if r.by_eye else []))
        lines.append(
            f"| {i} | {_cell(r.subject)}<br>`{r.name}` | {_MARK[r.outcome]} | "
            f"{'`' + r.new_name + '`' if r.new_name else '—'} | {_cell(notes) or '—'} |"
        )
    return lines


def _header(state: RebaseState, old: Pin, new: Pin, title: str) -> list[str]:
    return [
        f"# {title}",
        "",
        f"- upstream: **vLLM {old.version}** (`{old.tag or old.commit}`, {state.old_upstream[:12]}) → "
        f"**vLLM {new.version}** (`{new.tag or new.commit}`, {state.new_upstream[:12]})",
        f"- source: `{state.source}`"
        + (f" ({new.sdist.filename}, sha256 `{new.sdist.sha256[:16]}…`)" if state.source == "pypi" else ""),
    ]


def success_report(state: RebaseState, old: Pin, new: Pin, checks) -> str:
    results = state.results
    counts = {k: sum(r.outcome == k for r in results) for k in _MARK}
    summary = ", ".join(f"{n} {_MARK[k].strip('*')}" for k, n in counts.items() if n)
    out = _header(state, old, new, f"Rebase onto vLLM {new.version}")
    if _older(old, new):
        out.append(f"- note: {new.version} is older than {old.version}: this moves the fork back")
    out += [f"- patches: {len(results)} → {sum(1 for r in results if r.new_name)} ({summary or 'none'})", ""]
    out += ["## Patches", ""] + _table(results) + [""]
    dropped = [r for r in results if r.outcome in (DROPPED, SKIPPED)]
    out += ["## Dropped patches", ""]
    out += [f"- `{r.name}` — {r.subject}: {'; '.join(r.notes)}" for r in dropped] or ["None."]
    out += ["", "## Check by eye", ""]
    eye = [r for r in results if r.by_eye or r.outcome in (THREE_WAY, RESOLVED) or r.notes and r.outcome == THREE_WAY]
    if eye:
        out.append(
            "Upstream changed lines around these hunks since the patch was written; git applied "
            "them, but only a reader can tell whether the change still means the same."
        )
        out.append("")
        for r in eye:
            out.append(f"- **{r.subject}** (`{r.new_name or r.name}`, {_MARK[r.outcome]})")
            out += [f"  - {f}" for f in r.by_eye]
            out += [f"  - {n}" for n in r.notes if r.outcome != DROPPED]
            if not r.by_eye and r.outcome == THREE_WAY:
                out.append("  - applied by 3-way merge: read the result")
    else:
        out.append("Nothing: no patch needed a 3-way merge and upstream changed nothing near any hunk.")
    out += ["", "## Compiled inputs", ""]
    if checks.compiled_changed:
        shown = checks.compiled_changed[:30]
        more = len(checks.compiled_changed) - len(shown)
        out.append(
            f"**Changed** between the two upstreams ({len(checks.compiled_changed)} file(s), list: "
            f"{checks.compiled_source}). The ops cache has no artifact for {new.version} yet: seed it "
            f"from the official wheel `{new.wheel.filename or '(none on the index)'}` before building."
        )
        if checks.seeded:
            out.append(f"Seeded by this rebase (`--seed`): {checks.seeded}; `ops-cache/index.json` is in the commit.")
        else:
            out.append("Seed it with `invoke ops.seed` on this branch (or `invoke rebase --seed`).")
        out.append("")
        out += [f"- `{p}`" for p in shown] + ([f"- … and {more} more"] if more else [])
    else:
        out.append(
            f"Unchanged ({checks.compiled_source}): the compiled ops of {old.version} still fit; "
            "no ops-cache seeding needed."
        )
    out += ["", "## Check and tests", ""]
    if checks.check_problems:
        out.append(f"- `invoke check`: **{len(checks.check_problems)} problem(s)**")
        out += [f"  - {_cell(p)}" for p in checks.check_problems]
    else:
        out.append("- `invoke check`: ok")
    status = (
        "skipped"
        if checks.tests_rc is None
        else "passed"
        if checks.tests_rc == 0
        else f"**failed** (exit {checks.tests_rc})"
    )
    out.append(f"- tests (`{checks.tests_cmd}`): {status} — {_cell(checks.tests_summary)}")
    out += ["", "## Pin", "", "| | old | new |", "|---|---|---|"]
    for field in ("version", "tag", "commit"):
        out.append(f"| {field} | `{getattr(old, field)}` | `{getattr(new, field)}` |")
    for name in ("sdist", "wheel"):
        a, b = getattr(old, name), getattr(new, name)
        out.append(f"| {name} | {_artifact(a)} | {_artifact(b)} |")
    out += ["", "## Reproduce", "", _reproduce(state, new)]
    out.append("Then `invoke check` and the tests; `invoke apply` rebuilds `build/vllm` from the new queue.")
    return "\n".join(out) + "\n"


def conflict_report(state: RebaseState, failure, root: Path) -> str:
    old, new = old_pin_of(state), new_pin_of(state)
    stopped = state.results[-1]
    total = len(state.queue)
    out = _header(state, old, new, f"Rebase onto vLLM {new.version}: stopped at a conflict")
    out += [
        "",
        "## Conflict",
        "",
        f"Patch {state.next_index + 1} of {total}, **{stopped.subject}** (`{stopped.name}`), does not "
        f"apply to vLLM {new.version} even with a 3-way merge. Conflicting files and hunks:",
        "",
    ]
    for path, hunks in (stopped.conflicts or {"(git named no file)": []}).items():
        out.append(f"- `{path}`")
        out += [f"  - `{h}`" for h in hunks]
    out += ["", "git said:", "", "```"] + failure.git_output.strip().splitlines()[-12:] + ["```", ""]
    out += [
        "Nothing in `patches/`, `upstream.toml` or the ops cache has changed.",
        "",
        "## Next steps",
        "",
        f"1. In `{state.tree}`, edit the conflict markers (`git am --show-current-patch=diff` shows the patch).",
        "2. `git add <files>` (or `git am --skip` in the tree to drop the patch).",
        "3. `invoke rebase --continue`: applies the remaining patches, exports, updates the pin, "
        "runs the checks and commits on "
        f"`{state.options.branch}`.",
        "",
        "Or `invoke rebase --abort`: the tree, `patches/` and the pin go back exactly as they were.",
        "",
    ]
    done = state.results[:-1]
    if done:
        out += ["## Patches before it", ""] + _table(done) + [""]
    rest = state.queue[state.next_index + 1 :]
    if rest:
        out += ["## Not yet tried", ""] + [f"- `{n}`" for n in rest] + [""]
    return "\n".join(out)


def _artifact(a) -> str:
    return f"`{a.filename}`<br>sha256 `{a.sha256[:16]}…`" if a.filename else "— (not on the package index)"


def _older(old: Pin, new: Pin) -> bool:
    try:
        return Version(new.version) < Version(old.version)
    except InvalidVersion:
        return False
