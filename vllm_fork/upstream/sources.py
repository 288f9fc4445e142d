"""The pinned upstream tree, from one of two sources, as a commit in a cache repo.

- ``pypi``: the release sdist, downloaded through pip's index and imported as one
  commit. The import is deterministic (fixed identity and dates, modes taken from
  the archive, file order sorted), so the commit id is the same on every machine.
  It is streamed through ``git fast-import``, which ignores the sdist's own
  ``.gitignore``: the tree holds exactly the sdist's files.
- ``git``: the release tag fetched from a git remote, checked against the pin.

Both land in one bare repository under the cache directory, under refs in
``refs/fork/`` so the two sources never collide.
"""

from __future__ import annotations

import fcntl
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core import log
from vllm_fork.core.errors import ForkError
from vllm_fork.core.fs import sha256_file
from vllm_fork.core.git import FIXED_EMAIL, FIXED_NAME, fast_import, git, lock_files, rev
from vllm_fork.core.paths import cache_dir
from vllm_fork.core.urls import redact_url
from vllm_fork.upstream.download import fetch
from vllm_fork.upstream.pin import SOURCES, Pin


@dataclass(frozen=True)
class Upstream:
    repo: Path
    commit: str
    source: str
    description: str


def upstream_repo() -> Path:
    repo = cache_dir() / "upstream" / "vllm.git"
    if not (repo / "HEAD").exists():
        repo.parent.mkdir(parents=True, exist_ok=True)
        # Two builds starting on a fresh cache would both `git init` it; one fails.
        with open(repo.parent / ".init.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            if not (repo / "HEAD").exists():
                git(None, "init", "-q", "--bare", str(repo))
    return repo


@contextmanager
def locked_repo(repo: Path) -> Iterator[None]:
    """Serialize what writes the cache repo (imports, fetches): two builds sharing a cache must
    not race. Holding it, any git lock file in the repo was left by a killed process (every
    writer holds this first): removed, so the next fetch does not fail on it."""
    with open(repo / "vllm-fork.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            stale = lock_files(repo)
            for path in stale:
                path.unlink(missing_ok=True)
            if stale:
                names = ", ".join(str(p.relative_to(repo)) for p in stale)
                log.warning(f"{repo}: removed git lock file(s) a killed process left: {names}")
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def sdist_ref(sha256: str) -> str:
    return f"refs/fork/sdist/{sha256}"


def _fast_import_stream(sdist: Path, message: str, ref: str) -> bytes:
    """A git fast-import stream holding every file of the sdist, in sorted order."""
    # One pass in archive order: seeking backwards in a gzip stream re-reads it.
    entries: dict[str, tuple[str, bytes]] = {}
    prefix = None
    with tarfile.open(sdist, "r|*") as tar:
        for m in tar:
            if not (m.isfile() or m.issym()):
                continue
            top, _, rel = m.name.partition("/")
            prefix = prefix or top
            if top != prefix or not rel:
                raise ForkError(f"{sdist.name}: member {m.name!r} is outside {prefix}/")
            if m.issym():
                entries[rel] = ("120000", m.linkname.encode())
            else:
                mode = "100755" if m.mode & 0o111 else "100644"
                member = tar.extractfile(m)
                assert member is not None, f"{m.name} is a regular file"  # tarfile gives None for others only
                entries[rel] = (mode, member.read())
    msg = message.encode()
    parts = [
        (
            f"commit {ref}\n"
            f"author {FIXED_NAME} <{FIXED_EMAIL}> 0 +0000\n"
            f"committer {FIXED_NAME} <{FIXED_EMAIL}> 0 +0000\n"
            f"data {len(msg)}\n"
        ).encode()
        + msg
        + b"\n"
    ]
    for path in sorted(entries):
        mode, data = entries[path]
        parts.append(f"M {mode} inline {path}\ndata {len(data)}\n".encode() + data + b"\n")
    parts.append(b"\n")
    return b"".join(parts)


def import_sdist(sdist: Path, repo: Path, version: str, sha256: str) -> str:
    """Import `sdist` as one deterministic commit; return its id (cached by sha256)."""
    ref = sdist_ref(sha256)
    with locked_repo(repo):
        existing = rev(repo, ref)
        if existing:
            return existing
        message = f"vLLM {version} (sdist {sdist.name})\n\nsha256 {sha256}\n"
        stream = _fast_import_stream(sdist, message, ref)
        fast_import(repo, stream)
        commit = rev(repo, ref)
        if not commit:
            raise ForkError(f"importing {sdist} into {repo} made no commit")
        return commit


def git_ref(pin: Pin) -> str:
    """Where the git source keeps a pin's commit in the cache repo."""
    return f"refs/fork/git/{pin.tag or pin.commit}"


def _fetch_git(pin: Pin, repo: Path, remote: str) -> str:
    # A pin without a tag names a bare commit (`invoke rebase --to <full commit id>`).
    want = f"refs/tags/{pin.tag}" if pin.tag else pin.commit
    shown = redact_url(remote)
    ref = git_ref(pin)
    with locked_repo(repo):
        proc = git(
            repo,
            "fetch",
            "--quiet",
            "--no-tags",
            "--depth=1",
            remote,
            f"+{want}:{ref}",
            check=False,
        )
        if proc.returncode != 0:
            raise ForkError(
                f"could not fetch {f'tag {pin.tag}' if pin.tag else f'commit {pin.commit}'} from {shown}:\n{redact_url(proc.stderr.strip())}\n"
                "Check the remote (upstream.toml `git_remote`, or --remote), or use "
                "`--source pypi`."
            )
        commit = rev(repo, ref)
        if commit is None:  # fetched, but what the ref names does not peel to a commit
            git(repo, "update-ref", "-d", ref)
            raise ForkError(
                f"{want} on {shown} is not a commit. Nothing was changed; check the remote and upstream.toml."
            )
    if pin.commit and not commit.startswith(pin.commit):
        git(repo, "update-ref", "-d", ref)
        raise ForkError(
            f"tag {pin.tag} on {shown} is commit {commit}, but upstream.toml pins "
            f"{pin.commit}. Nothing was changed. If upstream moved the tag on purpose, "
            "update `commit` in upstream.toml; otherwise check the remote."
        )
    return commit


def ensure_upstream(pin: Pin, source: str | None = None, remote: str | None = None) -> Upstream:
    """The pinned upstream commit in the cache repo, fetching or importing it once."""
    source = source or pin.source
    if source not in SOURCES:
        raise ForkError(f"unknown source {source!r}: use one of {', '.join(SOURCES)}")
    repo = upstream_repo()
    if source == "pypi":
        commit = rev(repo, sdist_ref(pin.sdist.sha256))
        if not commit:
            sdist = fetch("vllm", pin.sdist.filename, pin.sdist.sha256)
            commit = import_sdist(sdist, repo, pin.version, pin.sdist.sha256)
        return Upstream(repo, commit, source, f"{pin.sdist.filename} (sha256 {pin.sdist.sha256[:12]})")
    remote = remote or pin.git_remote
    commit = _fetch_git(pin, repo, remote)
    return Upstream(repo, commit, source, f"{redact_url(remote)} tag {pin.tag}")


__all__ = ["Upstream", "ensure_upstream", "import_sdist", "upstream_repo", "sha256_file"]
