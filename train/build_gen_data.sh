#!/usr/bin/env bash
# Builds build-train/gen_data (or the path given): the task generators of src/frugal/eval as one
# fully static binary, so the GPU machine (which has none of our shared libraries) can run it. fmt
# is compiled header-only because only its shared library is installed here.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/build-train/gen_data}"
mkdir -p "$(dirname "$out")"
# Only the generator half of src/frugal/eval: the evaluation harness needs the whole engine.
e="$root/src/frugal/eval"
g++ -std=c++20 -O2 -DFMT_HEADER_ONLY -I"$root/src" -I"$root/include" \
  "$root/train/gen_data.cc" "$e/rng.cc" "$e/vocab.cc" "$e/task_registry.cc" "$e/score.cc" \
  "$e/jsonl.cc" "$e"/tasks/*.cc "$root/src/frugal/core/status.cc" \
  -static -o "$out"
echo "built $out"
