"""What `invoke rebase --to X` / `--latest` means: the pin of the new upstream.

`X` is a release version (`0.34.0`), a git tag (`v0.34.0`) or, with the git
source, a full commit id. The sdist and wheel file names and sha256 come from
the package index pip is configured to use (never a hard-coded host).
"""

from __future__ import annotations

import re
from dataclasses import asdict

from packaging.version import InvalidVersion, Version

from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import git
from vllm_fork.upstream.pin import Artifact, Pin
from vllm_fork.upstream.pkgindex import IndexFile, list_files
from vllm_fork.upstream.sources import Upstream

PROJECT = "vllm"
_COMMIT = re.compile(r"[0-9a-f]{40}")
_SDIST = re.compile(rf"{PROJECT}-(.+)\.tar\.gz")
NO_ARTIFACT = Artifact("", "")


def release_versions(files: list[IndexFile]) -> list[Version]:
    """Final releases with an sdist on the index, oldest first (pre-releases skipped)."""
    found = set()
    for f in files:
        m = _SDIST.fullmatch(f.filename)
        if not m:
            continue
        try:
            v = Version(m.group(1))
        except InvalidVersion:
            continue
        if not v.is_prerelease and not v.is_devrelease:
            found.add(v)
    return sorted(found)


def latest_version(files: list[IndexFile] | None = None) -> str:
    versions = release_versions(list_files(PROJECT) if files is None else files)
    if not versions:
        raise ForkError(
            f"no {PROJECT} release with an sdist on the package index pip uses; "
            "check `pip config list` / PIP_INDEX_URL, or name the release with --to"
        )
    return str(versions[-1])


def _artifacts(version: str, old: Pin, files: list[IndexFile]) -> tuple[Artifact, Artifact]:
    by_name = {f.filename: f for f in files}
    sdist = by_name.get(f"{PROJECT}-{version}.tar.gz")
    # The same platform as the old pin's wheel, else any x86_64 manylinux wheel.
    wanted = old.wheel.filename.replace(f"-{old.version}-", f"-{version}-")
    wheel = by_name.get(wanted) or next(
        (
            f
            for n, f in sorted(by_name.items())
            if n.startswith(f"{PROJECT}-{version}-") and n.endswith(".whl") and "manylinux" in n and "x86_64" in n
        ),
        None,
    )
    as_artifact = lambda f: Artifact(f.filename, f.sha256 or "") if f else NO_ARTIFACT  # noqa: E731
    return as_artifact(sdist), as_artifact(wheel)


def resolve_target(old: Pin, to: str | None, latest: bool, source: str, files: list[IndexFile] | None = None) -> Pin:
    """The new pin, before its upstream is fetched (`commit` may still be empty)."""
    if bool(to) == bool(latest):
        raise ForkError("say where to rebase to: `--to <version | tag | commit>` or `--latest`")
    if to and _COMMIT.fullmatch(to):
        if source != "git":
            raise ForkError(
                f"{to} is a commit: only the git source can fetch one (`--source git`); "
                "the pypi source knows released sdists only"
            )
        return old.with_changes(
            version=f"git-{to[:12]}", tag="", commit=to, source="git", sdist=NO_ARTIFACT, wheel=NO_ARTIFACT
        )
    if to and re.fullmatch(r"[0-9a-f]{7,39}", to):
        raise ForkError(f"{to!r} looks like a short commit id: give the full 40-character id")
    if files is None:
        try:
            files = list_files(PROJECT)
        except ForkError:
            files = []
    if latest:
        version = latest_version(files)
    else:
        assert to, "checked above: exactly one of --to and --latest"
        version = to.removeprefix("v")
    try:
        Version(version)
    except InvalidVersion:
        raise ForkError(f"{to!r} is neither a release version, a tag v<version>, nor a full commit id") from None
    tag = to if to and to.startswith("v") else f"v{version}"
    sdist, wheel = _artifacts(version, old, files)
    if source == "pypi" and not sdist.filename:
        raise ForkError(
            f"{PROJECT} {version} has no sdist on the package index pip uses; "
            "check the version (see `pip index versions vllm`), or use `--source git`"
        )
    if source == "pypi" and not sdist.sha256:
        raise ForkError(f"the package index gives no sha256 for {sdist.filename}; cannot verify it")
    commit = "" if source == "git" else old.commit  # filled in once the upstream is fetched
    return old.with_changes(version=version, tag=tag, commit=commit, source=old.source, sdist=sdist, wheel=wheel)


def commit_of(pin: Pin, upstream: Upstream) -> str:
    """The upstream commit id to record in the new pin."""
    if upstream.source == "git":
        return upstream.commit
    # An sdist carries its git commit in vllm/_version.py (`commit_id = 'g4ba787ec9'`).
    text = git(upstream.repo, "cat-file", "blob", f"{upstream.commit}:vllm/_version.py", check=False).stdout
    m = re.search(r"commit_id\s*=\s*['\"]g?([0-9a-f]{7,40})['\"]", text or "")
    return m.group(1) if m else ""


def pin_to_dict(pin: Pin) -> dict:
    return asdict(pin)


def pin_from_dict(data: dict) -> Pin:
    return Pin(**{**data, "sdist": Artifact(**data["sdist"]), "wheel": Artifact(**data["wheel"])})
