"""`invoke check`, the CI gate: every problem with the queue, reported at once."""

from __future__ import annotations

import enum
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_fork.core.errors import ConfigError, ForkError
from vllm_fork.core.git import am, am_abort, git, operation_in_progress, out
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.core.paths import patches_dir as default_patches_dir
from vllm_fork.queue import checkcache
from vllm_fork.queue.apply import conflicts_at, prepare_tree
from vllm_fork.queue.carry import status_problems
from vllm_fork.queue.export import format_patches
from vllm_fork.queue.patchfile import PatchFile, parse_patch
from vllm_fork.queue.report import PatchReport, Policy, add_private_names, judge, load_policy, patch_report
from vllm_fork.queue.selfcontained import prefix_findings
from vllm_fork.queue.series import series_entries, series_problems
from vllm_fork.queue.upstream_checks import PatchResult, check_queue
from vllm_fork.upstream.pin import Pin, load_pin
from vllm_fork.upstream.sources import Upstream, ensure_upstream

#: A body shorter than this cannot say why a change is needed.
MIN_WHY_CHARS = 20


class Kind(enum.Enum):
    """What is wrong, which decides what `check` can still test."""

    SERIES = "series"  # patches/series and the patch files disagree
    UNREADABLE = "unreadable"  # not a format-patch file: it cannot be applied, so it is not
    MESSAGE = "message"  # no subject, or no body saying why
    APPLY = "apply"  # does not apply strictly on the pinned release
    EXPORT = "export"  # apply + export would not give back the same files
    PREFIX = "self-contained"  # the tree after this patch (and those before it) is broken on its own
    POLICY = "policy"  # over a limit of patches/policy.toml, or the policy file itself is wrong
    UPSTREAM = "upstream-hooks"  # vLLM's own pre-commit hooks find something in the files a patch touches


@dataclass(frozen=True)
class Problem:
    kind: Kind
    patch: str | None  # the patch file's name; None when it is about the queue as a whole
    message: str  # what a person reads: names the file and the next step

    def __str__(self) -> str:
        return self.message


def message_problems(patch: Path) -> list[Problem]:
    try:
        parsed = parse_patch(patch)
    except ForkError as exc:
        return [Problem(Kind.UNREADABLE, patch.name, str(exc))]
    problems = []
    if not parsed.subject:
        problems.append(Problem(Kind.MESSAGE, patch.name, f"{patch.name}: empty subject"))
    if len(parsed.why) < MIN_WHY_CHARS:
        problems.append(
            Problem(
                Kind.MESSAGE,
                patch.name,
                f"{patch.name}: the commit message has no body saying why the change is needed",
            )
        )
    return problems


def upstream_status_problems(patches: list[Path]) -> list[Problem]:
    """Each patch's `Upstream-Status:` trailer is well formed and where git reads trailers."""
    problems = []
    for patch in patches:
        try:
            found = status_problems(parse_patch(patch))
        except ForkError:
            continue  # message_problems already names an unreadable file
        problems += [Problem(Kind.MESSAGE, patch.name, message) for message in found]
    return problems


def _apply_all_at_once(tree: Path, patches: list[Path]) -> int:
    """One `git am` for the whole queue (one process, not one per patch, which costs a process each).

    Returns how many patches it committed: all of them, or those before the first
    that does not apply (the caller then tests that one and the rest one by one).
    """
    if not patches:
        return 0
    proc = am(tree, patches)
    if proc.returncode == 0:
        return len(patches)
    applying = Path(out(tree, "rev-parse", "--absolute-git-dir")) / "rebase-apply" / "next"
    done = int(applying.read_text()) - 1 if applying.exists() else 0
    git(tree, "am", "--quit", check=False)  # keep the commits made; the failed patch left nothing behind
    git(tree, "reset", "--quiet", "--hard", "HEAD", check=False)
    return done


def apply_problems(tree: Path, patches: list[Path]) -> list[Problem]:
    """Apply each patch strictly (no 3-way); skip past failures to test the rest."""
    problems: list[Problem] = []
    start = _apply_all_at_once(tree, patches)
    for i, patch in enumerate(patches[start:], start + 1):
        proc = am(tree, [patch])
        if proc.returncode == 0:
            continue
        conflicts = conflicts_at(tree, out(tree, "rev-parse", "HEAD"), patch)
        where = (
            "; ".join(f"{f} {' '.join(h)}" for f, h in conflicts.items())
            or ((proc.stdout + proc.stderr).strip().splitlines() or ["git gave no reason"])[-1]
        )
        problems.append(
            Problem(Kind.APPLY, patch.name, f"{patch.name} ({i} of {len(patches)}) does not apply cleanly: {where}")
        )
        if operation_in_progress(tree):
            am_abort(tree, check=False)
    return problems


def export_problems(tree: Path, pdir: Path, entries: list[str]) -> list[Problem]:
    with tempfile.TemporaryDirectory() as tmp:
        names = format_patches(tree, Path(tmp))
        problems = []
        if names != entries:
            problems.append(
                Problem(Kind.EXPORT, None, f"export would write the series {names}, but patches/series lists {entries}")
            )
        for name in names:
            current = pdir / name
            if current.exists() and current.read_bytes() != (Path(tmp) / name).read_bytes():
                problems.append(
                    Problem(
                        Kind.EXPORT,
                        name,
                        f"{name}: not in exported form (apply + export changes its bytes); "
                        "run `invoke apply && invoke export`",
                    )
                )
        return problems


