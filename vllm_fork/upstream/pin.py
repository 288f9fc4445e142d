"""The pinned upstream release, read from and written to `upstream.toml`."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from vllm_fork.core.errors import ConfigError
from vllm_fork.core.fs import write_atomic
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

    def with_changes(self, **changes) -> Pin:
        return replace(self, **changes)


def load_pin(root: Path = REPO_ROOT) -> Pin:
    path = root / PIN_FILE
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no pin: {path} is missing") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    try:
        pin = Pin(
            version=data["version"],
            tag=data["tag"],
            commit=data.get("commit", ""),
            source=data.get("source", "pypi"),
            git_remote=data.get("git_remote", ""),
            sdist=Artifact(**data["sdist"]),
            wheel=Artifact(**data["wheel"]),
        )
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path} lacks a required field: {exc}") from None
    if pin.source not in SOURCES:
        raise ConfigError(f"{path}: source must be one of {SOURCES}, not {pin.source!r}")
    return pin


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
