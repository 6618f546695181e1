#!/usr/bin/env bash
# One-shot CUDA check and benchmark on a GPU machine with no network and no packages to install.
# Prepare here:   bench/cuda_h200.sh --pack      (copies the built binaries, their non-CUDA shared
#                 libraries and stories260K.gguf into .cudabench/, which git ignores)
# Run there:      bench/cuda_h200.sh [SECONDS]   (from the repository root, with .cudabench carried;
#                 SECONDS is the wall-clock budget, default 270: later steps are skipped when the
#                 remaining time is too short)
# It prints the device, measures the roofline (device-to-device copy, cuBLAS BF16 GEMM), runs the
# CUDA tests (kernels vs scalar references, logits vs the CPU backend, greedy identity), writes the
# Llama-3.1-8B-shaped random models with `frugal synth` and times tg128, pp512 and 64 parallel
# sequences with `frugal bench --device cuda --json` (one process per model for pp512 and tg128).
# Log and JSON go to $OUT (or ./cudabench-out).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PACK=$ROOT/.cudabench

if [ "${1:-}" = "--pack" ]; then
  BUILD=${BUILD:-$ROOT/build-cuda}
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/models"
  cp "$BUILD/bin/frugal" "$BUILD/bin/cuda_tests" "$PACK/bin/"
  # Every shared library except glibc's own and CUDA's (cuBLAS comes from the GPU machine).
  ldd "$BUILD/bin/frugal" "$BUILD/bin/cuda_tests" | awk '/=>/{print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|cublas|cudart' |
    while read -r lib; do cp -L "$lib" "$PACK/lib/"; done
  # The C++ runtime apart: used there only when the machine's own is older than this one.
  mkdir -p "$PACK/lib/cxx" && mv "$PACK"/lib/libstdc++.so.* "$PACK"/lib/libgcc_s.so.* "$PACK/lib/cxx/" 2>/dev/null
  cp -L "${SHARED_MODELS:-$ROOT/../shared/models}/stories260K.gguf" "$PACK/models/"
  ln -s ../../models/default.gguf "$PACK/models/default.gguf"  # tracked: it travels with the tree
  grep -qx '/.cudabench/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.cudabench/' >>"$ROOT/.git/info/exclude"
  du -sh "$PACK"
  exit 0
fi

BUDGET=${1:-270}
START=$(date +%s)
# Every output in one folder, packed at the end into $OUT/cudabench.tgz beside the log: the GPU
# machine returns at most 8 files, and the first run here lost its error messages to that limit.
RESULT=${OUT:-$ROOT/cudabench-out}
OUTDIR=${TMPDIR:-/tmp}/cudabench-work
rm -rf "$OUTDIR" && mkdir -p "$OUTDIR" "$RESULT"
LOG=$RESULT/cuda_h200.log
exec > >(tee "$LOG") 2>&1
trap 'cp "$LOG" "$OUTDIR/" 2>/dev/null; tar czf "$RESULT/cudabench.tgz" -C "$OUTDIR" . 2>/dev/null' EXIT
left() { echo $((BUDGET - ($(date +%s) - START))); }
say() { echo "[$(($(date +%s) - START))s] $*"; }

F=$PACK/bin/frugal
if [ ! -x "$F" ]; then echo "no $F: run bench/cuda_h200.sh --pack first"; exit 2; fi
# cuBLAS from the machine's CUDA toolkit (or PyTorch's wheels).
CUBLAS=$(ls /usr/local/cuda/lib64/libcublas.so.13 /usr/local/cuda*/lib64/libcublas.so.13 \
  /usr/local/cuda*/targets/x86_64-linux/lib/libcublas.so.13 2>/dev/null | head -1)
if [ -z "$CUBLAS" ]; then
  CUBLAS=$(find /opt /usr -name 'libcublas.so.13' 2>/dev/null | head -1)
fi
CXXLIB=
if ! grep -qa GLIBCXX_3.4.30 "$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 /{print $NF; exit}')" 2>/dev/null; then
  CXXLIB=:$PACK/lib/cxx
