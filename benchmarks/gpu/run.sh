#!/usr/bin/env bash
# On the H200 (after benchmarks/gpu/stage.sh, carrying .gpu): one stage per `run` call, each
# under the 600 s a command may take. Logs and results land in $OUT.
#   bash benchmarks/gpu/run.sh proof     # in-tree tests, tower tests, engine tests (Qwen3-VL eager and
#                                        # CUDA graphs, Qwen2.5-VL eager)
#   bash benchmarks/gpu/run.sh pipeline  # issue 11: where a small encode's host time goes, the
#                                        # pipeline matrix, then 2B with 128 MiB kept resident
#   bash benchmarks/gpu/run.sh matrix    # issue 10: all tower families at full size (one child process
#                                        # per run of families; a crashed family is a row)
#   bash benchmarks/gpu/run.sh serve     # vllm serve + openai, mm cache lru and shm per process
#   bash benchmarks/gpu/run.sh bench     # the engine benchmark (memory, latency, the tower alone), the
#                                        # resident-budget engine test
#   bash benchmarks/gpu/run.sh multi     # on nvidia-h200-x2 or -x4 only: TP/PP engine tests (issue 16)
#   bash benchmarks/gpu/run.sh intree    # the vLLM-tree tests of the patches alone
#   bash benchmarks/gpu/run.sh qwen3     # the Qwen3-VL eager engine test alone (resident vs streamed)
#   bash benchmarks/gpu/run.sh encgraphs # the engine with encoder CUDA graphs, resident vs streamed (Qwen3-VL)
#   bash benchmarks/gpu/run.sh reload    # the engine's in-place weight reload (RL weight syncs), resident vs streamed
#   bash benchmarks/gpu/run.sh hosttime  # tower_host_time.py alone: the streamer's host time per unit, by step
#   bash benchmarks/gpu/run.sh graph     # tower_graph.py: every case of the matrix, resident vs streamed, CUDA graphs (GRAPH_ARGS,
#                                        # GRAPH_TIMEOUT_S, default 500: the whole matrix takes ~410 s)
#   bash benchmarks/gpu/run.sh probe     # copy_issue_probe.py: the host time of one copy issue, four ways (40 s)
#   bash benchmarks/gpu/run.sh issue     # unit_issue_probe.py: a unit's CUDA calls as now and in fewer calls (query first,
#                                        # a copy graph, release every 2, memops program), split (4 KiB copies, copies
#                                        # alone); host time per unit (ISSUE_OPS, ISSUE_ARGS)
#   bash benchmarks/gpu/run.sh contention # host_contention_probe.py: a resident encode's host time beside a busy link,
#                                        # a busy copy engine, a stream wait per block (30 s)
#   bash benchmarks/gpu/run.sh ab        # tower_ab.py: the AB_BASE streamer (stage.sh) and the current one in one
#                                        # process, AB_ROUNDS (default 60) rounds per case of AB_CASES, AB_ARGS
#                                        # more options (e.g. --slot-blocks 2: the current streamer's slots)
#   bash benchmarks/gpu/run.sh slots     # tower_pipeline.py with one unit per ring slot and with runs of SLOTS_BLOCKS
#                                        # blocks, a profile each (SLOTS_ARGS, SLOTS_PROFILE, SLOTS_BUDGET_S; ~3 min)
#   bash benchmarks/gpu/run.sh resident  # tower_pipeline.py at lookahead 1 (RESIDENT_ARGS), once with the whole tower streamed
#                                        # and once per budget of RESIDENT_GB (default "0.0625 0.125") of leading units kept
#                                        # resident (--offload-towers-resident-gb); ~80 s each
#   bash benchmarks/gpu/run.sh streams   # the legacy default stream against vLLM's own compute stream: unit_issue_probe.py
#                                        # with both in the same rounds (24 and 12 kernels a unit), then the eager matrix at
#                                        # lookahead 2 on each (STREAMS_BUDGET_S per run, default 130; ~6 min in all)
#   bash benchmarks/gpu/run.sh depth     # tower_ab.py --configs: lookahead 2 against DEPTH_CONFIGS (default 3,2:0.05:
#                                        # lookahead 3; 2 with 0.05 GiB of the first units resident), in one process per
#                                        # case of DEPTH_CASES (the balanced ones and two small ones); AB_ROUNDS (default 60)
#   bash benchmarks/gpu/run.sh decompose # tower_ab.py --strip --hooks: a streamed encode's extra host time split into
#                                        # the wrapper, the forward on swapped parameters, the streamer's bookkeeping,
#                                        # the events and waits, the copies (AB_CASES, AB_ROUNDS)
# Several stages run in one call in the order given (one machine start): `run.sh intree qwen3 pipeline`.
# PIPELINE_BUDGET_S (default 300) caps the pipeline matrix, PIPELINE_RESIDENT_ROWS=0 skips its
# resident-budget rows and PIPELINE_HOST_TIME=0 the host-time benchmark before it, so that a
# chained call fits in the 600 s a command may take.
set -uo pipefail
stages="proof intree qwen3 encgraphs reload hosttime probe issue streams depth contention ab decompose graph pipeline slots resident matrix encodeab serve bench multi"
[ $# -gt 0 ] || { echo "usage: run.sh STAGE... ($stages)" >&2; exit 2; }
: "${OUT:?run on the device machine, where \$OUT is set}"
export VLLM_FORK_RESULTS=$OUT
# The device hands back at most 8 files: whatever the stage wrote goes back as one tarball
# (unpack it here with `tar xzf results.tgz`), also when a stage fails.
pack_results() { (cd "$OUT" && tar czf /tmp/run-results.tgz . && find . -mindepth 1 -delete \
  && mv /tmp/run-results.tgz results.tgz); }
trap pack_results EXIT
{ date -u; cat .gpu/repo/TREE; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.used,memory.total --format=csv
  df -h /dev/shm; ulimit -l; nproc; free -g; } > "$OUT/machine.txt" 2>&1
in_repo() { bash .gpu/run.sh bash -c "cd .gpu/repo && $1"; }
pytest_gpu="python3 -m pytest -p no:cacheprovider -m gpu -q -s -rs"
intree() {
  bash .gpu/run.sh bash -c 'cd .gpu/tree && timeout 120 python3 -m pytest -p no:cacheprovider --noconftest -q -rs tests/model_executor/offloader tests/config tests/kernels/attention' 2>&1 | tee "$OUT/gpu-intree-tests.log" | tail -15
}
host_time() {
  in_repo "timeout 150 python3 benchmarks/tower_host_time.py --out $OUT/tower_host_time.json" 2>&1 | tee "$OUT/tower-host-time.log" | tail -40
}
# tower_ab.py once per case of AB_CASES (one process each), into $OUT/$1 with a summary line per case;
# the rest of the arguments are its options.
ab_cases() {
  local dir=$1; shift
  mkdir -p "$OUT/$dir"
  for case in ${AB_CASES:-2B:image-64 2B:batch-3 8B:video-2}; do
    in_repo "timeout 150 python3 benchmarks/tower_ab.py $* --tower ${case%%:*} --case ${case#*:} --rounds ${AB_ROUNDS:-60} ${AB_ARGS:-} --out $OUT/$dir/${case/:/-}.json" 2>&1 | tee -a "$OUT/$dir/summary.txt" | tail -3
  done
}
pipeline_budget=${PIPELINE_BUDGET_S:-300}
for stage in "$@"; do  # all names checked before any stage spends device time
  [[ " $stages " == *" $stage "* ]] || { echo "run.sh: unknown stage $stage ($stages)" >&2; exit 2; }
done
for stage in "$@"; do
echo "== run.sh $stage ($SECONDS s in)"
case $stage in
intree) intree ;;
qwen3)
  in_repo "timeout 240 $pytest_gpu -k qwen3_vl-eager tests/gpu/test_engine_offload_towers.py" 2>&1 | tee "$OUT/gpu-engine-qwen3-tests.log" | tail -20
  ;;
