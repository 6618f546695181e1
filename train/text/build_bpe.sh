#!/usr/bin/env bash
# Builds build-train/bpe (or the path given): the BPE learner/encoder of the natural-text model,
# linked with frugal's own pre-tokenizer so its words are the ones inference will see.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/build-train/bpe}"
mkdir -p "$(dirname "$out")"
t="$root/src/frugal/tokenize"
g++ -std=c++20 -O2 -I"$root/src" "$root/train/text/bpe.cc" "$t/pretokenize.cc" "$t/unicode.cc" \
  "$t/unicode_tables.cc" ${BPE_STATIC:+-static} -o "$out"
echo "built $out"
