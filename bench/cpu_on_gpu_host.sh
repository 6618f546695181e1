#!/usr/bin/env bash
# The CPU table of bench/cpu_vs_llamacpp.sh on another machine that has no compiler and no network
# (the GPU machine's 16 cores): the binaries travel, the models are written there by `frugal synth`.
#
# Prepare here:  bench/cpu_on_gpu_host.sh --pack LLAMACPP_BIN_DIR
#                  copies build/bin/frugal with its shared libraries (not glibc's), a llama.cpp bin
#                  folder built for every x86 CPU (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS, so it
#                  picks the AVX-512 kernels where they exist), GNU time, stories260K and the
#                  vocabularies that `frugal synth` presets copy into .cpuhost/ (git-ignored; ~37 MB).
# There:         bench/cpu_on_gpu_host.sh smoke            (a few seconds: both engines start)
#                bench/cpu_on_gpu_host.sh table [ARGS...]  (ARGS go to cpu_vs_llamacpp.sh; default
#                  -t = all cores). Writes $OUT/cpuhost.log and $OUT/cpuhost.tgz (raw outputs).
#                  BUDGET=S stops the table after S seconds and still packs what it measured;
#                  bench/cpu_vs_llamacpp_report.py RAW_DIR rebuilds the table from the raw outputs.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PACK=$ROOT/.cpuhost

if [ "${1:-}" = "--pack" ]; then
  LLAMA=${2:?"usage: --pack LLAMACPP_BIN_DIR"}
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib/cxx" "$PACK/llama" "$PACK/models"
  cp "$ROOT/build/bin/frugal" "$PACK/bin/"
  cp -L /usr/bin/time "$PACK/bin/time"
  ldd "$ROOT/build/bin/frugal" | awk '/=>/{print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|cublas|cudart' |
    while read -r lib; do cp -L "$lib" "$PACK/lib/"; done
  # The C++ runtime apart: used there only when the machine's own is older than this one.
  mv "$PACK"/lib/libstdc++.so.* "$PACK"/lib/libgcc_s.so.* "$PACK/lib/cxx/" 2>/dev/null
  cp -L "$LLAMA"/llama-bench "$LLAMA"/llama-cli "$LLAMA"/*.so "$PACK/llama/"
  # stories260K for the smoke run; the vocabularies the presets copy (qwen2.5-0.5b: vocab-qwen2).
  cp -L "${SHARED_MODELS:-$ROOT/../shared/models}"/stories260K.gguf "${SHARED_MODELS:-$ROOT/../shared/models}"/vocab-*.gguf \
    "$PACK/models/"
  EXCL=$(git -C "$ROOT" rev-parse --git-path info/exclude 2>/dev/null)
  case $EXCL in /*) ;; ?*) EXCL=$ROOT/$EXCL ;; esac
  if [ -n "$EXCL" ]; then
    mkdir -p "$(dirname "$EXCL")"
    grep -qx '/.cpuhost/' "$EXCL" 2>/dev/null || echo '/.cpuhost/' >>"$EXCL"
  fi
  { echo "commit $(git -C "$ROOT" rev-parse HEAD)"; date -u; (cd "$PACK" && sha256sum bin/* llama/*); } >"$PACK/MANIFEST"
  du -sh "$PACK"
  exit 0
fi

[ -x "$PACK/bin/frugal" ] || { echo "no $PACK/bin/frugal: run bench/cpu_on_gpu_host.sh --pack first"; exit 2; }
RESULT=${OUT:-$ROOT/cpuhost-out}
WORK=${TMPDIR:-/tmp}/cpuhost-work
rm -rf "$WORK" && mkdir -p "$WORK" "$RESULT"
exec > >(tee "$RESULT/cpuhost.log") 2>&1
pack() { cp "$RESULT/cpuhost.log" "$WORK/" 2>/dev/null; tar czf "$RESULT/cpuhost.tgz" --exclude=./models -C "$WORK" . 2>/dev/null; }
trap pack EXIT
trap 'exit 143' TERM
export LD_LIBRARY_PATH="$PACK/lib:$PACK/llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$PACK/bin/frugal" --version >/dev/null 2>&1 || export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PACK/lib/cxx"
ulimit -c 0
cores=$(nproc)
echo "== $(grep -m1 'model name' /proc/cpuinfo) · $cores cores · $(grep -o -w -E 'avx2|avx512f|avx512bw|avx512_vnni|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "== $(free -g | awk '/Mem:/{print $2" GiB memory"}') · $(head -1 "$PACK/MANIFEST")"

case "${1:-}" in
  smoke)
    set -x
    "$PACK/bin/frugal" --version
    "$PACK/bin/frugal" bench -m "$PACK/models/stories260K.gguf" -t "$cores" -p 16 -n 4 -r 1 --json >"$WORK/frugal.json"
    "$PACK/llama/llama-bench" -m "$PACK/models/stories260K.gguf" -t "$cores" -p 16 -n 4 -r 1 -o json >"$WORK/llama.json"
    "$PACK/bin/time" --version | head -1
    head -c 600 "$WORK/frugal.json"; echo; head -c 600 "$WORK/llama.json"; echo
    ;;
  table)
    shift
    FRUGAL_SHARED_MODELS_DIR="$PACK/models" GNU_TIME="$PACK/bin/time" timeout "${BUDGET:-86400}" bash "$ROOT/bench/cpu_vs_llamacpp.sh" --llamacpp-bin "$PACK/llama" \
      --frugal "$PACK/bin/frugal" --models-dir "$WORK/models" --work "$WORK/raw" -t "$cores" "$@" \
      >"$RESULT/table.md"
    rm -rf "$WORK/models"
    cat "$RESULT/table.md"
    ;;
  *) echo "usage: bench/cpu_on_gpu_host.sh --pack DIR | smoke | table [ARGS]"; exit 2 ;;
esac
