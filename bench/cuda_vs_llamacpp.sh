#!/usr/bin/env bash
# frugal's CUDA backend side by side with llama.cpp's, in one run on one GPU machine, on the same
# random-weight Llama-3.1-8B-shaped files (written by `frugal synth`), plus the checks that need a
# GPU. Results go to docs/benchmarks.md with this command.
#
# Prepare here:  bench/cuda_h200.sh --pack        (frugal, cuda_tests, their libraries -> .cudabench/)
# Run there:     [LLAMACPP_BIN=DIR] bash bench/cuda_vs_llamacpp.sh PHASE [SECONDS]
#   PHASE all: smoke, then bench, in one call (about 5 minutes with the three 8B files to write)
#   LLAMACPP_BIN: a llama.cpp CUDA build's bin folder (llama-bench, llama-batched-bench), built
#   outside this repository; without it only frugal is measured.
#   PHASE prefill / profile: see below (pp512 with and without energy counters; a 64-sequence profile)
#   PHASE smoke: the CUDA tests, greedy identity with the CPU on stories260K and the default model,
#                host memory of a GPU run, `serve --device cuda` through the npm clients when node
#                was carried (.node/node.xz and .node/node_modules.tar.xz: xz'd copies of this
#                machine's node binary and of `npm ci`'s node_modules)
#   PHASE bench: roofline; per type (F16, Q8_0, Q4_K_M): pp512 and tg128 for frugal (also with two
#                rows per warp, without split rows, without programmatic dependent launch, and for
#                quantized types with the
#                float-activation GEMV) and llama.cpp (-ngl 99 -fa 1); 64 parallel sequences (F16);
#                decode at 4,096 tokens of depth; prefill of 32,768 tokens and decode at that depth
#                (F16); peak host RSS of each frugal run.
#                BENCH_TYPES="F16" limits the types, BENCH_LONG=0 skips the 64-sequence and 32k rows,
#                BENCH_VARIANTS=0 the decode variants (rows per warp, split rows, PDL off, float GEMV,
#                scalar attention), BENCH_NORM_AB=1 a tg128 with the looped RMSNorm kernels
#                (FRUGAL_CUDA_NORM_LOOP=1), BENCH_PROFILE=1 adds a batch-1 decode profile per type
#                (FRUGAL_CUDA_PROFILE=1). pp512 and the greedy tg128 (`--greedy`: tokens picked on the
#                device) come from one frugal process per type, the plain tg128 from another.
# Every step's output lands in $OUT (or ./cudabench-out) as one archive, cudabench.tgz, with
# steps.tsv (status and seconds per step) and the log.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PHASE=${1:-smoke}
BUDGET=${2:-540}
RUN=cudabench LOGNAME_=cuda_vs_llamacpp.log
# shellcheck source=bench/gpu_run.sh
. "$ROOT/bench/gpu_run.sh"
T=$PACK/bin/cuda_tests
say "phase $PHASE, budget ${BUDGET}s, cublas ${CUBLAS:-not found}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader

# step NAME LIMIT CMD...: stdout/stderr to NAME.out/.err, status and seconds to steps.tsv.
step() {
  local name=$1 lim=$2 t0 rc
  shift 2
  local l=$(( $(left) - 10 ))
  [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 5 ]; then say "skip $name"; printf '%s\tskipped\n' "$name" >>"$STEPS"; return 200; fi
  say "$name: $*"
  t0=$(date +%s)
  timeout -k 5 "$lim" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" </dev/null
  rc=$?
  printf '%s\t%s\t%ss\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >>"$STEPS"
  [ "$rc" -ne 0 ] && { say "  $name: exit $rc"; tail -n 15 "$WORK/$name.err" | cut -c1-300; }
  pack
  return "$rc"
}
# Peak host RSS of a command in MiB (GNU time when present, else the process's own report).
TIME=$(command -v /usr/bin/time || true)

