#!/usr/bin/env bash
# One-shot CUDA check and benchmark on a GPU machine with no network and no packages to install.
# Prepare here:   bench/cuda_h200.sh --pack      (copies the built binaries, their non-CUDA shared
#                 libraries and stories260K.gguf into .cudabench/, which git ignores)
# Run there:      bash bench/cuda_h200.sh [SECONDS]   (from the repository root, with .cudabench
#                 carried; SECONDS is the wall-clock budget, default 270, 540 for a 600 s call:
#                 later steps are skipped when the remaining time is too short)
#
# Every command runs as one "step" (step() below): stdout and stderr to their own files, the exit
# status, seconds and sizes to steps.tsv, and on failure the ends of both files and the machine's
# state (disks, memory, GPU processes, kernel messages) to the log. No step stops the script.
# Order: the machine and the binaries (CPU path first), the CUDA tests one process per test, then on
# a failure cheap isolation (one weight type per process, a synchronizing rerun that names the
# failing kernel), the CLI on small models, the roofline, `run` cpu vs cuda, the Llama-3.1-8B-shaped
# benches (tg128, pp512, 64 parallel sequences), and last, with the time kept back for them, heavy
# diagnostics of the first failure (compute-sanitizer memcheck, cuda-gdb stopped at exit_group).
# CUDA processes run with FRUGAL_CUDA_TRACE=1: a process that exits or dies without a message prints
# who ended it (backtrace) on stderr (src/frugal/backend/cuda/cuda_backend.h: install_exit_trace).
#
# Results in $OUT (or ./cudabench-out): cuda_h200.log (this output), steps.tsv (one line per step)
# and cudabench.tgz (every step's .out/.err/.state, rewritten after each step so a killed run keeps
# what it did). The GPU machine returns at most 8 files; these are 3.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PACK=$ROOT/.cudabench

