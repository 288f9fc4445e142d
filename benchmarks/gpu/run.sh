#!/usr/bin/env bash
# On the GPU machine, one stage per `run` call, each under the 600 s a command may take. Logs and
# results land in $OUT. Two harnesses: the real wheel (.gpu-real/run.sh from
# ../shared/gpu/realwheel.sh, and .gpu-ablation from benchmarks/series_ablation.py prepare:
# carry both; used whenever .gpu-real is there) or the stand-ins (benchmarks/gpu/stage.sh,
# carrying .gpu). The checkout's root is on PYTHONPATH either way, so the benchmarks and tests
# import vllm_fork_testkit from it.
#   bash benchmarks/gpu/run.sh proof     # in-tree tests, tower tests, engine tests (Qwen3-VL eager and
#                                        # CUDA graphs, Qwen2.5-VL eager)
#   bash benchmarks/gpu/run.sh engines   # the tower tests and the eager engine tests (Qwen3-VL, Qwen2.5-VL)
#   bash benchmarks/gpu/run.sh compiled  # the engine test with vLLM's defaults (compiled decoder, CUDA
#                                        # graphs; deterministic compiles, each engine its own caches)
#   bash benchmarks/gpu/run.sh pipeline  # the pipeline matrix (tower_pipeline.py), then 2B with 128 MiB kept resident
#   bash benchmarks/gpu/run.sh graph     # tower_graph.py: every case of the matrix, resident vs streamed, CUDA graphs (GRAPH_ARGS,
#                                        # GRAPH_TIMEOUT_S, default 500: the whole matrix takes ~410 s)
#   bash benchmarks/gpu/run.sh matrix    # all tower families at full size (one child process
#                                        # per run of families; a crashed family is a row)
#   bash benchmarks/gpu/run.sh serve     # vllm serve + openai, mm cache lru and shm per process
#   bash benchmarks/gpu/run.sh bench     # the engine benchmark (memory, latency, the tower alone), resident vs
#                                        # streamed, eager and with vLLM's defaults (BENCH_MODES)
#   bash benchmarks/gpu/run.sh budget    # the resident-budget engine test (--offload-towers-resident-gb)
#   bash benchmarks/gpu/run.sh benchgraphs # the engine benchmark, a streamed engine with vLLM's defaults with and
#                                        # without encoder CUDA graphs, and a resident one with them
#                                        # (BENCHGRAPHS_MODES): start-up, KV, first token for 256/2223-token images
#   bash benchmarks/gpu/run.sh multi     # on nvidia-h200-x2 or -x4 only: TP/PP engine tests (issue 16)
#   bash benchmarks/gpu/run.sh intree    # the vLLM-tree tests of the patches alone
#   bash benchmarks/gpu/run.sh prefix    # real wheel: the in-tree tests of the queue without its [Perf]
#                                        # patches, on that prefix's code (PREFIX_VARIANT; default the last
#                                        # variant series_ablation.py prepare wrote, today without-14)
#   bash benchmarks/gpu/run.sh ablation  # real wheel: series_ablation.py run (ABLATION_ARGS): which [Perf] patches pay
#   bash benchmarks/gpu/run.sh qwen3     # the Qwen3-VL eager engine test alone (resident vs streamed)
#   bash benchmarks/gpu/run.sh encgraphs # the engine with encoder CUDA graphs, resident vs streamed (Qwen3-VL)
#   bash benchmarks/gpu/run.sh reload    # the engine's in-place weight reload (RL weight syncs), resident vs streamed
#   bash benchmarks/gpu/run.sh serveload # issue 59: vllm serve resident vs --offload-towers under vllm bench serve
#                                        # (benchmarks/serve_load.py; SERVELOAD_RUNS: runs separated by ';', each
#                                        # its options; default the 8B sweep at a 24 GiB --gpu-memory-utilization)
#   bash benchmarks/gpu/run.sh resident  # tower_pipeline.py at lookahead 1 (RESIDENT_ARGS), once with the whole tower streamed
#                                        # and once per budget of RESIDENT_GB (default "0.0625 0.125") of leading units kept
#                                        # resident (--offload-towers-resident-gb); ~80 s each
# Several stages run in one call in the order given (one machine start): `run.sh intree qwen3 pipeline`.
# PIPELINE_BUDGET_S (default 300) caps the pipeline matrix and PIPELINE_RESIDENT_ROWS=0 skips its
# resident-budget rows, so that a chained call fits in the 600 s a command may take.
# The host-time probes of issue 11 (hosttime, probe, issue, streams, depth, contention, ab, decompose,
# encodeab) answered their questions and were removed: benchmarks/results/gpu-runs.md says where.
set -uo pipefail
stages="proof engines compiled intree prefix ablation qwen3 encgraphs reload graph pipeline resident matrix serve bench budget benchgraphs multi serveload"
[ $# -gt 0 ] || { echo "usage: run.sh STAGE... ($stages)" >&2; exit 2; }
: "${OUT:?run on the device machine, where \$OUT is set}"
export VLLM_FORK_RESULTS=$OUT
# The device hands back at most 8 files: whatever the stage wrote goes back as one tarball
# (unpack it here with `tar xzf results.tgz`), also when a stage fails.
pack_results() { (cd "$OUT" && tar czf /tmp/run-results.tgz . && find . -mindepth 1 -delete \
  && mv /tmp/run-results.tgz results.tgz); }
trap pack_results EXIT
if [ -f .gpu-real/run.sh ]; then harness=real; else harness=standin; fi
# The Mistral-format families' wheels, where carried (benchmarks/gpu/extra.sh .gpu-extra).
if [ $harness = real ] && ls .gpu-extra/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-extra-site .gpu-extra/*.whl \
    && export PYTHONPATH=/tmp/gpu-extra-site${PYTHONPATH:+:$PYTHONPATH}
elif [ $harness = real ] && [[ " $* " == *" matrix "* ]]; then
  echo "note: no .gpu-extra carried: the Mistral-format tower families will not build" >&2
fi
# transformers and huggingface_hub as `pip install` of the wheel resolves them, where carried
# (extra.sh .gpu-hub2 benchmarks/gpu/extra-wheels-hub2.txt): ahead of the device's own.
if [ $harness = real ] && ls .gpu-hub2/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-hub2-site .gpu-hub2/*.whl \
    && export PYTHONPATH=/tmp/gpu-hub2-site${PYTHONPATH:+:$PYTHONPATH}
fi
# The harness's environment, and the checkout as the benchmarks and tests see it there.
env_run() { if [ $harness = real ]; then bash .gpu-real/run.sh "$@"; else bash .gpu/run.sh "$@"; fi; }
in_repo() { if [ $harness = real ]; then env_run bash -c "$1"; else env_run bash -c "cd .gpu/repo && $1"; fi; }
{ date -u; echo "harness: $harness"; [ $harness = real ] && cat .gpu-ablation/manifest.json 2>/dev/null | head -3
  [ $harness = standin ] && cat .gpu/repo/TREE; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.used,memory.total --format=csv
  df -h /dev/shm; ulimit -l; nproc; free -g
  env_run python3 -c 'import huggingface_hub, transformers; print("transformers", transformers.__version__, "huggingface_hub", huggingface_hub.__version__)'
} > "$OUT/machine.txt" 2>&1
pytest_gpu="python3 -m pytest -p no:cacheprovider -m gpu -q -s -rs"
# The in-tree tests: the stand-ins' tree, or, on the real wheel, the queue's test files as a
# variant of series_ablation.py has them, against that variant's code.
# The in-tree end-to-end tests (tests/basic_correctness) name their model by Hub id: a
# checkpoint made here stands in for it in an offline Hugging Face cache (dummy weights).
# Only they run offline: the option tests' EngineArgs() name a model no cache holds, and
# without a network vLLM gets past it only when the Hub is not declared offline.
intree_of() {  # VARIANT LOG
  if [ $harness = real ]; then
    local exec="python3 benchmarks/series_ablation.py exec --overlays .gpu-ablation --variant $1 --"
    local pytest="python3 -m pytest -p no:cacheprovider --noconftest -q -rs"
    env_run python3 -m vllm_fork_testkit.hub_cache /tmp/hf-standin Qwen/Qwen3-VL-8B-Instruct qwen3_vl >/dev/null
    { env_run timeout 200 $exec $pytest --ignore=tests/basic_correctness tests
      HF_HOME=/tmp/hf-standin HF_HUB_OFFLINE=1 env_run timeout 150 $exec $pytest tests/basic_correctness
    } 2>&1 | tee "$OUT/$2" | tail -15
  else
    env_run bash -c 'cd .gpu/tree && timeout 120 python3 -m pytest -p no:cacheprovider --noconftest -q -rs tests/model_executor/offloader tests/config tests/kernels/attention' 2>&1 | tee "$OUT/$2" | tail -15
  fi
}
intree() { intree_of full gpu-intree-tests.log; }
pipeline_budget=${PIPELINE_BUDGET_S:-300}
for stage in "$@"; do  # all names checked before any stage spends device time
  [[ " $stages " == *" $stage "* ]] || { echo "run.sh: unknown stage $stage ($stages)" >&2; exit 2; }
done
for stage in "$@"; do
echo "== run.sh $stage ($SECONDS s in)"
case $stage in
intree) intree ;;
prefix|ablation)
  [ $harness = real ] || { echo "run.sh $stage: the real wheel only (carry .gpu-real and .gpu-ablation)"; continue; }
  if [ $stage = prefix ]; then
    # Variants are named by series position (without-<i>): read the name, never hard-code it.
    variant=${PREFIX_VARIANT:-$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["variants"][-1]["name"])' .gpu-ablation/manifest.json)}
    intree_of "$variant" gpu-intree-prefix-tests.log
  else env_run timeout 560 python3 benchmarks/series_ablation.py run --overlays .gpu-ablation --out-dir "$OUT/ablation" ${ABLATION_ARGS:-} 2>&1 | tee "$OUT/series-ablation.log" | tail -25
  fi
  ;;
qwen3)
  in_repo "timeout 240 $pytest_gpu -k qwen3_vl-eager tests/gpu/test_engine_offload_towers.py" 2>&1 | tee "$OUT/gpu-engine-qwen3-tests.log" | tail -20
  ;;
encgraphs)
  # vLLM's encoder CUDA graphs (cudagraph_mm_encoder) with a streamed tower: three engines per ViT
  # backend (about 2 min each), so one backend per call: ENCGRAPHS_K=vllm-default (the real wheel's
  # FlashAttention; the default there) or ENCGRAPHS_K=TRITON_ATTN (the stand-ins' only one).
  # ENCGRAPHS_AUTOTUNED=0 leaves out the pair compiled as users run it (two engines of four).
  k=${ENCGRAPHS_K:-$([ $harness = real ] && echo vllm-default || echo TRITON_ATTN)}
  in_repo "timeout 560 $pytest_gpu -k $k tests/gpu/test_engine_encoder_cudagraphs.py" 2>&1 | tee "$OUT/gpu-engine-encoder-graphs-$k-tests.log" | tail -20
  ;;
reload)
  # vLLM's in-place reload of the tower's weights (what RL weight syncs run), resident vs streamed,
  # eager and with encoder CUDA graphs (RELOAD_K=eager or RELOAD_K=encoder runs one: ~1.7 min each).
  in_repo "timeout 400 $pytest_gpu ${RELOAD_K:+-k $RELOAD_K} tests/gpu/test_engine_reload_weights.py" 2>&1 | tee "$OUT/gpu-engine-reload-tests.log" | tail -20
  ;;
proof|engines|compiled)
  # On the real wheel six engines and the tower tests took 461 s (2026-12-05b): more than one
  # call's worth beside the start, so the compiled pair is a stage of its own.
  [ $stage = proof ] && intree
  case $stage in proof) k="";; engines) k="-k 'not cudagraphs'";; compiled) k="-k cudagraphs";; esac
  files="tests/gpu/test_engine_offload_towers.py"
  [ $stage = compiled ] || files="tests/gpu/test_tower_streaming_gpu.py $files"
  in_repo "timeout 540 $pytest_gpu $k $files" 2>&1 | tee "$OUT/gpu-tests-$stage.log" | tail -40
  ;;
graph)
  in_repo "timeout ${GRAPH_TIMEOUT_S:-500} python3 benchmarks/tower_graph.py ${GRAPH_ARGS:-} --out-dir $OUT/tower_graph" 2>&1 | tee "$OUT/tower-graph.log" | tail -25
  ;;
pipeline)
  in_repo "timeout $((pipeline_budget + 60)) python3 benchmarks/tower_pipeline.py ${PIPELINE_ARGS:-} --budget-s $pipeline_budget --out-dir $OUT/tower_pipeline" 2>&1 | tee "$OUT/tower-pipeline.log" | tail -30
  # The same 2B rows with 128 MiB of the tower's first units resident (--offload-towers-resident-gb);
  # PIPELINE_RESIDENT_ROWS=0 skips them.
  [ "${PIPELINE_RESIDENT_ROWS:-1}" = 0 ] || in_repo "timeout 120 python3 benchmarks/tower_pipeline.py --towers 2B --lookaheads 1 --resident-gb 0.125 --profile none --budget-s 80 --out-dir $OUT/tower_pipeline_resident" 2>&1 | tee "$OUT/tower-pipeline-resident.log" | tail -20
  ;;
resident)
  # The same machine for every budget: the ratios of a budget against the whole tower streamed.
  for gb in 0 ${RESIDENT_GB:-0.0625 0.125}; do
    in_repo "timeout 150 python3 benchmarks/tower_pipeline.py ${RESIDENT_ARGS:---towers 2B,8B --lookaheads 1} --resident-gb $gb --profile none --budget-s 80 --out-dir $OUT/resident-$gb" 2>&1 | tee "$OUT/resident-$gb.log" | tail -8
  done
  ;;
matrix)
  in_repo "timeout 560 python3 benchmarks/tower_matrix.py --out-dir $OUT/tower_matrix" 2>&1 | tee "$OUT/tower-matrix.log" | tail -30
  ;;
serve)
  in_repo "timeout 560 $pytest_gpu tests/gpu/test_server_offload_towers.py" 2>&1 | tee "$OUT/gpu-server-tests.log" | tail -30
  ;;
bench)
  # Resident vs streamed, eager and with vLLM's defaults (what users run): four engines, each
  # compiling into caches of its own (BENCH_MODES to choose).
  in_repo "timeout 560 python3 benchmarks/engine_offload.py --repeats 5 --modes ${BENCH_MODES:-resident,streamed,resident+compiled,streamed+compiled} --out-dir $OUT/engine" 2>&1 | tee "$OUT/engine-offload.log" | tail -40
  ;;
budget)
  # --offload-towers-resident-gb in the engine (Qwen3-VL, 0.25 GiB kept).
  in_repo "timeout 300 $pytest_gpu tests/gpu/test_engine_resident_budget.py" 2>&1 | tee "$OUT/gpu-resident-budget-tests.log" | tail -20
  ;;
benchgraphs)
  # Encoder CUDA graphs on a streamed engine against the same engine without them (both
  # with vLLM's compiled decoder), and a resident engine with them.
  in_repo "timeout 560 python3 benchmarks/engine_offload.py --repeats 5 --modes ${BENCHGRAPHS_MODES:-streamed+compiled,streamed+graphs,resident+graphs} --out-dir $OUT/engine-graphs" 2>&1 | tee "$OUT/engine-offload-graphs.log" | tail -30
  ;;
serveload)
  # Each run in what is left of the call's 600 s; a run's own --budget-s skips the load points
  # that would not end in it. Servers a killed run left behind (each leads a session of its
  # own, which outlives the call) are ended by the ids it wrote.
  IFS=';' read -ra serveload_runs <<< "${SERVELOAD_RUNS:---budget-s 470}"
  for options in "${serveload_runs[@]}"; do
    left=$((580 - SECONDS)); [ $left -gt 60 ] || { echo "run.sh serveload: no time left for: $options"; break; }
    in_repo "timeout $left python3 benchmarks/serve_load.py --out-dir $OUT/serve_load $options" 2>&1 | tee -a "$OUT/serve-load.log" | tail -40
    if [ -f /tmp/serve-load/servers.pids ]; then
      while read -r pid; do kill -KILL -- "-$pid" 2>/dev/null; done < /tmp/serve-load/servers.pids
      rm -f /tmp/serve-load/servers.pids
    fi
  done
  ;;
multi)
  in_repo "timeout 560 $pytest_gpu tests/gpu/test_engine_multi_gpu.py" 2>&1 | tee "$OUT/gpu-multi-gpu-tests.log" | tail -40
  ;;
esac
done