encgraphs)
  # vLLM's encoder CUDA graphs (cudagraph_mm_encoder, Triton ViT attention) with a streamed tower.
  in_repo "timeout 400 $pytest_gpu tests/gpu/test_engine_encoder_cudagraphs.py" 2>&1 | tee "$OUT/gpu-engine-encoder-graphs-tests.log" | tail -20
  ;;
reload)
  # vLLM's in-place reload of the tower's weights (what RL weight syncs run), resident vs streamed,
  # eager and with encoder CUDA graphs (RELOAD_K=eager or RELOAD_K=encoder runs one: ~1.7 min each).
  in_repo "timeout 400 $pytest_gpu ${RELOAD_K:+-k $RELOAD_K} tests/gpu/test_engine_reload_weights.py" 2>&1 | tee "$OUT/gpu-engine-reload-tests.log" | tail -20
  ;;
proof)
  intree
  in_repo "timeout 440 $pytest_gpu tests/gpu/test_tower_streaming_gpu.py tests/gpu/test_engine_offload_towers.py" 2>&1 | tee "$OUT/gpu-tests.log" | tail -40
  ;;
hosttime) host_time ;;
contention)
  in_repo "timeout 150 python3 benchmarks/host_contention_probe.py --out $OUT/host_contention.json" 2>&1 | tee "$OUT/host-contention-probe.log" | tail -25
  ;;
