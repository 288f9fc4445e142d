# A/B of patch 0001's tower_streaming.py on one machine: old (64f56c9) vs new, alternating.
set -u
T=/tmp/gpu-vllm/vllm/model_executor/offloader/tower_streaming.py
cp $T .gpu/ab-new.py
cd .gpu/repo
for i in 1 2; do for v in old new; do
  cp ../ab-$v.py $T; rm -rf /tmp/gpu-vllm/vllm/model_executor/offloader/__pycache__
  timeout 100 python3 benchmarks/tower_host_time.py --out $OUT/ab-$v-$i.json > $OUT/ab-$v-$i.log 2>&1
  python3 -c "import json,sys;d=json.load(open('$OUT/ab-$v-$i.json'));print('$v',$i,d['units'],round(d['resident']['total_ms'],2),round(d['streamed']['total_ms'],2),round(d['extra_host_us_per_unit'],1))"
done; done
