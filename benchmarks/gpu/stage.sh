#!/usr/bin/env bash
# Stage everything one GPU session runs into .gpu/ (git-excluded; carried with `carry: [".gpu"]`):
# the patched tree and stand-ins (../shared/gpu/pack.sh), the fork's GPU tests and benchmarks,
# and the vLLM-tree tests of the patches. Run from the checkout's root after `invoke apply`.
# vllm_fork_testkit (what the tests and benchmarks share) is not copied: the device runs from the
# checkout's root, which .gpu/run.sh puts on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
tree=build/vllm
[ -d "$tree/vllm" ] || { echo "stage.sh: no $tree: run \`invoke apply\` first" >&2; exit 1; }
../shared/gpu/pack.sh "$tree"
# Wheels ../shared/gpu lacks that the Mistral-format families need (pixtral, mistral3, voxtral).
extra_wheels=$(bash benchmarks/gpu/extra.sh .gpu/wheels)
rm -rf .gpu/repo .gpu/tree
mkdir -p .gpu/repo/tests .gpu/tree/tests/model_executor .gpu/tree/tests/config .gpu/tree/tests/kernels/attention
cp -r tests/gpu .gpu/repo/tests/
cp -r benchmarks pyproject.toml .gpu/repo/
rm -rf .gpu/repo/benchmarks/results
cp -r "$tree/tests/model_executor/offloader" .gpu/tree/tests/model_executor/
# The packages above them: the tests import their shared toy tower as tests.model_executor.offloader.tower_utils.
cp "$tree/tests/__init__.py" .gpu/tree/tests/ && cp "$tree/tests/model_executor/__init__.py" .gpu/tree/tests/model_executor/
cp "$tree/tests/config/test_mm_processor_cache_shm.py" .gpu/tree/tests/config/
cp "$tree/tests/kernels/attention/test_mm_encoder_sdpa_host_cu_seqlens.py" .gpu/tree/tests/kernels/attention/
git -C "$tree" rev-parse HEAD^{tree} > .gpu/repo/TREE
# The device takes at most 64 MiB per call: the checkout's tracked and untracked-not-ignored files
# plus .gpu/. The Mistral-format wheels (~16 MB) serve only `run.sh matrix`'s pixtral, mistral3 and
# voxtral towers, so they are the first to go when the committed results have grown too large.
limit=$((64 * 1024 * 1024))
carried_bytes() {
  { git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null
    du -sb .gpu | cut -f1; } | awk '{ total += $1 } END { print total }'
}
if [ "$(carried_bytes)" -gt "$limit" ]; then
  for wheel in $extra_wheels; do rm -f ".gpu/wheels/$(basename "$wheel")"; done
  echo "stage.sh: over the device's 64 MiB: left out the Mistral-format wheels" \
    "(run.sh matrix's pixtral, mistral3 and voxtral towers will fail to import)" >&2
fi
carried=$(carried_bytes)
echo "stage.sh: $((carried / 1024 / 1024)) MiB carried with .gpu/ ($(du -sh .gpu | cut -f1) of it .gpu/)"
if [ "$carried" -gt "$limit" ]; then
  echo "stage.sh: the device takes at most 64 MiB per call: move large committed results" \
    "out of the checkout's tracked files, or stage fewer wheels" >&2
  exit 1
fi
