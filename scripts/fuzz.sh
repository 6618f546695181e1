#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz preset: clang, ASan + UBSan, build-fuzz/) and runs each for
# SECONDS (default 60) on a copy of its seed corpus in tests/fuzz/corpus/, up to nproc targets at
# a time. Fails if any target crashes, leaks, trips a sanitizer, violates one of its checks or
# spends more than 25 s on one input; the input that did it is kept in build-fuzz/artifacts/.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets without the fuzz_ prefix; default all)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
jobs=${FUZZ_JOBS:-$(nproc)}

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for src in tests/fuzz/*.cc; do targets+=("$(basename "$src" .cc)"); done
fi

out=build-fuzz/fuzz-run
rm -rf "$out"
mkdir -p "$out" build-fuzz/artifacts

run_one() {
  local t=$1
  local work=$out/corpus/$t
  mkdir -p "$work" "build-fuzz/artifacts/$t"
  # A copy: the fuzzer adds what it finds to the first corpus folder, and the committed seeds stay
  # as they are.
  if [ -d "tests/fuzz/corpus/$t" ]; then cp -r "tests/fuzz/corpus/$t/." "$work/"; fi
  local rc=0
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build-fuzz/bin/fuzz_$t" "$work" -max_total_time="$seconds" -timeout=25 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/artifacts/$t/" >"$out/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$out/$t.rc"
}

for t in "${targets[@]}"; do
  if [ ! -x "build-fuzz/bin/fuzz_$t" ]; then
    echo "fuzz: no target fuzz_$t" >&2
    exit 1
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_one "$t" &
done
wait

failed=0
printf '%-16s %12s %10s %8s  %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/$t.log" | tail -1)
  files=$(find "$out/corpus/$t" -type f | wc -l)
  rc=$(cat "$out/$t.rc")
  result=ok
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc; log $out/$t.log; input in build-fuzz/artifacts/$t/)"
    failed=1
  fi
  printf '%-16s %12s %10s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$files" "$result"
done
if [ "$failed" -ne 0 ]; then
  for t in "${targets[@]}"; do
    if [ "$(cat "$out/$t.rc")" -ne 0 ]; then
      echo "--- fuzz_$t" >&2
      grep -E -A30 'ERROR: |property violated|runtime error|==ERROR|deadly signal|Test unit written' "$out/$t.log" | head -60 >&2 || tail -40 "$out/$t.log" >&2
    fi
  done
  echo "fuzz: a target failed" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, no finding"
