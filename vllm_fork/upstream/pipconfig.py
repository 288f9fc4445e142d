"""pip's own settings, read the way pip reads them: its PIP_* variables, then `pip config list`.

The tool downloads as pip would on the same machine: the index URLs, the CA bundle
(`cert`) and the proxy (`proxy`) come from here.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

#: What decides which config files pip reads, besides the PIP_* variables.
_CONFIG_ENV = ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "VIRTUAL_ENV")


def pip_config() -> dict[str, str]:
    """pip's configuration as `pip config list` prints it (key -> value), asked once per process
    for each environment that decides it."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_") or k in _CONFIG_ENV))
    return dict(_pip_config_list(env))


@functools.lru_cache(maxsize=8)
def _pip_config_list(_env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    # `_env` only keys the cache: the subprocess inherits this process's environment.
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    values = []
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values.append((key.strip(), value.strip().strip("'\"")))
    return tuple(values)


def _raw(name: str) -> list[str]:
    env = os.environ.get(f"PIP_{name.upper().replace('-', '_')}")
    if env:
        return [env]
    config = pip_config()
    keys = sorted((k for k in config if k.rsplit(".", 1)[-1] == name), key=lambda k: not k.startswith("global."))
    return [config[k] for k in keys]


def values(name: str) -> list[str]:
    """pip's values of a list option (`index-url`, `extra-index-url`): its PIP_* variable's, else
    those of every config file section holding it, `global` first."""
    return [v for raw in _raw(name) for v in raw.split()]


def value(name: str) -> str | None:
    """pip's value of a one-value option (`cert`, `proxy`), found as `values` finds them; None if unset."""
    found = _raw(name)
    return found[0] if found else None
