"""What the upstream tree says it is: the release version and commit its own files name.

The sdist carries `PKG-INFO` (its `Version:`) and `vllm/_version.py` (setuptools-scm's
`__version__` and `__commit_id__`). The pin in `upstream.toml` only says what we
expect; a build takes the wheel's version from the pin, so a pin that disagrees
with the code it fetched would name a wheel after a release it does not hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.errors import ConfigError
from vllm_fork.core.git import git
from vllm_fork.upstream.pin import PIN_FILE, Pin


@dataclass(frozen=True)
class ReleaseIdentity:
    """The version and commit the upstream tree's own files name (None where a file is absent)."""

    pkg_info_version: str | None
    version_py_version: str | None
    commit_id: str | None  # setuptools-scm's id without its leading "g"


def _blob(repo: Path, commit: str, path: str) -> str | None:
    proc = git(repo, "show", f"{commit}:{path}", check=False)
    return proc.stdout if proc.returncode == 0 else None


def assigned(text: str, name: str) -> str | None:
    """The string assigned to `name` in a setuptools-scm `_version.py` (`a = b = '0.34.0'` too)."""
    match = re.search(rf"^(?:\w+\s*=\s*)*{name}\s*=\s*(?:\w+\s*=\s*)*['\"]([^'\"]*)['\"]", text, re.M)
    return match.group(1) if match else None


def release_identity(repo: Path, commit: str) -> ReleaseIdentity:
    """Read PKG-INFO and vllm/_version.py at `commit` in `repo` (a tree or the cache repo)."""
    pkg_info = _blob(repo, commit, "PKG-INFO")
    version_py = _blob(repo, commit, "vllm/_version.py")
    pkg_version = None
    if pkg_info is not None:
        match = re.search(r"^Version:\s*(\S+)\s*$", pkg_info, re.M)
        pkg_version = match.group(1) if match else None
    commit_id = assigned(version_py, "commit_id") if version_py else None
    return ReleaseIdentity(
        pkg_version,
        assigned(version_py, "version") if version_py else None,
        commit_id.removeprefix("g") if commit_id else None,
    )


def pin_mismatches(pin: Pin, found: ReleaseIdentity) -> list[str]:
    """Each way the pin disagrees with the tree it fetched, naming both values and the file."""
    problems = []
    for where, version in (("PKG-INFO", found.pkg_info_version), ("vllm/_version.py", found.version_py_version)):
        if version is not None and version != pin.version:
            problems.append(f'version = "{pin.version}", but the sdist\'s {where} says {version}')
    release = found.pkg_info_version or found.version_py_version
    if release is not None and pin.tag and pin.tag != f"v{release}":
        problems.append(f'tag = "{pin.tag}", but the sdist is release {release} (tag v{release})')
    elif release is None and pin.tag and pin.tag != f"v{pin.version}":
        # A git checkout holds neither file: vLLM's tag names its release as v<version>.
        problems.append(f'version = "{pin.version}", but the tag fetched is {pin.tag} (release {pin.tag[1:]})')
    if (
        found.commit_id
        and pin.commit
        and not (found.commit_id.startswith(pin.commit) or pin.commit.startswith(found.commit_id))
    ):
        problems.append(f'commit = "{pin.commit}", but the sdist\'s vllm/_version.py names commit {found.commit_id}')
    return problems


def check_pin(pin: Pin, repo: Path, commit: str) -> None:
    """Refuse a pin that disagrees with the upstream tree at `commit` (its PKG-INFO and _version.py)."""
    problems = pin_mismatches(pin, release_identity(repo, commit))
    if problems:
        raise ConfigError(
            f"{PIN_FILE} disagrees with the upstream tree it fetched ({commit[:12]}):\n"
            + "\n".join(f"  - {p}" for p in problems)
            + f"\nA wheel is named after the release it holds. Set {PIN_FILE} back to the sdist's own version, "
            "tag and commit, or move the pin with `invoke rebase --to <version>`."
        )


__all__ = ["assigned", "ReleaseIdentity", "release_identity", "pin_mismatches", "check_pin"]