if [ "$PHASE" = smoke ] || [ "$PHASE" = all ]; then
  export FRUGAL_TEST_MODELS=$PACK/models
  step cuda-tests 240 "$T" --gtest_color=no
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|^logits|^matmul|^greedy|rel_l2" "$WORK/cuda-tests.out" | head -60
  for m in stories260K default; do
    step "run-$m-cpu" 60 "$F" run -m "$PACK/models/$m.gguf" --device cpu -p "Once upon a time" -n 64 --temp 0
    step "run-$m-cuda" 60 "$F" run -m "$PACK/models/$m.gguf" --device cuda -p "Once upon a time" -n 64 --temp 0
    if cmp -s "$WORK/run-$m-cpu.out" "$WORK/run-$m-cuda.out"; then say "greedy $m: cuda identical to cpu"
    else say "greedy $m: cuda DIFFERS from cpu"; fi
  done
  step task-cuda 60 "$F" run --device cuda --task kv_recall --json
  grep -o '"peak_rss_bytes": *[0-9]*' "$WORK/task-cuda.out"
  for attn in 0 1; do
    step "eval-cuda-flash$attn" 120 env FRUGAL_CUDA_FLASH=$attn "$F" eval --device cuda --tasks kv_recall,passkey \
      --lengths 512 -n 20 --no-ref --quiet
    cat "$WORK/eval-cuda-flash$attn.out"
  done
  if [ -f "$ROOT/.node/node.xz" ] && [ -f "$ROOT/.node/node_modules.tar.xz" ]; then
    NODEBIN=${TMPDIR:-/tmp}/frugal-nodebin  # outside $WORK: the archive must stay small
    mkdir -p "$NODEBIN" && xz -dc "$ROOT/.node/node.xz" >"$NODEBIN/node" && chmod +x "$NODEBIN/node"
    [ -d "$ROOT/node_modules/openai" ] || tar xJf "$ROOT/.node/node_modules.tar.xz" -C "$ROOT"
    # The same client tests as on the CPU, the server (and the reference `run`) on the GPU.
    step serve-e2e-cuda 200 env PATH="$NODEBIN:$PATH" FRUGAL_EXTRA_ARGS="--device cuda" \
      "$ROOT/tests/server_e2e/run.sh" "$PACK/bin"
    grep -E "^# (tests|pass|fail|skipped)|^not ok" "$WORK/serve-e2e-cuda.out" | head -20
  fi
  [ "$PHASE" = all ] || exit 0
fi

# ---- bench ----
LB=${LLAMACPP_BIN:-}
# PHASE prefill: pp512 per type with and without the energy counters, beside llama-bench's pp512
# (REUSE_MODELS=1 files from a bench phase); PHASE profile: where a 64-sequence F16 greedy step's
# GPU time goes (FRUGAL_CUDA_PROFILE=1, eager steps).
if [ "$PHASE" = prefill ] || [ "$PHASE" = profile ]; then
  TMP=/dev/shm/frugal-bench
  for ty in ${BENCH_TYPES:-F16 Q8_0 Q4_K_M}; do
    M=$TMP/llama8b-$ty.gguf
    { [ "$PHASE" = prefill ] && [ -s "$M" ]; } || continue
    step "frugal-$ty-pp512" 120 "$F" bench --device cuda --json -m "$M" -p 512 -n 0 -r 5
    step "frugal-$ty-pp512-energy" 120 "$F" bench --device cuda --json --energy -m "$M" -p 512 -n 0 -r 5
    for v in "" -energy; do
      tr -d '\n ' <"$WORK/frugal-$ty-pp512$v.out" | grep -o '"name":"pp512"\|"avg_ts":[0-9.]*\|"samples_ts":\[[0-9.,]*\]' | tr '\n' ' '
      echo
    done
    [ -n "$LB" ] && [ -x "$LB/llama-bench" ] && step "llama-$ty-pp512" 120 "$LB/llama-bench" -ngl 99 -fa 1 -o json \
      -m "$M" -p 512 -n 0 -r 5 && tr -d '\n ' <"$WORK/llama-$ty-pp512.out" | grep -o '"avg_ts":[0-9.]*'
  done
  if [ "$PHASE" = profile ] && [ -s "$TMP/llama8b-F16.gguf" ]; then
    step F16-x64-profile 120 env FRUGAL_CUDA_PROFILE=1 "$F" bench --device cuda -m "$TMP/llama8b-F16.gguf" -p 0 -n 16 \
      -r 1 --parallel 64 -d 16 --greedy
    tail -n 40 "$WORK/F16-x64-profile.err"
  fi
  exit 0
