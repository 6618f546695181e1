#!/usr/bin/env bash
# The energy-scaling study on one GPU: decode J/token against context length (1k..64k) and against
# batch size (1..64) for MHA, GQA and GQA+SWA shapes of one model size, repeated runs, and frugal
# against llama.cpp with both measured by NVML. Results of the H200 run and what they say:
# docs/energy.md ("The GPU study").
#
# Prepare here:  cmake --preset release -DFRUGAL_CUDA=ON && cmake --build build
#                BUILD=build bench/cuda_h200.sh --pack      (frugal and its libraries -> .cudabench/)
# Run there:     [LLAMACPP_BIN=DIR] [REPS=5] bash bench/energy_h200.sh [SECONDS]   (from the repository
#                root with .cudabench carried; default budget 570 s; later steps are skipped when
#                the time left is too short, so a second call with STUDY=batch runs the rest)
#   STUDY=depth|batch|vs-llamacpp|all (default all): which part to run
#   SHAPES="mha gqa swa" (default): the shapes, all the TinyLlama-1.1B size (2048 wide, 22 blocks,
#     32 query heads of 128, F16): mha 32 KV heads, gqa 4 KV heads, swa 4 KV heads and a
#     4096-token sliding window (Mistral-7B's).
#   LLAMACPP_BIN: a llama.cpp CUDA build's bin folder (llama-bench); without it frugal only.
# Needs: an NVIDIA driver with NVML (libnvidia-ml.so.1; Volta or later for the energy counter),
# cuBLAS 13 as bench/cuda_h200.sh finds it, about 10 GB of disk for the three model files.
#
# Measurements: `frugal bench --energy --json` reads NVML's total-energy counter around each timed
# repetition (the decode steps only; the -d context is written first, untimed), so every repetition
# gives its own J/token and the spread comes from REPS repetitions. frugal vs llama.cpp: both run
# under `frugal meter` (the same counter around the whole process), each twice with 1 and 1+REPS
# repetitions; the difference divided by REPS x 128 tokens is the decode J/token with loading and
# warm-up cancelled out. Results: $OUT (or ./energybench-out)/energybench.tgz with every JSON,
# steps.tsv and the log; J/token per repetition is in tests[].energy.samples_joules_per_token.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUDGET=${1:-570}
STUDY=${STUDY:-all}
REPS=${REPS:-5}
SHAPES=${SHAPES:-mha gqa swa}
RUN=energybench LOGNAME_=energy_h200.log
# shellcheck source=bench/gpu_run.sh
. "$ROOT/bench/gpu_run.sh"
# NVML numbers GPUs in PCI order; make the CUDA runtime agree so both name the same GPU.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
say "study $STUDY, shapes $SHAPES, reps $REPS, budget ${BUDGET}s, cublas ${CUBLAS:-not found}"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader

# step NAME LIMIT CMD...: stdout to NAME.json (or .out), stderr to NAME.err, status and seconds to steps.tsv.
step() {
  local name=$1 lim=$2 t0 rc
  shift 2
  if [ "$(left)" -lt $((lim / 2 + 10)) ]; then
    say "skip $name (only $(left)s left)"
    printf '%s\tskipped\t0\n' "$name" >>"$STEPS"
    return 0
  fi
  [ "$lim" -gt "$(left)" ] && lim=$(left)
  t0=$(date +%s)
  timeout -k 5 "$lim" "$@" >"$WORK/$name.json" 2>"$WORK/$name.err"
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" >>"$STEPS"
  say "$name: exit $rc in $(($(date +%s) - t0))s"
  [ "$rc" = 0 ] || tail -5 "$WORK/$name.err"
  pack
}

# The counter must work, or every number below would be "unavailable".
step nvml-check 30 "$F" meter --device cuda -- sleep 1
grep -q '"source":"nvml"' "$WORK/nvml-check.json" || { say "NVML energy counter unavailable:"; cat "$WORK/nvml-check.json"; }

# Outside $WORK: pack() archives $WORK after every step, and with the model files in it each pack
# compressed gigabytes (the first run on an H200 spent its whole budget there).
TMP=${MODELS_DIR:-${TMPDIR:-/tmp}/energybench-models}
mkdir -p "$TMP"
synth() {  # synth NAME ARGS: one shape, F16, context long enough for 64k + the test
  [ -f "$TMP/$1.gguf" ] || step "synth-$1" 240 "$F" synth --preset tinyllama-1.1b --type F16 --ctx 70000 -t 8 \
    -o "$TMP/$1.gguf" "${@:2}"
}
for s in $SHAPES; do
  case $s in
    mha) synth mha --kv-heads 32 ;;
    gqa) synth gqa --kv-heads 4 ;;
    swa) synth swa --kv-heads 4 --sliding-window 4096 ;;
  esac
done

if [ "$STUDY" = all ] || [ "$STUDY" = depth ]; then
  # Decode J/token against context: 128 decode steps at each depth, batch 1.
  for s in $SHAPES; do
    step "depth-$s" 400 "$F" bench --device cuda --energy --json -m "$TMP/$s.gguf" -p 0 -n 128 -r "$REPS" \
      -d 1k,4k,16k,64k
  done
fi
if [ "$STUDY" = all ] || [ "$STUDY" = batch ]; then
  # Decode J/token against batch size at 1k of context.
  for s in $SHAPES; do
    step "batch-$s" 300 "$F" bench --device cuda --energy --json -m "$TMP/$s.gguf" -p 0 -n 128 -r "$REPS" \
      -d 1k --parallel 1,8,64
  done
fi
if [ "$STUDY" = all ] || [ "$STUDY" = vs-llamacpp ]; then
  # The same file, the same counter, the same difference of two runs for both engines.
  M=$TMP/gqa.gguf
  for r in 1 $((REPS + 1)); do
    step "frugal-meter-r$r" 200 "$F" meter --device cuda -- "$F" bench --device cuda -m "$M" -p 0 -n 128 -r "$r"
    if [ -n "${LLAMACPP_BIN:-}" ] && [ -x "$LLAMACPP_BIN/llama-bench" ]; then
      step "llama-meter-r$r" 200 "$F" meter --device cuda -- "$LLAMACPP_BIN/llama-bench" -m "$M" -ngl 99 -fa 1 \
        -p 0 -n 128 -r "$r" -o json
    fi
  done
  [ -n "${LLAMACPP_BIN:-}" ] || say "LLAMACPP_BIN not set: llama.cpp not measured"
fi
say "done; results in $RESULT/energybench.tgz"
