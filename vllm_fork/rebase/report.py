"""The rebase report, in Markdown fit to be a pull-request body."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from vllm_fork.core.git import git_output_without_hints
from vllm_fork.core.urls import redact_url
from vllm_fork.queue.apply import PatchFailure
from vllm_fork.rebase.classify import CLEAN, CONFLICT, DROPPED, RESOLVED, SKIPPED, THREE_WAY, PatchResult
from vllm_fork.rebase.state import RebaseState, new_pin_of, old_pin_of
from vllm_fork.rebase.survey import FOLLOWS, GONE, Forecast, Survey
from vllm_fork.rebase.testrun import TestRun
from vllm_fork.upstream.pin import Artifact, Pin

_MARK = {
    CLEAN: "clean",
    THREE_WAY: "3-way merge",
    DROPPED: "dropped: already upstream",
    CONFLICT: "**conflict**",
    RESOLVED: "conflict, resolved by hand",
    SKIPPED: "dropped by hand",
    GONE: "**target file gone**",
    FOLLOWS: "**depends on an earlier failing patch**",
}


def upstream_id(pin: Pin, imported: str) -> str:
    """The one id a report shows for an upstream: the pin's commit (vLLM's own, from git or the
    sdist's version file), or the sdist import's when the release does not say its commit."""
    return pin.commit[:12] if pin.commit else f"sdist import {imported[:12]}"


@dataclass
class Checks:
    """What `invoke rebase` checked after the last patch: the success report shows it."""

    check_problems: list[str]
    tests: TestRun
    compiled_changed: list[str]
    compiled_source: str
    seconds: float = 0.0
    seeded: str = ""  # the ops artifact made for the new release, when --seed made one
    accepted: bool = False  # committed although they failed (--accept-failing-tests)

    @property
    def failed(self) -> bool:
        return bool(self.check_problems) or self.tests.failed


#: At most this many failing tests are listed by name in a report (the count is always given).
MAX_LISTED_FAILURES = 40


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _reproduce(state: RebaseState, new: Pin) -> str:
    to = new.commit if not new.tag else new.version
    src = f" --source {state.source}"
    remote = f" --remote {redact_url(state.remote)}" if state.remote else ""
    return f"```sh\ngit checkout {_base_hint(state)}\ninvoke rebase --to {to}{src}{remote}\n```\n"


def _base_hint(state: RebaseState) -> str:
    return state.orig.get("root_head", "")[:12] or "<the commit this branch started from>"


def _table(results: list[PatchResult]) -> list[str]:
    lines = ["| # | patch | outcome | new file | diff | notes |", "|---|---|---|---|---|---|"]
    for i, r in enumerate(results, 1):
        extra = [f"{len(r.by_eye)} hunk(s) to check by eye"] if r.by_eye else []
        extra += [f"upstream content lost in {len(r.lost)} file(s)"] if r.lost else []
        notes = "; ".join(r.notes + extra)
        change = f"**{r.diff_change}**" if r.diff_change == "changed" else r.diff_change or "—"
        lines.append(
            f"| {i} | {_cell(r.subject)}<br>`{r.name}` | {_MARK[r.outcome]} | "
            f"{'`' + r.new_name + '`' if r.new_name else '—'} | {change} | {_cell(notes) or '—'} |"
        )
    return lines


def _by_patch(forecasts: list[Forecast], field: str) -> list[str]:
    """A bullet per patch with its `field` lines (blame, lost content) below it."""
    out = []
    for f in forecasts:
        out.append(f"- **{f.subject}** (`{f.name}`)")
        out += [f"  - {line}" for line in getattr(f, field)]
    return out + [""]


def forecast_section(survey: Survey, results: list[PatchResult] | None = None) -> list[str]:
    """The survey's forecast for every patch; with `results`, what actually happened so far."""
    fc = survey.forecasts
    counts: dict[str, int] = {}
    for f in fc:
        counts[f.outcome] = counts.get(f.outcome, 0) + 1
    summary = ", ".join(f"{n} {_MARK[k].strip('*')}" for k, n in counts.items())
    out = [
        "## Forecast",
        "",
        f"Every patch tried on the new upstream before any resolution ({len(fc)} patches, "
        f"{survey.seconds:.1f} s): {summary or 'none'}.",
        "",
    ]
    done = {r.name: r for r in results or []}
    failing = survey.failing()
    if failing:
        out += [
            f"**{len(failing)} patch(es) will need a hand** (conflict, target gone, or depending on one that fails):",
            "",
        ]
        for f in failing:
            i = fc.index(f) + 1
            now = f" — now: {_MARK[done[f.name].outcome]}" if f.name in done else ""
            out.append(f"- {i}. **{f.subject}** (`{f.name}`): {_MARK[f.outcome]}{now}")
            for path, hunks in f.files.items():
                out.append(f"  - `{path}`" + (": " + ", ".join(f"`{h}`" for h in hunks) if hunks else ""))
            out += [f"  - {n}" for n in f.notes]
        out.append("")
    else:
        out += ["No patch is expected to conflict.", ""]
    three_way = [f for f in fc if f.outcome == THREE_WAY]
    if three_way:
        out += ["3-way merges to check by eye:", ""]
        for f in three_way:
            out.append(f"- {fc.index(f) + 1}. **{f.subject}** (`{f.name}`)")
            out += [f"  - {b}" for b in f.by_eye]
        out.append("")
    dropped = [f for f in fc if f.outcome == DROPPED]
    if dropped:
        out += ["To be dropped:", ""] + [f"- `{f.name}` — {f.subject}: {'; '.join(f.notes)}" for f in dropped]
        out.append("")
    if results is not None:
        rows = ["| # | patch | forecast | so far |", "|---|---|---|---|"]
        for i, f in enumerate(fc, 1):
            now = _MARK[done[f.name].outcome] if f.name in done else "not yet"
            rows.append(f"| {i} | `{f.name}` | {_MARK[f.outcome]} | {now} |")
        out += rows + [""]
    out += ["## Upstream blame", ""]
    blamed = [f for f in fc if f.blame]
    if survey.blame_note:
        out += [survey.blame_note, ""]
    elif blamed:
        heading = "Upstream commits between the two pins that touched the lines of each conflicting or 3-way hunk:"
        out += [heading, ""] + _by_patch(blamed, "blame")
    else:
        out += ["No conflicting or 3-way hunk to blame.", ""]
    lost = [f for f in fc if f.lost]
    if lost:
        out += ["## Upstream content loss (forecast)", ""] + _by_patch(lost, "lost")
    return out