fi
export LD_LIBRARY_PATH=$PACK/lib$CXXLIB${CUBLAS:+:$(dirname "$CUBLAS")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
say "cublas: ${CUBLAS:-not found}; carried C++ runtime: ${CXXLIB:-no}"; ldd "$F" | grep -E "not found|cublas|stdc" 

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no GPU here (nvidia-smi found no device): nothing to measure"
  "$F" bench --device cuda -m "$PACK/models/stories260K.gguf" -p 8 -n 4 -r 1 || true
  exit 3
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
nproc; free -g | head -2; df -h /tmp /dev/shm | tail -2

# Models in RAM when /dev/shm has room (an 8B F16 file is 16 GB; disks there may be slow).
TMP=${TMPDIR:-/tmp}/frugal-cudabench
if [ -z "${TMPDIR:-}" ] && [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -gt 40000000 ] 2>/dev/null; then
  TMP=/dev/shm/frugal-cudabench
fi
say "models in $TMP"
mkdir -p "$TMP"
synth() {  # synth TYPE -> $TMP/llama8b-TYPE.gguf, in the background, below the benchmarks' priority
  ( t0=$(date +%s)
    nice -n 19 "$F" synth --preset "${SYNTH_PRESET:-llama3.1-8b}" --type "$1" -t "$(nproc)" -o "$TMP/llama8b-$1.gguf" \
      >"$OUTDIR/synth-$1.txt" 2>&1
    echo "synth $1: exit $?, $(($(date +%s) - t0)) s" >>"$OUTDIR/synth-$1.txt" ) &
  SYNTH_PID=$!
}
wait_synth() {  # wait_synth PID TYPE: 0 when the model is written; gives up when time runs short
  while kill -0 "$1" 2>/dev/null; do
    if [ "$(left)" -lt 40 ]; then say "synth $2 still running with $(left) s left: stopped"; kill "$1"; return 1; fi
    sleep 2
  done
  tail -2 "$OUTDIR/synth-$2.txt"
  grep -q "exit 0" "$OUTDIR/synth-$2.txt"
}
bench() {  # bench TYPE ARGS... -> $OUTDIR/bench-TYPE-NAME.json
  local type=$1 name=$2
  shift 2
  if [ "$(left)" -lt 25 ]; then say "skip $type $name: $(left) s left"; return; fi
  say "bench $type $name: $*"
  timeout "$(( $(left) - 10 ))" "$F" bench --device cuda --json -m "$TMP/llama8b-$type.gguf" "$@" \
    >"$OUTDIR/bench-$type-$name.json" 2>"$OUTDIR/bench-$type-$name.err"
  say "  exit $?: $(tr -d '\n ' <"$OUTDIR/bench-$type-$name.json" | grep -o '"name":"[^"]*","samples_ts[^]]*\]\|"avg_ts":[0-9.]*,"n_gen":[0-9]*,"n_parallel":[0-9]*,"n_prompt":[0-9]*,"name":"[^"]*"' | tr '\n' ' ')"
  tail -3 "$OUTDIR/bench-$type-$name.err"
}

# The largest synth first, in the background, while the GPU checks run.
say "synth Q4_K_M (background)"
synth Q4_K_M
Q4_PID=$SYNTH_PID

say "roofline and memory"
timeout 60 "$F" bench --device cuda --json --roofline -m "$PACK/models/stories260K.gguf" -p 16 -n 4 -r 1 \
  >"$OUTDIR/roofline.json" 2>&1
echo "roofline exit $?"; grep -E '"(copy_bytes_per_s|bf16_flops|name|memory_used_bytes)"' "$OUTDIR/roofline.json" | head -6 \
  || tail -5 "$OUTDIR/roofline.json"

say "CUDA tests"
FRUGAL_TEST_MODELS=$PACK/models timeout 90 "$PACK/bin/cuda_tests" >"$OUTDIR/cuda_tests.txt" 2>&1
TEST_RC=$?
grep -E "^(matmul|logits|greedy)|OK \]|FAILED|PASSED|rel_l2|Expected|Which is|error|Failure" "$OUTDIR/cuda_tests.txt" | head -70
[ $TEST_RC -ne 0 ] && { echo "--- end of cuda_tests output (rc $TEST_RC):"; tail -15 "$OUTDIR/cuda_tests.txt"; }
if [ $TEST_RC -ne 0 ]; then
  # Merged Q/K/V and gate/up launches are the newest part: check the unmerged path too and
  # benchmark whichever passes.
  say "tests failed (rc $TEST_RC); again with FRUGAL_CUDA_FUSE=0"
  FRUGAL_CUDA_FUSE=0 FRUGAL_TEST_MODELS=$PACK/models timeout 60 "$PACK/bin/cuda_tests" >"$OUTDIR/cuda_tests_nofuse.txt" 2>&1 \
    && export FRUGAL_CUDA_FUSE=0
  grep -E "FAILED|PASSED|^logits|^greedy" "$OUTDIR/cuda_tests_nofuse.txt" | head -20
  say "FRUGAL_CUDA_FUSE=${FRUGAL_CUDA_FUSE:-1}"
fi

say "greedy 48 tokens, run --device cuda vs cpu (default model)"
for dev in cpu cuda; do
  timeout 30 "$F" run -m "$PACK/models/default.gguf" --device $dev -p "Once" -n 48 --temp 0 \
    >"$OUTDIR/run-$dev.txt" 2>"$OUTDIR/run-$dev.err"
done
if cmp -s "$OUTDIR/run-cpu.txt" "$OUTDIR/run-cuda.txt"; then say "run output identical"; else
  say "run output DIFFERS"; head -c 400 "$OUTDIR/run-cpu.txt"; echo; head -c 400 "$OUTDIR/run-cuda.txt"; echo
  tail -2 "$OUTDIR/run-cuda.err"; fi

if wait_synth $Q4_PID Q4_K_M; then
  synth F16
  F16_PID=$SYNTH_PID
  bench Q4_K_M pp512-tg128 -p 512 -n 128 -r 3
  rm -f "$TMP/llama8b-Q4_K_M.gguf"
else
  synth F16
  F16_PID=$SYNTH_PID
fi

Q8_PID=
if wait_synth $F16_PID F16; then
  if [ "$(left)" -gt 90 ]; then synth Q8_0; Q8_PID=$SYNTH_PID; fi
  bench F16 pp512-tg128 -p 512 -n 128 -r 3
  bench F16 par64 -p 0 -n 128 -r 2 --parallel 64
  rm -f "$TMP/llama8b-F16.gguf"
fi

if [ -n "$Q8_PID" ] && wait_synth $Q8_PID Q8_0; then
  bench Q8_0 pp512-tg128 -p 512 -n 128 -r 3
  rm -f "$TMP/llama8b-Q8_0.gguf"
fi
echo
say "summary (tok/s; roofline from roofline.json)"
python3 - "$OUTDIR" <<'PY' || true
import glob, json, os, sys
d = sys.argv[1]
try:
    g = json.load(open(os.path.join(d, "roofline.json")))["gpu"]
    bw, fl = g["copy_bytes_per_s"], g["bf16_flops"]
    print(f"GPU {g['name']}: copy {bw/1e12:.2f} TB/s (read+write), cuBLAS bf16 {fl/1e12:.0f} TFLOP/s")
except Exception as e:
    bw = fl = None
    print("roofline: n/a", e)
print(f"{'type':8} {'test':10} {'tok/s':>10} {'sd':>8} {'model GB':>9} {'GPU mem GB':>10} {'frac':>6}")
for f in sorted(glob.glob(os.path.join(d, "bench-*.json"))):
    try:
        j = json.load(open(f))
    except Exception:
        print(os.path.basename(f), "no result"); continue
    mb = j["model_bytes"]; mem = j.get("gpu", {}).get("memory_used_bytes", 0)
    typ = os.path.basename(f).split("-")[1]
    for t in j["tests"]:
        frac = ""
        if bw and t["n_gen"] > 0 and t.get("n_parallel", 1) == 1:
            frac = f"{t['avg_ts'] / (bw / mb):.0%}"          # weights read once per token
        elif fl and t["n_prompt"] > 0:
            n_params = mb / {"F16": 2.0, "Q8_0": 34/32, "Q4_K_M": 4.9e9/8.03e9}.get(typ, 2.0)
            frac = f"{t['avg_ts'] * 2 * n_params / fl:.0%}"  # 2 FLOP per weight per token
        print(f"{typ:8} {t['name']:10} {t['avg_ts']:10.1f} {t['stddev_ts']:8.1f} {mb/1e9:9.2f} {mem/1e9:10.1f} {frac:>6}")
PY
say "done"
