#!/usr/bin/env bash
# Copy into DEST the wheels of a LIST (default benchmarks/gpu/extra-wheels.txt: what the
# Mistral-format tower families need beyond ../shared/gpu, pixtral, mistral3 and voxtral),
# fetched once into the cache outside the clone (the device has no network). stage.sh puts the
# default list in .gpu/wheels; for the real wheel, `bash benchmarks/gpu/extra.sh .gpu-extra` and
# carry .gpu-extra (run.sh installs it). benchmarks/gpu/extra-wheels-hub2.txt is the
# transformers and huggingface_hub a `pip install` of the wheel resolves, newer than the
# device's (`bash benchmarks/gpu/extra.sh .gpu-hub2 benchmarks/gpu/extra-wheels-hub2.txt`;
# run.sh puts .gpu-hub2 first on the path where it is carried).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:?usage: extra.sh DEST [LIST]}
list=${2:-benchmarks/gpu/extra-wheels.txt}
name=$(basename "$list" .txt)
# One cache folder per list and its contents: a changed list fetches again.
extra="${VLLM_FORK_CACHE:-$HOME/.cache/vllm-fork}/gpu-$name-$(sha256sum "$list" | cut -c1-12)"
if [ ! -d "$extra" ]; then
  mkdir -p "$extra.partial"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 -d "$extra.partial" -r "$list"
  rm -rf "$extra" && mv "$extra.partial" "$extra"  # all of them or none
fi
mkdir -p "$dest"
cp "$extra"/*.whl "$dest"/
ls "$extra"/*.whl