if [ "${1:-}" = "--pack" ]; then
  BUILD=${BUILD:-$ROOT/build-cuda}
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/models"
  cp "$BUILD/bin/frugal" "$BUILD/bin/cuda_tests" "$BUILD/bin/server_tests" "$PACK/bin/"
  # Every shared library except glibc's own and CUDA's (cuBLAS comes from the GPU machine).
  ldd "$BUILD/bin/frugal" "$BUILD/bin/cuda_tests" "$BUILD/bin/server_tests" | awk '/=>/{print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|cublas|cudart' |
    while read -r lib; do cp -L "$lib" "$PACK/lib/"; done
  # The C++ runtime apart: used there only when the machine's own is older than this one.
  mkdir -p "$PACK/lib/cxx" && mv "$PACK"/lib/libstdc++.so.* "$PACK"/lib/libgcc_s.so.* "$PACK/lib/cxx/" 2>/dev/null
  cp -L "${SHARED_MODELS:-$ROOT/../shared/models}/stories260K.gguf" "$PACK/models/"
  ln -s ../../models/default.gguf "$PACK/models/default.gguf"  # tracked: it travels with the tree
  # What was packed, to compare with what ran there.
  { echo "commit $(git -C "$ROOT" rev-parse HEAD 2>/dev/null) $(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) changed files"
    date -u
    nvcc --version 2>/dev/null | tail -1
    (cd "$PACK" && sha256sum bin/* lib/*.so* lib/cxx/* 2>/dev/null)
    cuobjdump --list-elf "$PACK/bin/cuda_tests" 2>/dev/null | sed 's/.*\.\(sm_[0-9]*\)\..*/\1/' | sort | uniq -c
  } >"$PACK/MANIFEST" 2>&1
  # .git may be a file (worktree) or lack info/: ask git where the exclude file is.
  EXCL=$(git -C "$ROOT" rev-parse --git-path info/exclude 2>/dev/null)
  case $EXCL in /*) ;; ?*) EXCL=$ROOT/$EXCL ;; esac
  if [ -n "$EXCL" ]; then
    mkdir -p "$(dirname "$EXCL")"
    grep -qx '/.cudabench/' "$EXCL" 2>/dev/null || echo '/.cudabench/' >>"$EXCL"
  fi
  du -sh "$PACK"
  exit 0
fi

BUDGET=${1:-270}
START=$(date +%s)
RESULT=${OUT:-$ROOT/cudabench-out}
OUTDIR=${TMPDIR:-/tmp}/cudabench-work
rm -rf "$OUTDIR" && mkdir -p "$OUTDIR" "$RESULT"
LOG=$RESULT/cuda_h200.log
STEPS=$RESULT/steps.tsv
: >"$STEPS"
exec > >(tee "$LOG") 2>&1
pack() {  # the archive, replaced atomically: a run killed at its limit keeps the last one
  cp "$LOG" "$STEPS" "$OUTDIR/" 2>/dev/null
  tar czf "$RESULT/cudabench.tgz.part" -C "$OUTDIR" . 2>/dev/null && mv -f "$RESULT/cudabench.tgz.part" "$RESULT/cudabench.tgz"
}
trap pack EXIT
left() { echo $((BUDGET - ($(date +%s) - START))); }
say() { echo "[$(($(date +%s) - START))s] $*"; }
# A crashing CUDA process can write a core of its whole address space into the repository root.
ulimit -c 0

F=$PACK/bin/frugal
T=$PACK/bin/cuda_tests
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
# The carried libraries (libssl, libz, libstdc++ ...) only for our two binaries, not exported to
# every tool the script runs (nvidia-smi, python3, cuda-gdb, tar).
SYS_LDP=${LD_LIBRARY_PATH:-}
LDP=$PACK/lib$CXXLIB${CUBLAS:+:$(dirname "$CUBLAS")}${SYS_LDP:+:$SYS_LDP}
STEP_LDP=$LDP
say "cublas: ${CUBLAS:-not found}; carried C++ runtime: ${CXXLIB:-no}; budget ${BUDGET}s"

STEP_N=0
# step NAME LIMIT CMD...: CMD with the carried libraries, stdout to $OUTDIR/NAME.out, stderr to
# NAME.err; the status, its meaning and the seconds to the log and steps.tsv. Returns CMD's status.
step() {
  local name=$1 lim=$2 t0 rc secs note eb ob l
  shift 2
  l=$(( $(left) - 15 ))
  [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 5 ]; then
    say "skip $name: $(left) s left"
    printf '%s\tskipped\t%s s left\n' "$name" "$(left)" >>"$STEPS"
    return 200
  fi
  STEP_N=$((STEP_N + 1))
  say "step $STEP_N $name (limit ${lim}s): $*"
  t0=$(date +%s)
  env LD_LIBRARY_PATH="$STEP_LDP" timeout -k 10 "$lim" "$@" >"$OUTDIR/$name.out" 2>"$OUTDIR/$name.err" </dev/null
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  case $rc in
    0) note=ok ;;
    124) note="TIMEOUT (${lim}s)" ;;
    125|126|127) note="not run: timeout or exec failed ($rc)" ;;
    137) note="SIGKILL (out of memory, or the timeout's kill)" ;;
    *) if [ "$rc" -gt 128 ]; then note="signal $((rc - 128))"; else note="exit $rc"; fi ;;
  esac
  eb=$(wc -c <"$OUTDIR/$name.err")
  ob=$(wc -c <"$OUTDIR/$name.out")
  if [ "$rc" -ne 0 ]; then
    [ "$eb" -eq 0 ] && note="$note, SILENT: empty stderr"
    grep -qE "exit\(\) called|fatal signal" "$OUTDIR/$name.err" && note="$note, exit trace in .err"
  fi
  printf '%s\t%s\t%s\t%ss\tout %sB\terr %sB\n' "$name" "$rc" "$note" "$secs" "$ob" "$eb" >>"$STEPS"
  say "  -> $name: rc $rc ($note), ${secs}s, stdout ${ob}B, stderr ${eb}B"
  if [ "$rc" -ne 0 ]; then
    echo "  --- $name.err, last 30 lines:"; tail -n 30 "$OUTDIR/$name.err" | cut -c1-300 | sed 's/^/  | /'
    echo "  --- $name.out, last 12 lines:"; tail -n 12 "$OUTDIR/$name.out" | cut -c1-300 | sed 's/^/  | /'
    state "$name"
  fi
  pack
  return "$rc"
}
state() {  # the machine after a failed step: NAME.state in the archive, a short form in the log
  { date -u
    df -h /tmp /dev/shm "$OUTDIR" "$RESULT" "${TMP:-/tmp}" 2>&1
    free -m
    nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu,temperature.gpu --format=csv 2>&1
    echo "GPU processes:"; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1
    nvidia-smi -q 2>&1 | grep -iE "xid|pending|retired|remap|compute mode|ecc errors|volatile" | head -20
    echo "kernel log:"; dmesg 2>&1 | tail -n 30
  } >"$OUTDIR/$1.state" 2>&1
  echo "  --- state: $(df -h --output=target,avail,pcent /tmp /dev/shm 2>/dev/null | tail -n +2 | tr -s ' ' | tr '\n' ';')" \
    "$(free -m | awk '/^Mem:/{print "mem used " $3 " MiB of " $2 ", available " $7}')"
  grep -iE "xid|nvrm" "$OUTDIR/$1.state" | tail -3 | sed 's/^/  | /'
  awk '/^GPU processes:/{f=1; next} /^kernel log:/{f=0} f' "$OUTDIR/$1.state" | head -3 | sed 's/^/  | gpu process: /'
}

# Heavy diagnostics of a failure (sanitizer, debugger), queued and run last with the time kept back
# for them (RESERVE): they name the cause, the benches only repeat the failure.
HEAVY=()
RESERVE=0
CSAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
CGDB=$(command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null | head -1)
queue_heavy() {  # queue_heavy NAME "ENV=V ..." CMD ARGS... (no spaces inside arguments)
  [ "${#HEAVY[@]}" -ge 2 ] && return
  HEAVY+=("$*")
  RESERVE=240
}
# Cheap rerun of a failed command: every launch synchronized and checked (names the kernel),
# graphs off, cuBLAS calls traced.
rerun_sync() {  # rerun_sync NAME "ENV=V ..." CMD ARGS...
  local name=$1 envs=$2
  shift 2
  # shellcheck disable=SC2086
  step "$name-sync" 120 env $envs FRUGAL_CUDA_SYNC=1 CUDA_LAUNCH_BLOCKING=1 FRUGAL_CUDA_TRACE=3 FRUGAL_CUDA_GRAPHS=0 "$@"
}
run_heavy() {  # run_heavy "NAME ENVS CMD ARGS..." as queued (ENVS: one VAR=VALUE, or -)
  local - name envs
  set -f  # split the queued line on spaces, expand no patterns
  # shellcheck disable=SC2086
  set -- $1
  name=$1 envs=$2
  shift 2
  [ "$envs" = "-" ] && envs=
  if [ -n "$CSAN" ]; then
    # shellcheck disable=SC2086
    step "$name-memcheck" 150 env $envs FRUGAL_CUDA_TRACE=1 "$CSAN" --tool memcheck --print-limit 30 --error-exitcode 99 "$@"
  fi
  if [ -n "$CGDB" ]; then
    # Stops where the process ends (exit_group: exit and _exit alike) or at a fatal signal, and prints
    # who got there. cuda-gdb runs with the system's libraries; the program with the carried ones.
    # shellcheck disable=SC2086
    STEP_LDP=$SYS_LDP step "$name-gdb" 180 env $envs FRUGAL_CUDA_TRACE=1 "$CGDB" -batch -nx -ex "set pagination off" -ex "set confirm off" \
      -ex "set environment LD_LIBRARY_PATH $LDP" -ex "catch syscall exit_group" -ex run -ex "bt 60" \
      -ex "info threads" -ex "info sharedlibrary" -ex kill --args "$@"
    STEP_LDP=$LDP
  fi
}

say "machine"
{ uname -a; nproc; free -g | head -2; df -h /tmp /dev/shm "$ROOT" "$RESULT" 2>/dev/null; ulimit -a
  grep -m1 "model name" /proc/cpuinfo; echo "LANG=${LANG:-} TMPDIR=${TMPDIR:-} LD_LIBRARY_PATH=$SYS_LDP"
  echo "compute-sanitizer: ${CSAN:-none}; cuda-gdb: ${CGDB:-none}"
  cat "$PACK/MANIFEST" 2>/dev/null | head -3
  env LD_LIBRARY_PATH="$LDP" ldd "$F" "$T"
  command -v cuobjdump >/dev/null && cuobjdump --list-elf "$T" 2>&1 | head -4; } >"$OUTDIR/machine.txt" 2>&1
grep -E "model name|^Mem|/dev/shm|compute-sanitizer|^commit|not found|cublas|stdc|sm_" "$OUTDIR/machine.txt"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no GPU here (nvidia-smi found no device): nothing to measure"
  step cuda-nogpu 30 "$F" bench --device cuda -m "$PACK/models/stories260K.gguf" -p 8 -n 4 -r 1
  step cuda-tests-nogpu 60 "$T"
  exit 3
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_mode,clocks.sm,clocks.mem --format=csv
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader

# Models in RAM when /dev/shm has room (an 8B F16 file is 16 GB; disks there may be slow).
TMP=${TMPDIR:-/tmp}/frugal-cudabench
if [ -z "${TMPDIR:-}" ] && [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -gt 40000000 ] 2>/dev/null; then
  TMP=/dev/shm/frugal-cudabench
fi
say "models in $TMP"
mkdir -p "$TMP"

# 1. The binaries without CUDA: a failure here is the carried libraries or the machine, not the GPU.
step version 20 "$F" --version
step cpu-bench-stories 60 "$F" bench --device cpu --json -m "$PACK/models/stories260K.gguf" -p 16 -n 4 -r 1

# 2. The CUDA tests, one process per test, nothing else running (run 1 ran them beside a synth).
export FRUGAL_TEST_MODELS=$PACK/models
step tests-list 30 "$T" --gtest_list_tests
TESTS=$(awk '/^[^ ]/{s=$1} /^  [^ ]/{print s $1}' "$OUTDIR/tests-list.out")
[ -n "$TESTS" ] || TESTS="CudaKernels.MatmulMatchesReferencePerType CudaKernels.GetRowsMatchesReferencePerType
CudaModel.LogitsMatchCpuPerType CudaModel.GreedyMatchesCpuStories260K CudaModel.GreedyMatchesCpuDefaultModel
CudaModel.BatchedDecodeMatchesSingleSequences"
FAILED_TESTS=
for t in $TESTS; do
  step "test-${t#*.}" 90 env FRUGAL_CUDA_TRACE=1 "$T" --gtest_filter="$t" || FAILED_TESTS="$FAILED_TESTS $t"
  grep -E "^(matmul|logits|greedy)|OK \]|FAILED|rel_l2|Failure|Expected|Which is|cuda|cublas" \
    "$OUTDIR/test-${t#*.}.out" | head -40 | cut -c1-300
done
say "failed tests:${FAILED_TESTS:- none}"

# The largest synth starts now, in the background, while the checks below run.
synth() {  # synth TYPE -> $TMP/llama8b-TYPE.gguf, in the background, below the benchmarks' priority
  ( t0=$(date +%s)
    env LD_LIBRARY_PATH="$LDP" nice -n 19 "$F" synth --preset "${SYNTH_PRESET:-llama3.1-8b}" --type "$1" -t "$(nproc)" \
      -o "$TMP/llama8b-$1.gguf" >"$OUTDIR/synth-$1.txt" 2>&1
    echo "synth $1: exit $?, $(($(date +%s) - t0)) s" >>"$OUTDIR/synth-$1.txt" ) &
  SYNTH_PID=$!
}
wait_synth() {  # wait_synth PID TYPE: 0 when the model is written; gives up when time runs short
  while kill -0 "$1" 2>/dev/null; do
    if [ "$(left)" -lt $((40 + RESERVE)) ]; then say "synth $2 still running with $(left) s left: stopped"; kill "$1"; return 1; fi
    sleep 2
  done
  tail -2 "$OUTDIR/synth-$2.txt"
  grep -q "exit 0" "$OUTDIR/synth-$2.txt"
}
say "synth Q4_K_M (background)"
synth Q4_K_M
Q4_PID=$SYNTH_PID

# 3. Cheap isolation of failed tests.
for t in $FAILED_TESTS; do
  case $t in
    CudaKernels.*)
      # One weight type per process: which types fail, and the first one rerun synchronized.
      BAD=
      for ty in F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K Q5_K; do
        step "${t#*.}-$ty" 60 env FRUGAL_CUDA_TEST_TYPES=$ty FRUGAL_CUDA_TRACE=1 "$T" --gtest_filter="$t" || BAD="$BAD $ty"
      done
      say "${t#*.}: failing types:${BAD:- none (fails only with every type in one process)}"
      first=${BAD# }
      first=${first%% *}
      if [ -n "$first" ]; then
        rerun_sync "${t#*.}-$first" "FRUGAL_CUDA_TEST_TYPES=$first" "$T" --gtest_filter="$t"
        queue_heavy "${t#*.}-$first" "FRUGAL_CUDA_TEST_TYPES=$first" "$T" --gtest_filter="$t"
      else
        rerun_sync "${t#*.}" "" "$T" --gtest_filter="$t"
        queue_heavy "${t#*.}" - "$T" --gtest_filter="$t"
      fi
      ;;
    *)
      rerun_sync "${t#*.}" "" "$T" --gtest_filter="$t"
      # Merged Q/K/V and gate/up launches are the newest part of the model path: the unmerged one.
      step "${t#*.}-nofuse" 90 env FRUGAL_CUDA_FUSE=0 FRUGAL_CUDA_TRACE=1 "$T" --gtest_filter="$t" && NOFUSE_OK=1
      queue_heavy "${t#*.}" - "$T" --gtest_filter="$t"
      ;;
  esac
done
if [ -n "${NOFUSE_OK:-}" ]; then export FRUGAL_CUDA_FUSE=0; say "a model test passed only unmerged: FRUGAL_CUDA_FUSE=0 from here"; fi

# 4. The CLI's CUDA path on small models: F32 (cuBLAS F32 above 8 tokens), then Q8_0 and F16
# through the dequantize-then-cuBLAS and half paths (17 prompt tokens) and GEMV decode.
cli_cuda() {  # cli_cuda NAME ARGS...: frugal ARGS with the exit trace, rerun synchronized on failure
  local name=$1
  shift
  step "$name" 60 env FRUGAL_CUDA_TRACE=1 "$F" "$@" && return 0
  rerun_sync "$name" "" "$F" "$@"
  queue_heavy "$name" - "$F" "$@"
  return 1
}
cli_cuda cli-stories-f32 bench --device cuda --json -m "$PACK/models/stories260K.gguf" -p 17 -n 4 -r 1
for ty in Q8_0 F16; do
  if step "synth-tiny-$ty" 60 "$F" synth --preset tiny-llama --type "$ty" -t 4 -o "$TMP/tiny-$ty.gguf"; then
    cli_cuda "cli-tiny-$ty" bench --device cuda --json -m "$TMP/tiny-$ty.gguf" -p 17 -n 4 -r 1
  fi
done

# 5. Roofline (copy bandwidth, cuBLAS BF16 peak).
step roofline 90 env FRUGAL_CUDA_TRACE=1 "$F" bench --device cuda --json --roofline -m "$PACK/models/stories260K.gguf" -p 16 -n 4 -r 1
grep -E '"(copy_bytes_per_s|bf16_flops|name|memory_used_bytes)"' "$OUTDIR/roofline.out" | head -6

# 6. Greedy identity through the CLI.
step run-cpu 60 "$F" run -m "$PACK/models/default.gguf" --device cpu -p "Once" -n 48 --temp 0
step run-cuda 60 env FRUGAL_CUDA_TRACE=1 "$F" run -m "$PACK/models/default.gguf" --device cuda -p "Once" -n 48 --temp 0
if cmp -s "$OUTDIR/run-cpu.out" "$OUTDIR/run-cuda.out"; then say "run output identical"; else
  say "run output DIFFERS"; head -c 400 "$OUTDIR/run-cpu.out"; echo; head -c 400 "$OUTDIR/run-cuda.out"; echo; fi

# 7. Llama-3.1-8B-shaped benches.
BENCH_FAILED=
bench() {  # bench TYPE NAME ARGS... -> bench-TYPE-NAME.out (JSON)
  local type=$1 name=$2
  shift 2
  if [ "$(left)" -lt $((25 + RESERVE)) ]; then say "skip $type $name: $(left) s left, ${RESERVE} s kept for diagnostics"; return; fi
  step "bench-$type-$name" $(( $(left) - 10 - RESERVE )) env FRUGAL_CUDA_TRACE=1 "$F" bench --device cuda --json \
    -m "$TMP/llama8b-$type.gguf" "$@"
  local rc=$?
  say "  $type $name: $(tr -d '\n ' <"$OUTDIR/bench-$type-$name.out" | grep -o '"name":"[^"]*","samples_ts[^]]*\]\|"avg_ts":[0-9.]*,"n_gen":[0-9]*,"n_parallel":[0-9]*,"n_prompt":[0-9]*,"name":"[^"]*"' | tr '\n' ' ')"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ -z "$BENCH_FAILED" ]; then
    BENCH_FAILED=1
    # The first failing bench again with a short prompt, synchronized (names the kernel).
    rerun_sync "bench-$type" "" "$F" bench --device cuda --json -m "$TMP/llama8b-$type.gguf" -p 64 -n 4 -r 1
  fi
}

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
  if [ "$(left)" -gt $((90 + RESERVE)) ]; then synth Q8_0; Q8_PID=$SYNTH_PID; fi
  bench F16 pp512-tg128 -p 512 -n 128 -r 3
  bench F16 par64 -p 0 -n 128 -r 2 --parallel 64
  rm -f "$TMP/llama8b-F16.gguf"
fi

if [ -n "$Q8_PID" ] && wait_synth $Q8_PID Q8_0; then
  bench Q8_0 pp512-tg128 -p 512 -n 128 -r 3
  rm -f "$TMP/llama8b-Q8_0.gguf"
fi
rm -f "$TMP"/tiny-*.gguf

# 8. Heavy diagnostics of the first failures, with the time kept for them.
RESERVE=0
for h in ${HEAVY[@]+"${HEAVY[@]}"}; do
  say "diagnostics: $h"
  run_heavy "$h"
done

echo
say "steps (name, status, meaning, seconds, output sizes):"
column -t -s "$(printf '\t')" "$STEPS" 2>/dev/null || cat "$STEPS"
say "summary (tok/s; roofline from roofline.out)"
python3 - "$OUTDIR" <<'PY' || true
import glob, json, os, sys
d = sys.argv[1]
try:
    g = json.load(open(os.path.join(d, "roofline.out")))["gpu"]
    bw, fl = g["copy_bytes_per_s"], g["bf16_flops"]
    print(f"GPU {g['name']}: copy {bw/1e12:.2f} TB/s (read+write), cuBLAS bf16 {fl/1e12:.0f} TFLOP/s")
except Exception as e:
    bw = fl = None
    print("roofline: n/a", e)
print(f"{'type':8} {'test':10} {'tok/s':>10} {'sd':>8} {'model GB':>9} {'GPU mem GB':>10} {'frac':>6}")
for f in sorted(glob.glob(os.path.join(d, "bench-*.out"))):
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
