"""Each patch as an upstream reviewer reads it, and the queue's policy (`patches/policy.toml`).

Per patch: the lines it adds as code, tests (paths under `tests/`) and docs (under
`docs/`, or `*.md`), with code added by a patch that adds no test lines flagged;
the upstream private names its code uses (`privatenames`) and whether a test of
the queue mentions each; its message's length in lines, its `Signed-off-by:` (DCO)
and `Upstream-Status:` trailers. `invoke check --report` prints it as tables.

The policy holds the limits `invoke check` enforces, as data:

    [limits]
    max_code_lines = 800       # added code lines per patch (tests and docs do not count)
    max_message_lines = 40     # lines in the commit message, subject included
    signed_off_by = true       # every patch carries a Signed-off-by trailer

    [[exception]]              # one patch let off one limit, for a reason the report shows
    patch = "0002-....patch"
    limit = "max_code_lines"
    reason = "split pending (issue 43)"

A limit left out is not enforced; without the file there is no policy. An exception
names a patch file, its number ignored (a rebase renumbers). One for a patch no longer
in the queue, or one the patch no longer needs, is listed in the report as stale, not
failed: a rebase that drops a patch must not stop on its exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from vllm_fork.core.errors import ConfigError
from vllm_fork.core.fs import read_toml
from vllm_fork.core.git import git
from vllm_fork.queue.carry import message_of, trailers, upstream_status
from vllm_fork.queue.checkcache import Memo
from vllm_fork.queue.patchfile import FileDiff, PatchFile
from vllm_fork.queue.privatenames import PrivateUse, all_private_uses
from vllm_fork.queue.selfcontained import Blobs

POLICY_FILE = "policy.toml"
MAX_CODE_LINES, MAX_MESSAGE_LINES, SIGNED_OFF_BY = "max_code_lines", "max_message_lines", "signed_off_by"
LIMITS = (MAX_CODE_LINES, MAX_MESSAGE_LINES, SIGNED_OFF_BY)
CODE, TESTS, DOCS = "code", "tests", "docs"
_HUNK_START = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)")


# -- the policy --


@dataclass(frozen=True)
class Exemption:
    """One patch let off one limit, with the reason."""

    patch: str
    limit: str
    reason: str


@dataclass(frozen=True)
class Policy:
    max_code_lines: int | None = None
    max_message_lines: int | None = None
    signed_off_by: bool = False
    exemptions: tuple[Exemption, ...] = ()
    source: str = ""  # where it was read from, for messages; '' when there is no policy file

    def describe(self) -> str:
        if not self.source:
            return f"policy: none (no patches/{POLICY_FILE})"
        limits = [
            f"code lines <= {self.max_code_lines}" if self.max_code_lines is not None else "",
            f"message lines <= {self.max_message_lines}" if self.max_message_lines is not None else "",
            "Signed-off-by required" if self.signed_off_by else "",
        ]
        return f"policy ({self.source}): " + (", ".join(x for x in limits if x) or "no limits")


def _limit(table: dict[str, Any], key: str, path: Path) -> int | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{path}: [limits] {key} must be a whole number of lines, not {value!r}")
    return value


def _exemption(entry: Any, path: Path) -> Exemption:
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: each [[exception]] is a table with patch, limit and reason")
    values = {key: entry.get(key) for key in ("patch", "limit", "reason")}
    for key, value in values.items():
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f'{path}: an [[exception]] lacks `{key} = "..."` (patch, limit and reason are required)')
    if values["limit"] not in LIMITS:
        raise ConfigError(
            f"{path}: exception for {values['patch']}: unknown limit {values['limit']!r}; use one of {', '.join(LIMITS)}"
        )
    return Exemption(str(values["patch"]), str(values["limit"]), str(values["reason"]).strip())


def load_policy(patches_dir: Path) -> Policy:
    """The policy in `patches/policy.toml`; none when the file is absent. ConfigError when malformed."""
    path = patches_dir / POLICY_FILE
    if not path.exists():
        return Policy()
    data = read_toml(path, "it holds the queue's policy")
    limits = data.get("limits", {})
    unknown = sorted(set(limits) - set(LIMITS)) if isinstance(limits, dict) else []
    if not isinstance(limits, dict) or unknown:
        raise ConfigError(
            f"{path}: [limits] takes {', '.join(LIMITS)}" + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    signed = limits.get(SIGNED_OFF_BY, False)
    if not isinstance(signed, bool):
        raise ConfigError(f"{path}: [limits] {SIGNED_OFF_BY} must be true or false, not {signed!r}")
    entries = data.get("exception", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: `exception` must be an array of tables ([[exception]])")
    return Policy(
        max_code_lines=_limit(limits, MAX_CODE_LINES, path),
        max_message_lines=_limit(limits, MAX_MESSAGE_LINES, path),
        signed_off_by=signed,
        exemptions=tuple(_exemption(e, path) for e in entries),
        source=f"patches/{POLICY_FILE}",
    )


# -- one patch --


def kind_of(path: str) -> str:
    """tests (under tests/), docs (under docs/, or Markdown), or code (the rest)."""
    if path.startswith("tests/"):
        return TESTS
    if path.startswith("docs/") or path.endswith(".md"):
        return DOCS
    return CODE


def added_lines(diff: FileDiff) -> dict[int, str]:
    """New-file line number -> text of each line the diff adds."""
    added: dict[int, str] = {}
    for hunk in diff.hunks:
        match = _HUNK_START.match(hunk[0])
        line = int(match.group(1)) if match else 0
        for text in hunk[1:]:
            if text.startswith("+"):
                added[line] = text[1:]
                line += 1
            elif text.startswith(" "):
                line += 1
    return added


@dataclass(frozen=True)
class Message:
    lines: int  # subject, blank line and body, as `git log` shows the message
    signed_off: bool
    upstream_status: str  # e.g. 'carry', 'none', or 'malformed'


def message_facts(patch: PatchFile) -> Message:
    message = message_of(patch)
    keys = {key.lower() for key, _ in trailers(message)}
    try:
        status = upstream_status(patch)
        carried = str(status) if status.declared else "none"
    except ValueError:
        carried = "malformed"
    return Message(len(message.splitlines()), "signed-off-by" in keys, carried)


@dataclass(frozen=True)
class Breach:
    patch: str
    limit: str
    what: str  # e.g. '2218 added code lines, over 800'


@dataclass
class PatchReport:
    index: int
    name: str
    added: dict[str, int]  # code / tests / docs -> added lines
    message: Message
    private: list[PrivateUse] | None = None  # None: not analysed (the queue does not apply)
    breaches: list[Breach] = field(default_factory=list)  # what the policy does not let off
    excused: list[tuple[Breach, str]] = field(default_factory=list)  # with the exception's reason

    @property
    def untested(self) -> bool:
        """Code added by a patch that adds no test lines."""
        return self.added[CODE] > 0 and self.added[TESTS] == 0

    def to_json(self) -> dict[str, Any]:
        """As plain JSON values (what `invoke check`'s cache keeps)."""
        return {
            "index": self.index,
            "name": self.name,
            "added": self.added,
            "message": [self.message.lines, self.message.signed_off, self.message.upstream_status],
            "private": None if self.private is None else [[u.name, u.qualified, u.path, u.line] for u in self.private],
            "breaches": [[b.patch, b.limit, b.what] for b in self.breaches],
            "excused": [[[b.patch, b.limit, b.what], why] for b, why in self.excused],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PatchReport:
        private = data["private"]
        return cls(
            data["index"],
            data["name"],
            data["added"],
            Message(*data["message"]),
            None if private is None else [PrivateUse(*u) for u in private],
            [Breach(*b) for b in data["breaches"]],
            [(Breach(*b), why) for b, why in data["excused"]],
        )


def patch_report(index: int, patch: PatchFile) -> PatchReport:
    added = {CODE: 0, TESTS: 0, DOCS: 0}
    for diff in patch.files:
        added[kind_of(diff.path)] += len(added_lines(diff))
    return PatchReport(index, patch.path.name, added, message_facts(patch))


def breaches_of(report: PatchReport, policy: Policy) -> list[Breach]:
    found = []
    code, message = report.added[CODE], report.message
    if policy.max_code_lines is not None and code > policy.max_code_lines:
        found.append(Breach(report.name, MAX_CODE_LINES, f"{code} added code lines, over {policy.max_code_lines}"))
    if policy.max_message_lines is not None and message.lines > policy.max_message_lines:
        found.append(
            Breach(report.name, MAX_MESSAGE_LINES, f"a {message.lines}-line message, over {policy.max_message_lines}")
        )
    if policy.signed_off_by and not message.signed_off:
        found.append(Breach(report.name, SIGNED_OFF_BY, "no Signed-off-by trailer (DCO)"))
    return found


def judge(reports: list[PatchReport], policy: Policy, series: list[str]) -> list[tuple[str | None, str]]:
    """Fill each report's breaches and excused ones; the policy's problems as (patch or None, message).

    `series`: the entries of patches/series (a listed patch that could not be read has no report,
    and check names it already).
    """
    exempt = {(patch_stem(e.patch), e.limit): e for e in policy.exemptions}
    used: set[tuple[str, str]] = set()
    problems: list[tuple[str | None, str]] = []
    for report in reports:
        report.breaches, report.excused = [], []
        for breach in breaches_of(report, policy):
            exemption = exempt.get((patch_stem(breach.patch), breach.limit))
            if exemption is None:
                report.breaches.append(breach)
                problems.append(
                    (
                        breach.patch,
                        f"{breach.patch}: {breach.what} ({breach.limit} in {policy.source}); fix the patch "
                        "(in build/vllm, then `invoke export`), or add an [[exception]] with its reason",
                    )
                )
            else:
                report.excused.append((breach, exemption.reason))
                used.add((patch_stem(breach.patch), breach.limit))
    return problems


def patch_stem(name: str) -> str:
    """A patch file's name without its number: what an exception names survives a renumbering
    (a rebase that drops or reorders patches exports them under new numbers)."""
    return re.sub(r"^\d{4}-", "", name)


def stale_exceptions(reports: list[PatchReport], policy: Policy) -> list[str]:
    """Exceptions that excuse nothing now: their patch left the queue, or no longer breaks the
    limit. Reported, not failed: a rebase that drops a patch must not stop on its exception
    (patches/ is the rebase's to write); the maintainer removes it."""
    breaking = {(patch_stem(b.patch), b.limit) for r in reports for b, _ in r.excused}
    present = {patch_stem(r.name) for r in reports}
    notes = []
    for e in policy.exemptions:
        if patch_stem(e.patch) not in present:
            notes.append(f"{policy.source}: an exception names {e.patch}, which is not in the queue: remove it")
        elif (patch_stem(e.patch), e.limit) not in breaking:
            notes.append(f"{policy.source}: {e.patch} no longer breaks {e.limit}: remove its exception")
    return notes


# -- private names, from the check tree --


def first_party(tree: Path, commit: str) -> frozenset[str]:
    """The tree's top-level packages (a folder with __init__.py), tests/ aside: `vllm` for vLLM."""
    # -r: into folders; --name-only: paths only.
    paths = git(tree, "ls-tree", "-r", "--name-only", commit).stdout.splitlines()
    return frozenset(p.split("/")[0] for p in paths if p.count("/") == 1 and p.endswith("/__init__.py")) - {"tests"}


def _code_files(patch: PatchFile) -> list[FileDiff]:
    return [d for d in patch.files if kind_of(d.path) == CODE and d.path.endswith(".py")]


def _private_rows(text: str, path: str, packages: frozenset[str]) -> list[list[str | int]]:
    return [[u.name, u.qualified, u.line] for u in all_private_uses(text, path, packages)]


def add_private_names(
    reports: list[PatchReport], patches: list[PatchFile], tree: Path, commits: list[str], memo: Memo | None = None
) -> None:
    """Fill each report's private names from commit i of `tree` (upstream + patches 1..i).

    `memo` keeps each file's uses by its text, across runs when it persists.
    """
    packages = first_party(tree, commits[0]) if commits else frozenset()
    memo = memo or Memo()
    blobs = Blobs(tree)
    blobs.get_many([f"{c}:{d.path}" for p, c in zip(patches, commits) for d in _code_files(p)])
    extra = ",".join(sorted(packages))
    for report, patch, commit in zip(reports, patches, commits):
        report.private = []
        for diff in _code_files(patch):
            text = blobs.text(commit, diff.path)
            if text is None:
                continue
            rows = memo.get("private", text, f"{diff.path}:{extra}", partial(_private_rows, text, diff.path, packages))
            added = set(added_lines(diff))
            report.private += [PrivateUse(n, q, diff.path, line) for n, q, line in rows if line in added]


def queue_test_lines(patches: list[PatchFile]) -> dict[str, str]:
    """Test file -> the lines the queue adds to it (all of it, for a test file the queue creates)."""
    texts: dict[str, str] = {}
    for patch in patches:
        for diff in patch.files:
            if kind_of(diff.path) == TESTS:
                texts[diff.path] = texts.get(diff.path, "") + "\n".join(added_lines(diff).values()) + "\n"
    return texts


def covering_test(use: PrivateUse, tests: dict[str, str]) -> str:
    """The first test file of the queue that mentions the private name; '' when none does."""
    pattern = re.compile(rf"\b{re.escape(use.attr)}\b")
    return next((path for path, text in sorted(tests.items()) if pattern.search(text)), "")


# -- the tables --


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def summary_table(reports: list[PatchReport]) -> list[str]:
    rows = [
        "| # | patch | code | tests | docs | untested code | message lines | Signed-off-by | Upstream-Status | policy |",
        "| ---: | --- | ---: | ---: | ---: | --- | ---: | --- | --- | --- |",
    ]
    for r in reports:
        verdict = [f"BREAKS: {b.what}" for b in r.breaches] + [
            f'exception "{reason}": {b.what}' for b, reason in r.excused
        ]
        rows.append(
            f"| {r.index} | {r.name} | {r.added[CODE]} | {r.added[TESTS]} | {r.added[DOCS]} | "
            f"{'FLAGGED: no test lines' if r.untested else '-'} | {r.message.lines} | "
            f"{'yes' if r.message.signed_off else 'no'} | {_cell(r.message.upstream_status)} | "
            f"{_cell('; '.join(verdict) or 'ok')} |"
        )
    return rows


def private_table(reports: list[PatchReport], tests: dict[str, str]) -> list[str]:
    rows = ["| # | private name | resolves to | where | named in a test |", "| ---: | --- | --- | --- | --- |"]
    unknown = [r.name for r in reports if r.private is None]
    for r in reports:
        grouped: dict[tuple[str, str, str], list[int]] = {}
        for use in r.private or []:
            grouped.setdefault((use.name, use.qualified, use.path), []).append(use.line)
        for (name, qualified, path), lines in grouped.items():
            covered = covering_test(PrivateUse(name, qualified, path, lines[0]), tests)
            rows.append(
                f"| {r.index} | `{name}` | `{qualified}` | {path}:{', '.join(map(str, lines))} | {covered or 'NO'} |"
            )
    if len(rows) == 2:
        rows = ["(none)"]
    if unknown:
        rows.append(f"(not analysed, the queue does not apply: {', '.join(unknown)})")
    return rows


def format_report(reports: list[PatchReport], patches: list[PatchFile], policy: Policy) -> str:
    lines = [policy.describe(), "", *summary_table(reports), "", "Upstream private names the patches' code uses:", ""]
    lines += private_table(reports, queue_test_lines(patches))
    stale = stale_exceptions(reports, policy)
    if stale:
        lines += ["", "Stale exceptions (not failures):", *(f"- {note}" for note in stale)]
    return "\n".join(lines)
