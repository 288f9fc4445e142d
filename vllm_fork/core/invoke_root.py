"""Plain `invoke` under a fork's `build/` runs the fork's tasks, not vLLM's `vllm/tasks.py`.

invoke loads the nearest `tasks.py` above the working directory, and vLLM's tree has its
own, so `invoke check` typed in `build/vllm/vllm/config` imported vLLM's module and
failed with a traceback. invoke reads no setting of a project before that search, so
`scripts/setup.sh` puts one line in the virtualenv (`vllm_fork_invoke.pth`) that calls
`search_from_fork_root` when the program started is invoke: it names the fork's root
as the search root, as `invoke --search-root ROOT` would. It imports only the standard
library and `core.fs` (itself standard library only): invoke imports it at every start.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from vllm_fork.core.fs import write_atomic

#: invoke's own options that choose what is loaded: given any, the user's choice stands.
CHOOSING_OPTIONS = ("-r", "--search-root", "-c", "--collection")
PROGRAMS = ("invoke", "inv")


def is_fork_root(path: Path) -> bool:
    return (path / "tasks.py").is_file() and (path / "upstream.toml").is_file() and (path / "patches").is_dir()


def fork_root_above(cwd: Path) -> Path | None:
    """The fork whose `build/` holds `cwd` (vLLM's tree is `build/vllm`), if any."""
    for parent in cwd.parents:
        if parent.name == "build" and is_fork_root(parent.parent):
            return parent.parent
    return None


def search_from_fork_root(argv: list[str]) -> None:
    """Insert `--search-root ROOT` into invoke's `argv` when it runs under a fork's `build/`."""
    if not argv or os.path.basename(argv[0]) not in PROGRAMS:
        return
    if any(arg.split("=", 1)[0] in CHOOSING_OPTIONS for arg in argv[1:]):
        return
    try:
        root = fork_root_above(Path.cwd())
    except OSError:  # the working directory was removed: leave invoke's own error
        return
    if root is not None:
        argv[1:1] = ["--search-root", str(root)]


#: The line `scripts/setup.sh` writes into the virtualenv's site-packages.
#: Only invoke's start imports this module; every other interpreter reads one argument.
PTH_LINE = (
    f"import os, sys; os.path.basename((sys.argv or [''])[0]) in {PROGRAMS!r} and "
    "__import__('importlib').import_module('vllm_fork.core.invoke_root').search_from_fork_root(sys.argv)\n"
)
PTH_NAME = "vllm_fork_invoke.pth"


def install(site_packages: Path) -> Path:
    """Write the line into `site_packages` (what `scripts/setup.sh` runs); return its file.

    Atomically: Python's start-up reads every `.pth` there, so a half-written line would
    print an error in each interpreter of the virtualenv."""
    path = site_packages / PTH_NAME
    write_atomic(path, PTH_LINE)
    return path


if __name__ == "__main__":  # python -m vllm_fork.core.invoke_root SITE_PACKAGES
    print(install(Path(sys.argv[1])))
