#!/usr/bin/env bash
# Prepares the natural-text model's GPU run: learns the BPE vocabulary on the training side of the
# corpus (build_corpus.py's output), builds a static `bpe`, and packs corpus and vocabulary into
# .gpucarry/text/ for train/text/gpu_train.sh.
#
#   bash train/text/pack.sh /work/text-corpus [VOCAB_SIZE]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
corpus="$1"
vocab_size="${2:-8192}"
BPE_STATIC=1 bash "$root/train/text/build_bpe.sh" "$root/build-train/bpe-static"
"$root/build-train/bpe-static" learn --corpus "$corpus/train.txt" --vocab-size "$vocab_size" --out "$corpus/vocab.json"
mkdir -p "$root/.gpucarry/text"
cp "$root/build-train/bpe-static" "$root/.gpucarry/text/bpe"
tar cf - -C "$corpus" train.txt heldout.txt vocab.json | xz -6 -T2 > "$root/.gpucarry/text/corpus.tar.xz"
ls -la "$root/.gpucarry/text"
