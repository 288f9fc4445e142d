"""`vllm-fork <task> ...` (or `python -P -m vllm_fork.cli`): the fork's invoke tasks, from any directory.

`invoke` takes the nearest `tasks.py` above the working directory (under the fork's
`build/`, `invoke_root` points it at the fork's), so outside the fork it finds none or
another project's. This names the fork's collection instead of searching.
(`-P`: without it Python puts the working directory first on sys.path, and there
vLLM's `vllm/config/logging.py` would shadow the standard library's `logging`.)
"""

from __future__ import annotations

import importlib.util

from invoke import Program

from vllm_fork.core.paths import REPO_ROOT


def main() -> None:
    spec = importlib.util.spec_from_file_location("tasks", REPO_ROOT / "tasks.py")
    assert spec is not None and spec.loader is not None, "tasks.py sits at the fork's root"
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    Program(namespace=tasks.ns, name="vllm-fork", binary="vllm-fork").run()


if __name__ == "__main__":
    main()