probe)
  in_repo "timeout 150 python3 benchmarks/copy_issue_probe.py --out $OUT/copy_issue.json" 2>&1 | tee "$OUT/copy-issue-probe.log" | tail -25
  ;;
issue)
  # The streamer's per-unit CUDA calls against fewer (waits only where an event query finds the
  # work not done, a copy graph per unit, slots released every second unit, the copy program on
  # stream memory operations), issued elsewhere (from C: benchmarks/unit_copies.c, built with cc;
  # the copy side on a thread, in Python and in C) and split (the calls with 4 KiB copies, the
  # copies alone, the compute side's calls alone) in an encode-shaped loop; a block's host time
  # as 24 and as 12 kernels.
  for ops in ${ISSUE_OPS:-24 12}; do
    in_repo "timeout 120 python3 benchmarks/unit_issue_probe.py --ops $ops ${ISSUE_ARGS:-} --out $OUT/unit_issue_ops$ops.json" 2>&1 | tee -a "$OUT/unit-issue-probe.log" | tail -3
  done
  ;;
streams)
  # vLLM's engine computes on a stream of its own (vllm.utils.torch_utils.current_stream()); a plain
  # script, and every benchmark before 2026-12-04, on the legacy default stream.
  for ops in 24 12; do
    in_repo "timeout 150 python3 benchmarks/unit_issue_probe.py --ops $ops --rounds 40 --compute-streams default,vllm --out $OUT/unit_issue_streams_ops$ops.json" 2>&1 | tee -a "$OUT/unit-issue-streams.log" | tail -4
  done
  for stream in vllm default; do
    in_repo "timeout $((${STREAMS_BUDGET_S:-130} + 60)) python3 benchmarks/tower_pipeline.py --lookaheads 2 --profile none --compute-stream $stream --budget-s ${STREAMS_BUDGET_S:-130} --out-dir $OUT/pipeline-$stream" 2>&1 | tee "$OUT/pipeline-$stream.log" | tail -12
  done
  ;;
graph)
  in_repo "timeout ${GRAPH_TIMEOUT_S:-500} python3 benchmarks/tower_graph.py ${GRAPH_ARGS:-} --out-dir $OUT/tower_graph" 2>&1 | tee "$OUT/tower-graph.log" | tail -25
  ;;
ab)
  [ -f .gpu/ab-base/FILES ] || { echo "run.sh ab: stage with AB_BASE=<rev> first" >&2; exit 2; }
  base=../ab-base/vllm/model_executor/offloader/tower_streaming.py
  [ -f ".gpu/ab-base/vllm/model_executor/offloader/tower_streaming.py" ] || { echo "run.sh ab: the base's tower_streaming.py is the same as the current one" >&2; exit 2; }
  # One process per case: the base's streamer (loaded from its file) and the current tree's on two
  # copies of the tower, a resident third, one encode each per round: the host's drift between
  # processes (2x on the lent host) falls on all three alike. Other files the base changed are not
  # overlaid: the base's streamer runs against the current tree.
  ab_cases ab --base $base
  ;;
