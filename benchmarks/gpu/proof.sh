#!/usr/bin/env bash
# The GPU proof of the fork, on your own machine, against the vLLM installed in this Python
# (the wheel you built: `pip install dist/vllm-*+fork.*.whl`). From the checkout's root:
#   bash benchmarks/gpu/proof.sh [OUT_DIR]        # default: gpu-proof/
# Runs the engine and server tests, resident vs --offload-towers (eager, vLLM's defaults,
# encoder CUDA graphs with the ViT backend vLLM picks and Triton's, the in-place weight reload,
# `vllm serve` + the openai client), writes each engine's figures and junit.xml to OUT_DIR,
# and prints a pass/fail table. Checkpoints are made in the tests (dummy weights): nothing is
# downloaded. Needs one CUDA GPU with about 40 GiB free.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${1:-gpu-proof}"
python3 - <<'PY' || exit 2
import sys
try:
    import torch, vllm
except ImportError as e:
    sys.exit(f"proof.sh: {e.name} is not installed in {sys.executable}: pip install the wheel (dist/vllm-*+fork.*.whl) first")
if not torch.cuda.is_available():
    sys.exit("proof.sh: no CUDA GPU is visible to torch: run this on a machine with one")
print(f"proof.sh: vLLM {vllm.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
PY
mkdir -p "$out"
tests=(tests/gpu/test_engine_offload_towers.py tests/gpu/test_engine_encoder_cudagraphs.py
       tests/gpu/test_engine_reload_weights.py tests/gpu/test_server_offload_towers.py)
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_FORK_RESULTS="$out" \
  python3 -m pytest -m gpu -p no:cacheprovider -q -s -rs --junitxml="$out/junit.xml" "${tests[@]}" \
  > "$out/pytest.log" 2>&1
rc=$?
python3 - "$out/junit.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    sys.exit("proof.sh: pytest wrote no report; see pytest.log beside it")
print(f"{'test':<100} result")
for case in root.iter("testcase"):
    name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
    skipped = case.find("skipped")
    if case.find("failure") is not None or case.find("error") is not None:
        result = "FAIL"
    elif skipped is not None:
        # An expected failure (xfail) would be a known open problem, named in the docs.
        result = "known open" if skipped.get("type") == "pytest.xfail" else "skip"
    else:
        result = "pass"
    print(f"{name:<100} {result}")
PY
# Every Qwen3-VL engine of the run grouped by its prompt logprobs (they all ran the same
# prompts): which engines computed the same bits, whatever the pairs above compared.
if ls "$out"/engine_qwen3_vl_*.json.gz >/dev/null 2>&1; then
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 -m vllm_fork_testkit.engine_compare "$out"/engine_qwen3_vl_*.json.gz \
    > "$out/logprob-classes.md" && sed -n '/^Classes/,$p' "$out/logprob-classes.md"
fi
echo "proof.sh: pytest exit $rc; log, figures, junit.xml and logprob-classes.md in $out/"
exit $rc
