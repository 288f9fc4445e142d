"""`Upstream-Status:`, the trailer that says why a patch is carried and when it can go.

  Upstream-Status: carry                      ours for good (the default without a trailer)
  Upstream-Status: submitted <url>            sent upstream; kept until it lands
  Upstream-Status: drop-after <version|commit>  upstream has it from that release or commit
                                              on: a rebase onto it or later drops the patch

Trailers are what git says they are (`git interpret-trailers --parse`: the last
paragraph of the message only), so a line in the middle of the body is not one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from vllm_fork.core.git import git
from vllm_fork.queue.patchfile import PatchFile

TRAILER = "Upstream-Status"
CARRY, SUBMITTED, DROP_AFTER = "carry", "submitted", "drop-after"
KINDS = (CARRY, SUBMITTED, DROP_AFTER)
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_URL = re.compile(r"https?://\S+")
_LINE = re.compile(rf"^{TRAILER}\s*:", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class UpstreamStatus:
    kind: str
    arg: str = ""
    declared: bool = True  # False: no trailer, carry by default

    def __str__(self) -> str:
        text = f"{self.kind} {self.arg}".strip()
        return text if self.declared else f"{text} (no {TRAILER} trailer)"


def trailers(message: str) -> list[tuple[str, str]]:
    """(key, value) of each trailer in `message`, by git's own rule (last paragraph)."""
    proc = git(None, "interpret-trailers", "--parse", "--no-divider", input=message + "\n")
    found = []
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(":")
        found.append((key.strip(), value.strip()))
    return found


def message_of(patch: PatchFile) -> str:
    return f"{patch.subject}\n\n{patch.body}".strip()


def declared(patch: PatchFile) -> list[str]:
    return [v for k, v in trailers(message_of(patch)) if k.lower() == TRAILER.lower()]


def parse_status(value: str) -> UpstreamStatus:
    """One trailer value; ValueError saying what is wrong with it."""
    kind, _, arg = value.strip().partition(" ")
    arg = arg.strip()
    if kind == CARRY:
        if arg:
            raise ValueError(f"`{CARRY}` takes nothing after it, got {arg!r}")
    elif kind == SUBMITTED:
        if not _URL.fullmatch(arg):
            raise ValueError(f"`{SUBMITTED}` needs the URL of the upstream pull request, got {arg!r}")
    elif kind == DROP_AFTER:
        if not (_is_version(arg) or _COMMIT.fullmatch(arg)):
            raise ValueError(f"`{DROP_AFTER}` needs a release version (0.34.0) or a commit id, got {arg!r}")
    else:
        raise ValueError(f"unknown status {kind!r}: use one of {', '.join(KINDS)}")
    return UpstreamStatus(kind, arg)


def upstream_status(patch: PatchFile) -> UpstreamStatus:
    """The patch's status; carry when it declares none. ValueError when malformed."""
    values = declared(patch)
    if not values:
        return UpstreamStatus(CARRY, declared=False)
    if len(values) > 1:
        raise ValueError(f"{len(values)} {TRAILER} trailers; keep one")
    return parse_status(values[0])


def status_problems(patch: PatchFile) -> list[str]:
    """What `invoke check` says about the trailer: malformed, doubled, or not where git reads trailers."""
    name = patch.path.name
    try:
        upstream_status(patch)
    except ValueError as exc:
        return [f"{name}: {TRAILER}: {exc}"]
    if _LINE.search(patch.body) and not declared(patch):
        return [
            f"{name}: an {TRAILER} line is in the body but not a trailer: git reads trailers only in the "
            "last paragraph of the message (reword the commit in build/vllm, then `invoke export`)"
        ]
    return []


def _is_version(text: str) -> bool:
    try:
        Version(text.removeprefix("v"))
    except InvalidVersion:
        return False
    return True


def drop_reason(
    status: UpstreamStatus, new_version: str, new_commit: str, repo: Path | None = None
) -> tuple[bool, str]:
    """Whether a `drop-after` condition holds for the new upstream, and why (or why it cannot tell)."""
    if status.kind != DROP_AFTER:
        return False, ""
    arg = status.arg
    if _is_version(arg) and not _COMMIT.fullmatch(arg):
        try:
            new = Version(new_version.removeprefix("v"))
        except InvalidVersion:
            return False, f"{TRAILER}: {DROP_AFTER} {arg}: {new_version} is not a release version; kept"
        if new >= Version(arg.removeprefix("v")):
            return True, f"{TRAILER}: {DROP_AFTER} {arg}, and the new upstream is {new_version}"
        return False, ""
    if new_commit and (new_commit.startswith(arg) or arg.startswith(new_commit)):
        return True, f"{TRAILER}: {DROP_AFTER} {arg}, the new upstream commit itself"
    if repo is not None and new_commit:
        proc = git(repo, "merge-base", "--is-ancestor", arg, new_commit, check=False)
        if proc.returncode == 0:
            return True, f"{TRAILER}: {DROP_AFTER} {arg}, an ancestor of the new upstream {new_commit[:12]}"
        if proc.returncode == 1:
            return False, ""
    return False, (
        f"{TRAILER}: {DROP_AFTER} {arg}: cannot tell whether the new upstream contains that commit "
        "(its history is not here: use `--source git`); kept"
    )