def survey_report(survey: Survey, old: Pin, new: Pin, source: str, old_commit: str, new_commit: str) -> str:
    """`invoke rebase --survey`: the forecast alone; nothing was changed."""
    out = [
        f"# Survey: the patch queue on vLLM {new.version}",
        "",
        f"- upstream: **vLLM {old.version}** (`{old.tag or old.commit}`, {upstream_id(old, old_commit)}) → "
        f"**vLLM {new.version}** (`{new.tag or new.commit}`, {upstream_id(new, new_commit)})",
        f"- source: `{source}`",
        "- nothing was changed: not `patches/`, the pin, `build/vllm` nor the cache (beyond fetching the upstreams)",
        "",
    ]
    out += forecast_section(survey)
    out += ["Start the rebase with `invoke rebase --to " + (new.version if new.tag else new.commit) + "`.", ""]
    return "\n".join(out)


def _header(state: RebaseState, old: Pin, new: Pin, title: str) -> list[str]:
    return [
        f"# {title}",
        "",
        f"- upstream: **vLLM {old.version}** (`{old.tag or old.commit}`, {upstream_id(old, state.old_upstream)}) → "
        f"**vLLM {new.version}** (`{new.tag or new.commit}`, {upstream_id(new, state.new_upstream)})",
        f"- source: `{state.source}`"
        + (f" ({new.sdist.filename}, sha256 `{new.sdist.sha256[:16]}…`)" if state.source == "pypi" else ""),
    ]


