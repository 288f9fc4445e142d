"""The pinned upstream release, read from and written to `upstream.toml`."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vllm_fork.core.errors import ConfigError
from vllm_fork.core.fs import plain_name, read_toml, write_atomic
from vllm_fork.core.paths import REPO_ROOT

PIN_FILE = "upstream.toml"
SOURCES = ("pypi", "git")


@dataclass(frozen=True)
class Artifact:
    """A file published for the release, with the sha256 every use is checked against."""

    filename: str
    sha256: str


@dataclass(frozen=True)
class Pin:
    version: str
    tag: str
    commit: str
    source: str
    git_remote: str
    sdist: Artifact
    wheel: Artifact

    def with_changes(self, **changes: Any) -> Pin:
        return replace(self, **changes)


def load_pin(root: Path = REPO_ROOT) -> Pin:
    path = root / PIN_FILE
    data = read_toml(path, "it is the pin (the vLLM release the queue applies to)")
    pin = Pin(
        version=_string(data, "version", path),
        tag=_string(data, "tag", path, allow_empty=True),
        commit=_string(data, "commit", path, default="", allow_empty=True),
        source=_string(data, "source", path, default="pypi"),
        git_remote=_string(data, "git_remote", path, default="", allow_empty=True),
        sdist=_artifact(data, "sdist", path),
        wheel=_artifact(data, "wheel", path),
    )
    if pin.source not in SOURCES:
        raise ConfigError(f"{path}: source must be one of {SOURCES}, not {pin.source!r}")
    return pin


def _string(
    table: dict, key: str, path: Path, default: str | None = None, allow_empty: bool = False, where: str = ""
) -> str:
    """`table[key]` as a string, or a ConfigError naming the file, the table and the key.

    TOML's `version = 0.33` is a float: accepted, it would name a wheel `vllm-0.33+fork...`.
    """
    place = f"[{where}] " if where else ""
    if key not in table:
        if default is None:  # required
            raise ConfigError(f'{path}: {place}lacks `{key}` (add `{key} = "..."`)')
        return default
    value = table[key]
    if not isinstance(value, str):
        raise ConfigError(
            f"{path}: {place}`{key} = {value!r}` is a {type(value).__name__}; write it as a quoted string: "
            f'`{key} = "{value}"`'
        )
    if not value and not allow_empty:
        raise ConfigError(f"{path}: {place}`{key}` is empty")
    return value


def _artifact(data: dict, name: str, path: Path) -> Artifact:
    table = data.get(name)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: lacks the [{name}] table (filename and sha256 of the release's {name})")
    filename = _string(table, "filename", path, where=name, allow_empty=True)
    sha256 = _string(table, "sha256", path, where=name, allow_empty=True)
    if not filename and not sha256:
        return Artifact("", "")  # a pin on a bare commit (git source) has no published files
    try:
        plain_name(filename, "file name")
    except ValueError as exc:
        raise ConfigError(f"{path}: [{name}] {exc}") from None
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ConfigError(f"{path}: [{name}] sha256 {sha256!r} is not 64 lowercase hex digits")
    return Artifact(filename, sha256)


def render_pin(pin: Pin) -> str:
    return f"""\
# The pinned upstream vLLM release that patches/ applies to.
# `invoke rebase` rewrites this file; edit by hand only to change `source` or `git_remote`.

version = "{pin.version}"
tag = "{pin.tag}"
# The upstream commit as far as known (a full id, or the prefix the sdist's
# vllm/_version.py names). The git source checks a fetched tag against it.
commit = "{pin.commit}"
# Where the upstream tree comes from by default: "pypi" (the sdist, through pip's
# configured index) or "git" (the tag from git_remote).
source = "{pin.source}"
git_remote = "{pin.git_remote}"

[sdist]
filename = "{pin.sdist.filename}"
sha256 = "{pin.sdist.sha256}"

[wheel]
filename = "{pin.wheel.filename}"
sha256 = "{pin.wheel.sha256}"
"""


def save_pin(pin: Pin, root: Path = REPO_ROOT) -> None:
    """Write the pin atomically: a reader sees the old file or the new one, never half."""
    write_atomic(root / PIN_FILE, render_pin(pin).encode())
