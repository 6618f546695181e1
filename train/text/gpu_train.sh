#!/usr/bin/env bash
# Trains the natural-text model on the GPU machine from what pack_corpus carried there, and leaves
# the results in $OUT within the device's return limits (at most 8 files of 16 MiB): the F16 model
# split into parts (join with `cat text.gguf.part* > text.gguf`), the draft, the log and results.
#
#   bash train/text/gpu_train.sh smoke        # 30 s of training at full shape: throughput, checks
#   bash train/text/gpu_train.sh train 420    # the run (seconds of training)
#
# Expects .gpucarry/text/corpus.tar.xz (train.txt, heldout.txt, vocab.json) and .gpucarry/text/bpe
# (a static build of train/text/bpe.cc: `bash train/text/build_bpe.sh` with BPE_STATIC=1).
set -euo pipefail
phase="${1:-smoke}"
budget="${2:-30}"
[ "$phase" = smoke ] && budget=30
out="${OUT:-/tmp/text-out}"
work=/tmp/text-run
mkdir -p "$work" "$out"
info="$out/run_info.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$info"
if [ ! -f "$work/train.bin" ]; then
  xz -dc .gpucarry/text/corpus.tar.xz | tar xf - -C "$work"
  .gpucarry/text/bpe encode --vocab "$work/vocab.json" --corpus "$work/train.txt" --out "$work/train.bin" &
  .gpucarry/text/bpe encode --vocab "$work/vocab.json" --corpus "$work/heldout.txt" --out "$work/heldout.bin"
  wait
fi
sha256sum "$work"/*.bin "$work/vocab.json" | tee -a "$info"
extra=()
[ "$phase" = smoke ] && extra=(--eval-every 15 --eval-windows 64)
python3 train/text/train_text.py --data "$work" --out "$work/out" --time-budget "$budget" "${extra[@]}" \
  ${TRAIN_ARGS:-}
cp "$work/out/train_log.txt" "$work/out/results.json" "$out/"
if [ "$phase" = train ]; then
  split -b 15M -d -a 1 "$work/out/text.gguf" "$out/text.gguf.part"
  cp "$work/out/text-draft.gguf" "$out/"
  sha256sum "$work/out/text.gguf" "$work/out/text-draft.gguf" | tee -a "$info"
fi
ls -la "$out"