depth)
  # Encodes whose compute, copies and host take about as long lose to the ring's depth: one slot
  # more, or the first units resident (the first copy not waited for, fewer bytes), each beside
  # the default in one process, by the issue's ratio.
  AB_CASES=${DEPTH_CASES:-2B:image-1024 2B:batch-3 8B:image-1024 8B:batch-3 2B:changing-shapes 2B:image-64 8B:video-2} \
    ab_cases depth --configs "${DEPTH_CONFIGS:-3,2:0.05}"
  ;;
decompose)
  # The current streamer beside copies of itself that skip its copies, then its events and waits
  # too (their outputs are wrong, their host time is what the skipped calls cost), and resident.
  ab_cases decompose --strip --hooks
  ;;
pipeline)
  # PIPELINE_HOST_TIME=0 skips tower_host_time.py (the matrix alone).
  [ "${PIPELINE_HOST_TIME:-1}" = 0 ] || host_time
  in_repo "timeout $((pipeline_budget + 60)) python3 benchmarks/tower_pipeline.py ${PIPELINE_ARGS:-} --budget-s $pipeline_budget --out-dir $OUT/tower_pipeline" 2>&1 | tee "$OUT/tower-pipeline.log" | tail -30
  # The same 2B rows with 128 MiB of the tower's first units resident (--offload-towers-resident-gb);
  # PIPELINE_RESIDENT_ROWS=0 skips them.
  [ "${PIPELINE_RESIDENT_ROWS:-1}" = 0 ] || in_repo "timeout 120 python3 benchmarks/tower_pipeline.py --towers 2B --lookaheads 1 --resident-gb 0.125 --profile none --budget-s 80 --out-dir $OUT/tower_pipeline_resident" 2>&1 | tee "$OUT/tower-pipeline-resident.log" | tail -20
  ;;
slots)
  # Ring slots of one unit against slots of SLOTS_BLOCKS (default 2) blocks on the same machine:
  # the matrix's cases for SLOTS_ARGS (default the 8B tower at lookahead 1), each with a profile
  # of SLOTS_PROFILE (default the compute-bound 8B 2223-token image), one directory per slot size.
  for blocks in 0 "${SLOTS_BLOCKS:-2}"; do
    in_repo "timeout $((${SLOTS_BUDGET_S:-60} + 80)) python3 benchmarks/tower_pipeline.py ${SLOTS_ARGS:---towers 8B --lookaheads 1} --slot-blocks $blocks --profile ${SLOTS_PROFILE:-8B:image-2223:1} --budget-s ${SLOTS_BUDGET_S:-60} --out-dir $OUT/slots-$blocks" 2>&1 | tee "$OUT/slots-$blocks.log" | tail -12
  done
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
encodeab)
  # Tower encodes against model encodes (embed_multimodal as the encode), per family, one process.
  in_repo "timeout ${ENCODEAB_TIMEOUT_S:-420} python3 benchmarks/model_encode_ab.py ${ENCODEAB_ARGS:-} --out-dir $OUT/model_encode_ab" 2>&1 | tee "$OUT/model-encode-ab.log" | grep -v '^\[encode-ab\]' | tail -30
  ;;
serve)
  in_repo "timeout 560 $pytest_gpu tests/gpu/test_server_offload_towers.py" 2>&1 | tee "$OUT/gpu-server-tests.log" | tail -30
  ;;
bench)
  in_repo "timeout 360 python3 benchmarks/engine_offload.py --repeats 5 --out-dir $OUT/engine" 2>&1 | tee "$OUT/engine-offload.log" | tail -40
  # --offload-towers-resident-gb in the engine (Qwen3-VL, 0.25 GiB kept).
  in_repo "timeout 200 $pytest_gpu tests/gpu/test_engine_resident_budget.py" 2>&1 | tee "$OUT/gpu-resident-budget-tests.log" | tail -20
  ;;
multi)
  in_repo "timeout 560 $pytest_gpu tests/gpu/test_engine_multi_gpu.py" 2>&1 | tee "$OUT/gpu-multi-gpu-tests.log" | tail -40
  ;;
esac
done