@dataclass
class Review:
    """What `check` found, and the per-patch report it judged the policy on."""

    problems: list[Problem]
    reports: list[PatchReport]  # one per readable patch, in series order
    patches: list[PatchFile]
    policy: Policy
    hooks: list[PatchResult] = field(default_factory=list)  # vLLM's hooks per patch (`upstream=True`)

    def to_json(self) -> dict[str, Any]:
        """What the cache keeps: the problems and the reports (the patches and the policy are re-read)."""
        return {
            "problems": [[p.kind.value, p.patch, p.message] for p in self.problems],
            "reports": [r.to_json() for r in self.reports],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], pdir: Path) -> Review:
        problems = [Problem(Kind(kind), patch, message) for kind, patch, message in data["problems"]]
        reports = [PatchReport.from_json(r) for r in data["reports"]]
        try:
            policy = load_policy(pdir)
        except ConfigError:
            policy = Policy()  # its problem is among those kept
        return cls(problems, reports, [parse_patch(pdir / r.name) for r in reports], policy)


def policy_review(
    pdir: Path, entries: list[str], readable: list[Path]
) -> tuple[list[PatchFile], list[PatchReport], Policy, list[Problem]]:
    """Each readable patch's report (numbered by its place in the series), the policy, and what it finds wrong."""
    patches = [parse_patch(p) for p in readable]
    reports = [patch_report(entries.index(p.name) + 1, parsed) for p, parsed in zip(readable, patches)]
    try:
        policy = load_policy(pdir)
    except ConfigError as exc:
        return patches, reports, Policy(), [Problem(Kind.POLICY, None, str(exc))]
    problems = [Problem(Kind.POLICY, patch, message) for patch, message in judge(reports, policy, entries)]
    return patches, reports, policy, problems


def review(root: Path = REPO_ROOT, source: str | None = None, pin: Pin | None = None, upstream: bool = False) -> Review:
    """All problems with patches/ against the pin, and the per-patch report.

    The review follows from the upstream commit and the bytes of patches/ alone: it is kept
    in the cache under that key (checkcache), and only a changed queue is reviewed again.
    With `upstream`, also vLLM's own pre-commit hooks on each patch's files (upstream_checks,
    which keeps its own cache).
    """
    pin = pin or load_pin(root)
    pdir = default_patches_dir(root)
    source_tree = ensure_upstream(pin, source)
    key = checkcache.queue_key(source_tree.commit, pin.tag, pdir)
    stored = checkcache.load_result(key)
    if stored is not None:
        found = Review.from_json(stored, pdir)
    else:
        memo = checkcache.Memo(persist=True)
        found = fresh_review(root, pin, pdir, source_tree, memo)
        memo.save()
        checkcache.store_result(key, found.to_json())
    if upstream and not any(p.kind in (Kind.APPLY, Kind.UNREADABLE, Kind.SERIES) for p in found.problems):
        found.hooks = hook_review(root, source_tree, pin.tag, pdir)
        found.problems += [Problem(Kind.UPSTREAM, f.patch, str(f)) for r in found.hooks for f in r.findings]
    return found


def hook_review(root: Path, upstream: Upstream, tag: str, pdir: Path) -> list[PatchResult]:
    """vLLM's own pre-commit hooks on each patch's files, as the check tree stands after it."""
    readable = [pdir / e for e in series_entries(pdir)]
    tree = root / "build" / ".check-tree"
    prepare_tree(tree, upstream, tag, force=True, borrow_objects=True)
    if apply_problems(tree, readable):
        return []  # the review already names the patch that does not apply
    return check_queue(tree, upstream.commit, [p.name for p in readable])


def fresh_review(root: Path, pin: Pin, pdir: Path, upstream: Upstream, memo: checkcache.Memo) -> Review:
    """The review computed, not read from the cache (`memo` keeps each file's analysis by its text)."""
    problems = [Problem(Kind.SERIES, None, message) for message in series_problems(pdir)]
    entries = series_entries(pdir)
    listed = [pdir / e for e in entries if (pdir / e).is_file() and "/" not in e]
    readable = []
    for patch in listed:
        found = message_problems(patch)
        problems += found
        if not any(p.kind is Kind.UNREADABLE for p in found):
            readable.append(patch)
    problems += upstream_status_problems(readable)
    parsed, reports, policy, found = policy_review(pdir, entries, readable)
    problems += found
    problems += tree_problems(root, upstream, pin.tag, pdir, entries, readable, parsed, reports, memo)
    return Review(problems, reports, parsed, policy)


def tree_problems(
    root: Path,
    upstream: Upstream,
    tag: str,
    pdir: Path,
    entries: list[str],
    readable: list[Path],
    parsed: list[PatchFile],
    reports: list[PatchReport],
    memo: checkcache.Memo,
) -> list[Problem]:
    """Apply the readable patches in the check tree; each prefix must stand; export must round-trip.
    Fills each report's private names when the queue applies."""
    tree = root / "build" / ".check-tree"
    prepare_tree(tree, upstream, tag, force=True, borrow_objects=True)
    failed = apply_problems(tree, readable)
    problems = list(failed)
    if not failed:
        # Commit i of the check tree is exactly upstream + patches 1..i: each prefix must stand.
        findings = prefix_findings(tree, upstream.commit, [p.name for p in readable], memo)
        problems += [Problem(Kind.PREFIX, f.patch, f.message) for f in findings]
        commits = git(tree, "rev-list", "--reverse", f"{upstream.commit}..HEAD").stdout.split()
        if len(commits) == len(readable):
            add_private_names(reports, parsed, tree, commits, memo)
    if not failed and not series_problems(pdir) and len(readable) == len(entries):
        problems += export_problems(tree, pdir, entries)
    return problems


def check(root: Path = REPO_ROOT, source: str | None = None, pin: Pin | None = None) -> list[Problem]:
    """All problems with patches/ against the pin; empty when the queue is sound."""
    return review(root, source, pin).problems
