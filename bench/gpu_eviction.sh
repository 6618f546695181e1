#!/usr/bin/env bash
# KV eviction on the CUDA backend, on a GPU machine, from the packed binaries (bench/cuda_h200.sh
# --pack) with the npm clients and a node binary carried as archives in .gpucarry/ (node.xz,
# node_modules.tar.xz, cudabench.tar.xz: the packed .cudabench folder).
#   PHASE smoke: every CUDA test (the eviction tests included), greedy cpu == cuda on the default
#                model, and the server end-to-end tests with `serve --device cuda`.
#   PHASE bench: a Llama-3.1-8B-shaped F16 model (random weights): tg128/pp512 and 64 parallel
#                sequences (AB_ROUNDS rounds, default 2) (the numbers docs/benchmarks.md keeps, to see the per-head positions cost
#                nothing), then bench/kv_serving.py: 64 concurrent generations of MAX_TOKENS tokens
#                per policy of POLICIES (default full,random,snapkv,h2o,rkv: the scored ones compute
#                their round statistics on the device; evicting ones at a 25% budget).
#                SAMPLE_PERIOD: seconds between kv_serving.py's memory samples (nvidia-smi).
#   PHASE memory: the memory budget held under load: the same 8B file served with --kv-memory at
#                25% of what MEM_PARALLEL (default 16) sequences of MAX_TOKENS (default 1024) need,
#                MEM_PARALLEL requests at once (4x the work the budget holds), full and random; the
#                server's slots, peak RSS and device memory, evictions and finish reasons.
# Usage there: bash bench/gpu_eviction.sh PHASE [SECONDS]. Everything lands in $OUT/gpu-eviction.tgz
# and the log $OUT/gpu-eviction.log.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PHASE=${1:-smoke}
BUDGET=${2:-540}
cd "$ROOT"
if [ -f .gpucarry/cudabench.tar.xz ] && [ ! -x .cudabench/bin/frugal ]; then tar xJf .gpucarry/cudabench.tar.xz; fi
RUN=gpu-eviction
LOGNAME_=gpu-eviction.log
# shellcheck source=bench/gpu_run.sh
. "$ROOT/bench/gpu_run.sh"
say "phase $PHASE, budget $BUDGET s; $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
step() {  # step NAME CMD...: output in $WORK/NAME.out, status and seconds in steps.tsv
  local name=$1; shift
  local t0; t0=$(date +%s)
  "$@" >"$WORK/$name.out" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" >>"$STEPS"
  say "$name: exit $rc in $(($(date +%s) - t0)) s"
  pack
  return $rc
}

if [ "$PHASE" = smoke ]; then
  step cuda-tests "$PACK/bin/cuda_tests"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|requests, .* eviction rounds|rel_l2|evicted" "$WORK/cuda-tests.out" | head -60
  # The same task with a window policy on either backend: the text must be the same.
  for dev in cpu cuda; do
    step "run-default-$dev" sh -c "'$F' run -m '$ROOT/models/default.gguf' --device $dev --task kv_recall --temp 0 \
      --kv-policy window --kv-budget 96 --kv-buffer 16 --json >'$WORK/run-default-$dev.json'"
  done
  if cmp -s <(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['text'])" "$WORK/run-default-cpu.json") \
            <(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['text'])" "$WORK/run-default-cuda.json"); then
    say "window policy run: cuda text identical to cpu"
  else
    say "window policy run: cuda DIFFERS from cpu"; head -c 600 "$WORK/run-default-cpu.json" "$WORK/run-default-cuda.json"
  fi
  if [ -f .gpucarry/node.xz ]; then
    mkdir -p /tmp/nodebin && xz -dc .gpucarry/node.xz >/tmp/nodebin/node && chmod +x /tmp/nodebin/node
    [ -d node_modules/openai ] || tar xJf .gpucarry/node_modules.tar.xz
    PATH=/tmp/nodebin:$PATH FRUGAL_EXTRA_ARGS="--device cuda" step e2e-cuda bash tests/server_e2e/run.sh "$PACK/bin"
    grep -E "^# (tests|pass|fail)|^not ok" "$WORK/e2e-cuda.out" | head -20
  fi
fi

