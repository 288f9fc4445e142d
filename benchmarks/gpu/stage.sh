#!/usr/bin/env bash
# Stage everything one H200 session runs into .gpu/ (git-excluded; carried with `carry: [".gpu"]`):
# the patched tree and stand-ins (../shared/gpu/pack.sh), the fork's GPU tests and benchmarks,
# and the vLLM-tree tests of the patches. Run from the checkout's root after `invoke apply`.
set -euo pipefail
cd "$(dirname "$0")/../.."
tree=build/vllm
[ -d "$tree/vllm" ] || { echo "stage.sh: no $tree: run \`invoke apply\` first" >&2; exit 1; }
../shared/gpu/pack.sh "$tree"
rm -rf .gpu/repo .gpu/tree
mkdir -p .gpu/repo/tests .gpu/tree/tests/model_executor .gpu/tree/tests/config
cp -r tests/gpu .gpu/repo/tests/
cp -r benchmarks pyproject.toml .gpu/repo/
rm -rf .gpu/repo/benchmarks/results
cp -r "$tree/tests/model_executor/offloader" .gpu/tree/tests/model_executor/
cp "$tree/tests/config/test_mm_processor_cache_shm.py" .gpu/tree/tests/config/
git -C "$tree" rev-parse HEAD^{tree} > .gpu/repo/TREE
du -sh .gpu | sed 's/^/stage.sh: /'
