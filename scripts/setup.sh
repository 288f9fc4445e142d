#!/usr/bin/env bash
# Makes .venv with the tool and its test dependencies. Safe to re-run (fast when done).
# Big downloads (vLLM sdist and wheel) are not fetched here: the tasks fetch them once
# into ~/.cache/vllm-fork (VLLM_FORK_CACHE overrides) and reuse them.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "setup.sh: Python >= 3.11 is required (found $(python3 --version))" >&2; exit 2; }
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
# Plain `invoke` under build/ runs the fork's tasks, not vLLM's vllm/tasks.py (see the module).
.venv/bin/python -m vllm_fork.core.invoke_root "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null
for req in requirements/*.txt; do
  if [ -f "$req" ]; then .venv/bin/python -m pip install -q --disable-pip-version-check -r "$req"; fi
done
# vLLM's pinned pre-commit tools, in a venv of their own (`invoke check --upstream`).
[ -x .venv/upstream-checks/bin/python ] || .venv/bin/python -m venv .venv/upstream-checks
.venv/upstream-checks/bin/python -m pip install -q --disable-pip-version-check -r requirements/upstream-checks/tools.txt
echo "setup.sh: .venv ready ($(.venv/bin/python --version))"