if [ "$PHASE" = bench ]; then
  M=${TMPDIR:-/tmp}/llama8b-F16.gguf
  if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: a smoke call just ran them on this machine
    step attention-tests "$PACK/bin/cuda_tests" --gtest_filter='CudaFlashAttention.*:CudaEviction.*:CudaModel.Greedy*'
    grep -E "^\[  (PASSED|FAILED) " "$WORK/attention-tests.out"
  fi
  # A machine kept warm between calls still has the file of the previous call.
  [ -s "$M" ] && say "reusing $M" || step synth "$F" synth --preset llama3.1-8b --type F16 -t 8 -o "$M"
  # A/B against the binary of the previous commit when one was carried (.gpucarry/base-frugal.xz),
  # the two alternating so that neither always runs on a warmer card.
  BASE=
  if [ -f .gpucarry/base-frugal.xz ]; then
    BASE=/tmp/base-frugal && xz -dc .gpucarry/base-frugal.xz >"$BASE" && chmod +x "$BASE"
  fi
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    for who in new ${BASE:+base}; do
      [ "$(left)" -gt 60 ] || { say "skipping the rest of the A/B: $(left) s left"; break 2; }
      bin=$F; [ "$who" = base ] && bin=$BASE
      step "bench-f16-$who-$round" env FRUGAL_CUDA_PDL=1 "$bin" bench -m "$M" --device cuda -p "${AB_P:-512}" -n 128 -r 3 \
        --greedy -d 0,32768
      [ -n "${AB_NO_X64:-}" ] && continue
      step "bench-f16-x64-$who-$round" env FRUGAL_CUDA_PDL=1 "$bin" bench -m "$M" --device cuda -p 0 -n 128 -r 2 \
        --parallel 64 -d 16 --greedy
    done
  done
  grep -E "pp512|tg128" "$WORK"/bench-f16*.out
  MAXT=${MAX_TOKENS:-4096}
  # One server run per policy, each its own step: a call cut off at its limit keeps the policies
  # that finished. SERVE_S is the time one needs at least (the next is skipped when less is left).
  for pol in $(echo "${POLICIES:-full,random,snapkv,h2o,rkv}" | tr ',' ' '); do
    [ "$(left)" -gt "${SERVE_S:-90}" ] || { say "skipping $pol and the policies after it: $(left) s left"; break; }
    # At most SERVE_MAX_S seconds a policy (default: all that is left but 20 s), so that one too slow
    # to finish still lets the call end with its archive; its requests are cut off 30 s before that
    # (the model's load comes first) and the tokens generated until then give a lower bound.
    cap=$(($(left) - 20))
    [ -n "${SERVE_MAX_S:-}" ] && [ "$SERVE_MAX_S" -lt "$cap" ] && cap=$SERVE_MAX_S
    step "serving-$pol" timeout "$cap" env FRUGAL_CUDA_PDL=1 python3 "$ROOT/bench/kv_serving.py" --frugal "$F" -m "$M" --device cuda \
      --parallel 64 --requests 64 --max-tokens "$MAXT" --ctx $((MAXT + 64)) --budget 0.25 --memory-fraction 0 \
      --policies "$pol" --json "$WORK/serving-$pol.json" --server-log "$WORK/serve" --max-wall $((cap - 30)) \
      ${SAMPLE_PERIOD:+--sample-period "$SAMPLE_PERIOD"}
    cat "$WORK/serving-$pol.out"
  done
fi
if [ "$PHASE" = memory ]; then
  M=${TMPDIR:-/tmp}/llama8b-F16.gguf
  [ -s "$M" ] && say "reusing $M" || step synth "$F" synth --preset llama3.1-8b --type F16 -t 12 -o "$M"
  MAXT=${MAX_TOKENS:-1024}
  P=${MEM_PARALLEL:-16}
  # The context is the trace kv_serving.py sizes the budget by (32 prompt tokens + MAX_TOKENS), so
  # the budget holds a quarter of the slots asked for, each at the full context.
  step memory-load timeout $(($(left) - 20)) env FRUGAL_CUDA_PDL=1 python3 "$ROOT/bench/kv_serving.py" --frugal "$F" \
    -m "$M" --device cuda --parallel "$P" --requests "$P" --max-tokens "$MAXT" --ctx $((MAXT + 32)) --budget 0.25 \
    --memory-fraction 0.25 --policies "${MEM_POLICIES:-full,random}" --json "$WORK/memory-load.json" \
    --server-log "$WORK/memory-serve"
  cat "$WORK/memory-load.out"
fi
say "done"
