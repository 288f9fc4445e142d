#!/usr/bin/env bash
# Copy into DEST the wheels ../shared/gpu lacks that the Mistral-format tower families need
# (pixtral, mistral3, voxtral: benchmarks/gpu/extra-wheels.txt), fetched once into the cache
# outside the clone (the device has no network). stage.sh puts them in .gpu/wheels; for the real
# wheel, `bash benchmarks/gpu/extra.sh .gpu-extra` and carry .gpu-extra (run.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:?usage: extra.sh DEST}
extra="${VLLM_FORK_CACHE:-$HOME/.cache/vllm-fork}/gpu-extra-wheels"
if ! ls "$extra"/mistral_common-*.whl >/dev/null 2>&1; then
  mkdir -p "$extra.partial"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 -d "$extra.partial" -r benchmarks/gpu/extra-wheels.txt
  rm -rf "$extra" && mv "$extra.partial" "$extra"  # all of them or none
fi
mkdir -p "$dest"
cp "$extra"/*.whl "$dest"/
ls "$extra"/*.whl
