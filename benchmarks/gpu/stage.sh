#!/usr/bin/env bash
# Stage everything one H200 session runs into .gpu/ (git-excluded; carried with `carry: [".gpu"]`):
# the patched tree and stand-ins (../shared/gpu/pack.sh), the fork's GPU tests and benchmarks,
# and the vLLM-tree tests of the patches. Run from the checkout's root after `invoke apply`.
set -euo pipefail
cd "$(dirname "$0")/../.."
tree=build/vllm
[ -d "$tree/vllm" ] || { echo "stage.sh: no $tree: run \`invoke apply\` first" >&2; exit 1; }
../shared/gpu/pack.sh "$tree"
# Wheels ../shared/gpu lacks that the Mistral-format families need (pixtral, mistral3, voxtral),
# fetched once into the cache outside the clone (the device has no network).
extra="${VLLM_FORK_CACHE:-$HOME/.cache/vllm-fork}/gpu-wheels"
if ! ls "$extra"/mistral_common-*.whl >/dev/null 2>&1; then
  mkdir -p "$extra"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 -d "$extra" -r benchmarks/gpu/extra-wheels.txt
fi
cp "$extra"/*.whl .gpu/wheels/
rm -rf .gpu/repo .gpu/tree
mkdir -p .gpu/repo/tests .gpu/tree/tests/model_executor .gpu/tree/tests/config .gpu/tree/tests/kernels/attention
cp -r tests/gpu .gpu/repo/tests/
cp -r benchmarks pyproject.toml .gpu/repo/
rm -rf .gpu/repo/benchmarks/results
cp -r "$tree/tests/model_executor/offloader" .gpu/tree/tests/model_executor/
cp "$tree/tests/config/test_mm_processor_cache_shm.py" .gpu/tree/tests/config/
cp "$tree/tests/kernels/attention/test_mm_encoder_sdpa_host_cu_seqlens.py" .gpu/tree/tests/kernels/attention/
git -C "$tree" rev-parse HEAD^{tree} > .gpu/repo/TREE
# AB_BASE=<rev of build/vllm, or another patched tree's directory, e.g. main's build/vllm>: the
# base's version of every file under vllm/ that differs, for `run.sh ab` (base and current
# alternated on one machine: the lent host's speed drifts from call to call by more than most
# changes are worth). Files in both trees only.
rm -rf .gpu/ab-base
if [ -n "${AB_BASE:-}" ]; then
  mkdir -p .gpu/ab-base
  if [ -d "$AB_BASE" ]; then
    # An `if`, not `&&`: under `set -e` a last path that does not differ would end the script.
    (cd "$tree" && git ls-files vllm/) | while read -r path; do
      if [ -f "$AB_BASE/$path" ] && ! cmp -s "$AB_BASE/$path" "$tree/$path"; then echo "$path"; fi
    done > .gpu/ab-base/FILES
  else
    git -C "$tree" diff --name-only --diff-filter=M "$AB_BASE" HEAD -- vllm/ > .gpu/ab-base/FILES
  fi
  while read -r path; do
    mkdir -p ".gpu/ab-base/$(dirname "$path")"
    if [ -d "$AB_BASE" ]; then cp "$AB_BASE/$path" ".gpu/ab-base/$path"
    else git -C "$tree" show "$AB_BASE:$path" > ".gpu/ab-base/$path"; fi
  done < .gpu/ab-base/FILES
  echo "stage.sh: AB_BASE $AB_BASE: $(wc -l < .gpu/ab-base/FILES) file(s) for run.sh ab"
fi
# The device takes at most 64 MiB per call: the checkout's tracked and untracked-not-ignored files
# plus .gpu/. The Mistral-format wheels (~16 MB) serve only `run.sh matrix`'s pixtral, mistral3 and
# voxtral towers, so they are the first to go when the committed results have grown too large.
limit=$((64 * 1024 * 1024))
carried_bytes() {
  { git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null
    du -sb .gpu | cut -f1; } | awk '{ total += $1 } END { print total }'
}
if [ "$(carried_bytes)" -gt "$limit" ]; then
  for wheel in "$extra"/*.whl; do rm -f ".gpu/wheels/$(basename "$wheel")"; done
  echo "stage.sh: over the device's 64 MiB: left out the Mistral-format wheels" \
    "(run.sh matrix's pixtral, mistral3 and voxtral towers will fail to import; for that call," \
    "move older benchmarks/results/gpu-* folders out of the checkout and stage again)" >&2
fi
carried=$(carried_bytes)
echo "stage.sh: $((carried / 1024 / 1024)) MiB carried with .gpu/ ($(du -sh .gpu | cut -f1) of it .gpu/)"
if [ "$carried" -gt "$limit" ]; then
  echo "stage.sh: the device takes at most 64 MiB per call: move large committed results" \
    "out of the checkout's tracked files, or stage fewer wheels" >&2
  exit 1
fi