def _failure_lines(checks: Checks) -> list[str]:
    """What failed, as bullets: each `invoke check` problem and each failing test."""
    out = []
    if checks.check_problems:
        out.append(f"- `invoke check`: **{len(checks.check_problems)} problem(s)**")
        out += [f"  - {_cell(p)}" for p in checks.check_problems]
    t = checks.tests
    if t.failed:
        named = f", {len(t.failures)} failing test(s)" if t.failures else ""
        out.append(f"- tests (`{t.cmd}`): **failed** (exit {t.rc}{named}) — {_cell(t.summary)}")
        out += [f"  - `{_cell(f)}`" for f in t.failures[:MAX_LISTED_FAILURES]]
        if len(t.failures) > MAX_LISTED_FAILURES:
            out.append(f"  - … and {len(t.failures) - MAX_LISTED_FAILURES} more (run the command to see them)")
    return out


def _gate_section(state: RebaseState, checks: Checks) -> list[str]:
    """Why the rebase stopped before committing, or that it committed past failures on request."""
    if not checks.failed:
        return []
    if checks.accepted:
        return [
            "## Committed with failures (`--accept-failing-tests`)",
            "",
            "The check or the tests failed and the rebase was told to commit anyway. What failed:",
            "",
            *_failure_lines(checks),
            "",
        ]
    return [
        "## Stopped: the check or the tests failed",
        "",
        "Nothing was committed: `patches/`, `upstream.toml` and the rest are as they were before the rebase; "
        f"every patch is applied in `{state.tree}`. What failed:",
        "",
        *_failure_lines(checks),
        "",
        "Next steps:",
        "",
        f"1. Fix the cause in `{state.tree}` and fold the fix into the patch's commit there "
        "(`git commit -a --fixup=<commit>` then `git rebase -i --autosquash refs/fork/upstream`; "
        "for the last patch, `git commit -a --amend`).",
        "2. `invoke rebase --continue`: exports the tree again, re-runs the check and the tests, and commits on "
        f"`{state.options.branch}` when they pass.",
        "",
        "Or `invoke rebase --continue --accept-failing-tests` to commit anyway (the report and the commit "
        "message record the failures), or `invoke rebase --abort` to put everything back as it was.",
        "",
    ]