fi
HAVE_LLAMA=0
if [ -n "$LB" ] && [ -x "$LB/llama-bench" ]; then
  HAVE_LLAMA=1
  "$LB/llama-bench" --version 2>&1 | head -2
else
  say "LLAMACPP_BIN not set or without llama-bench: frugal only"
fi
TMP=/dev/shm/frugal-bench
mkdir -p "$TMP"
# The three files are written at once in the background (CPU work) while the GPU checks run; files
# left by an earlier run on this machine are reused. (`wait` names the PIDs: a bare wait would also
# wait for the log's tee.)
SYNTH_PIDS=()
TYPES=${BENCH_TYPES:-F16 Q8_0 Q4_K_M}
for ty in $TYPES; do
  [ -s "$TMP/llama8b-$ty.gguf" ] && [ "${REUSE_MODELS:-0}" = 1 ] && continue
  ( "$F" synth --preset llama3.1-8b --type "$ty" -t 5 -o "$TMP/llama8b-$ty.gguf" >"$WORK/synth-$ty.txt" 2>&1
    echo "exit $?" >>"$WORK/synth-$ty.txt"; cp "$WORK/synth-$ty.txt" "$WORK/../synth-$ty.txt" ) &
  SYNTH_PIDS+=($!)
done
step roofline 60 "$F" bench --device cuda --json --roofline -m "$PACK/models/stories260K.gguf" -p 16 -n 4 -r 1
grep -E '"(copy_bytes_per_s|bf16_flops)"' "$WORK/roofline.out"
[ ${#SYNTH_PIDS[@]} -gt 0 ] && wait "${SYNTH_PIDS[@]}"
say "synth: $(tail -qn1 "$WORK"/synth-*.txt | tr '\n' ' ')"
fb() {  # fb NAME ENV... -- ARGS: frugal bench (peak RSS in the JSON)
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  step "frugal-$name" 200 env "${envs[@]}" "$F" bench --device cuda --json "$@"
  tr -d '\n ' <"$WORK/frugal-$name.out" | grep -o '"name":"[^"]*"\|"avg_ts":[0-9.]*\|"peak_rss_bytes":[0-9]*' | tr '\n' ' '
  echo
}
lb() {  # lb NAME ARGS: llama-bench
  local name=$1; shift
  [ "$HAVE_LLAMA" = 1 ] || return 0
  step "llama-$name" 200 "$LB/llama-bench" -ngl 99 -fa 1 -o json "$@"
  tr -d '\n ' <"$WORK/llama-$name.out" | grep -o '"n_prompt":[0-9]*\|"n_gen":[0-9]*\|"avg_ts":[0-9.]*' | tr '\n' ' '
  echo
}
for ty in $TYPES; do
  M=$TMP/llama8b-$ty.gguf
  [ -s "$M" ] || { say "no $M"; continue; }
  fb "$ty-tg128" FRUGAL_CUDA_PDL=1 -- -m "$M" -p 0 -n 128 -r 3
  # Greedy generation: each step's tokens picked on the device and fed to the next (no logits copied).
  fb "$ty-pp512-tg128-greedy" FRUGAL_CUDA_PDL=1 -- -m "$M" -p 512 -n 128 -r 3 --greedy
  # The RMSNorm kernels in their looped form, the baseline of their register form (same run).
  [ "${BENCH_NORM_AB:-0}" = 1 ] && fb "$ty-tg128-norm-loop" FRUGAL_CUDA_NORM_LOOP=1 -- -m "$M" -p 0 -n 128 -r 3
  if [ "${BENCH_VARIANTS:-1}" = 1 ]; then
    fb "$ty-tg128-rows2" FRUGAL_GEMV_ROWS=2 FRUGAL_GEMV_Q8_ROWS=2 -- -m "$M" -p 0 -n 128 -r 3
    fb "$ty-tg128-split1" FRUGAL_GEMV_SPLIT=1 -- -m "$M" -p 0 -n 128 -r 3
    # What each decode change is worth, in the same run: without programmatic dependent launch, and
    # (quantized types) with the float-activation GEMV instead of the 8-bit one.
    fb "$ty-tg128-pdl-off" FRUGAL_CUDA_PDL=0 -- -m "$M" -p 0 -n 128 -r 3
    [ "$ty" = F16 ] || fb "$ty-tg128-float-gemv" FRUGAL_GEMV_Q8=0 -- -m "$M" -p 0 -n 128 -r 3
  fi
  lb "$ty" -m "$M" -p 512 -n 128 -r 3
  if [ "${BENCH_PROFILE:-0}" = 1 ]; then
    # Where a batch-1 decode step's GPU time goes (eager steps, an event after each kernel).
    step "$ty-tg-profile" 120 env FRUGAL_CUDA_PROFILE=1 "$F" bench --device cuda -m "$M" -p 0 -n 16 -r 1
    tail -n 30 "$WORK/$ty-tg-profile.err"
  fi
  [ "$ty" = F16 ] || rm -f "$M"
done
M=$TMP/llama8b-F16.gguf
if [ -s "$M" ] && [ "${BENCH_LONG:-1}" = 1 ]; then
  fb F16-tg128x64 FRUGAL_CUDA_PDL=1 -- -m "$M" -p 0 -n 128 -r 2 --parallel 64 -d 16
  fb F16-tg128x64-greedy FRUGAL_CUDA_PDL=1 -- -m "$M" -p 0 -n 128 -r 2 --parallel 64 -d 16 --greedy
  [ "$HAVE_LLAMA" = 1 ] && step llama-batched-64 200 "$LB/llama-batched-bench" -m "$M" -ngl 99 -fa -c 16384 \
    -npp 16 -ntg 128 -npl 64 && grep -E "^\|" "$WORK/llama-batched-64.out" | tail -2
  fb F16-pp32768 FRUGAL_CUDA_PDL=1 -- -m "$M" -p 32768 -n 0 -r 1 -b 2048
  lb F16-pp32768 -m "$M" -p 32768 -n 0 -r 1 -b 2048 -ub 2048
  fb F16-tg128-d4096 FRUGAL_CUDA_PDL=1 -- -m "$M" -p 0 -n 128 -r 1 -d 4096 -b 2048
  [ "$HAVE_LLAMA" = 1 ] && step llama-batched-d4k 200 "$LB/llama-batched-bench" -m "$M" -ngl 99 -fa -c 4352 \
    -b 2048 -ub 2048 -npp 4096 -ntg 128 -npl 1 && grep -E "^\|" "$WORK/llama-batched-d4k.out" | tail -2
  fb F16-tg128-d32768 FRUGAL_CUDA_PDL=1 -- -m "$M" -p 0 -n 128 -r 1 -d 32768 -b 2048
  [ "$HAVE_LLAMA" = 1 ] && step llama-batched-d32k 200 "$LB/llama-batched-bench" -m "$M" -ngl 99 -fa -c 33024 \
    -b 2048 -ub 2048 -npp 32768 -ntg 128 -npl 1 && grep -E "^\|" "$WORK/llama-batched-d32k.out" | tail -2
  [ "${BENCH_VARIANTS:-1}" = 1 ] && fb F16-tg128-flash-off FRUGAL_CUDA_FLASH=0 -- -m "$M" -p 0 -n 128 -r 2
fi
say "done"