def success_report(state: RebaseState, old: Pin, new: Pin, checks: Checks) -> str:
    results = state.results
    counts = {k: sum(r.outcome == k for r in results) for k in _MARK}
    summary = ", ".join(f"{n} {_MARK[k].strip('*')}" for k, n in counts.items() if n)
    stopped = checks.failed and not checks.accepted
    title = f"Rebase onto vLLM {new.version}" + (": stopped, the check or the tests failed" if stopped else "")
    out = _header(state, old, new, title)
    if _older(old, new):
        out.append(f"- note: {new.version} is older than {old.version}: this moves the fork back")
    out += [f"- patches: {len(results)} → {sum(1 for r in results if r.new_name)} ({summary or 'none'})", ""]
    out += _gate_section(state, checks)
    if state.forecast:
        out += forecast_section(Survey.from_dict(state.forecast), results)
    out += ["## Patches", ""] + _table(results) + [""]
    changed = [r for r in results if r.diff_change == "changed"]
    refreshed = [r for r in results if r.diff_change == "refreshed"]
    out += ["## Refreshed vs changed", ""]
    out.append(
        f"{len(changed)} changed (their `+`/`-` lines or message differ: read these), "
        f"{len(refreshed)} refreshed (only line numbers or context moved), "
        f"{sum(r.diff_change == 'unchanged' for r in results)} unchanged."
    )
    out += [""] + [f"- changed: `{r.new_name}` — {r.subject}" for r in changed] + ([""] if changed else [])
    lost = [r for r in results if r.lost]
    out += ["## Upstream content loss", ""]
    if lost:
        out.append("Upstream lines near these patches' hunks that the merged or resolved result no longer has:")
        out.append("")
        for r in lost:
            out.append(f"- **{r.subject}** (`{r.new_name or r.name}`, {_MARK[r.outcome]})")
            out += [f"  - {ln}" for ln in r.lost]
    else:
        out.append("None: every 3-way merge and hand resolution kept upstream's lines near the hunks.")
    out.append("")
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
        changed_text = (
            f"**Changed** between the two upstreams ({len(checks.compiled_changed)} file(s), list: "
            f"{checks.compiled_source}): the compiled ops of {old.version} do not fit {new.version}."
        )
        wheel = f"`{new.wheel.filename or '(none on the index)'}`"
        if checks.seeded:
            out.append(
                f"{changed_text} Seeded by this rebase (`--seed`) from the official wheel {wheel}: {checks.seeded}; "
                "`ops-cache/index.json` is in the commit."
            )
        else:
            out.append(
                f"{changed_text} The ops cache has no artifact for {new.version} yet: before building, seed it from the "
                f"official wheel {wheel} with `invoke ops.seed` on this branch (or rebase with `--seed`)."
            )
        out.append("")
        out += [f"- `{p}`" for p in shown] + ([f"- … and {more} more"] if more else [])
    else:
        out.append(
            f"Unchanged ({checks.compiled_source}): the compiled ops of {old.version} still fit; "
            "no ops-cache seeding needed."
        )
    out += ["", "## Check and tests", ""]
    listed = "listed above" if checks.failed else ""
    problems = len(checks.check_problems)
    out.append(f"- `invoke check`: **{problems} problem(s)**, {listed}" if problems else "- `invoke check`: ok")
    t = checks.tests
    status = (
        "skipped"
        if t.rc is None
        else f"passed ({t.seconds:.0f} s)"
        if not t.failed
        else f"**failed** (exit {t.rc}, {t.seconds:.0f} s), {listed}"
    )
    out.append(f"- tests (`{t.cmd}`): {status} — {_cell(t.summary)}")
    out += ["", "## Pin", "", "| | old | new |", "|---|---|---|"]
    for field in ("version", "tag", "commit"):
        out.append(f"| {field} | `{getattr(old, field)}` | `{getattr(new, field)}` |")
    for name in ("sdist", "wheel"):
        a, b = getattr(old, name), getattr(new, name)
        out.append(f"| {name} | {_artifact(a)} | {_artifact(b)} |")
    out += ["", "## Reproduce", "", _reproduce(state, new)]
    out.append("Then `invoke check` and the tests; `invoke apply` rebuilds `build/vllm` from the new queue.")
    return "\n".join(out) + "\n"


def conflict_report(state: RebaseState, failure: PatchFailure, root: Path) -> str:
    old, new = old_pin_of(state), new_pin_of(state)
    stopped = state.results[-1]
    total = len(state.queue)
    out = _header(state, old, new, f"Rebase onto vLLM {new.version}: stopped at a conflict")
    out.append("")
    if state.forecast:
        out += forecast_section(Survey.from_dict(state.forecast), state.results)
    out += [
        "## Conflict",
        "",
        f"Patch {state.next_index + 1} of {total}, **{stopped.subject}** (`{stopped.name}`), does not "
        f"apply to vLLM {new.version} even with a 3-way merge. Conflicting files and hunks:",
        "",
    ]
    for path, hunks in (stopped.conflicts or {"(git named no file)": []}).items():
        out.append(f"- `{path}`")
        out += [f"  - `{h}`" for h in hunks]
    out += ["", "git said:", "", "```"] + git_output_without_hints(failure.git_output)[-12:] + ["```", ""]
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


def _artifact(a: Artifact) -> str:
    return f"`{a.filename}`<br>sha256 `{a.sha256[:16]}…`" if a.filename else "— (not on the package index)"


def _older(old: Pin, new: Pin) -> bool:
    try:
        return Version(new.version) < Version(old.version)
    except InvalidVersion:
        return False
