#!/usr/bin/env bash
# frugal vs llama.cpp on the CPU, side by side: prompt processing (ppN), generation (tgN) and the
# peak memory of one generation, on the same GGUF files with the same thread count, in one run.
#
# Usage: bench/cpu_vs_llamacpp.sh [options]        (from the repository root)
#   --llamacpp-bin DIR  a built llama.cpp bin folder (llama-bench, llama-cli); default $LLAMACPP_BIN.
#                       Without it only frugal is measured and the ratio columns read "n/a".
#   --frugal PATH       the frugal binary (default: build/bin/frugal)
#   --models-dir DIR    where the random-weight models are written (default: bench/models, git-ignored)
#   --only LIST         comma-separated subset of the models, e.g. qwen2.5-0.5b:Q4_0
#                       (default: tinyllama-1.1b and qwen2.5-0.5b in F16, Q8_0, Q4_0, Q4_K_M)
#                       ("none": only the --model files)
#   --model PATH        also measure an existing GGUF file (repeatable; e.g. a real small model)
#   -t N                threads for both engines (default 2)
#   -p N / -n N         prompt and generation lengths (default 512 / 128)
#   -r N                repetitions per invocation (default 2)
#   --rounds N          invocations of each engine per model, alternating A B B A ... (default 2);
#                       every repetition of every round is one sample of the mean
#   --kv-models LIST    models for the quantized-KV decode table, comma-separated: "default" (the
#                       shipped model) or PRESET:TYPE (default: default,tinyllama-1.1b:Q4_0; "none"
#                       skips the table). frugal only: decode tok/s with F16, int8, int4, hyquant and hbq
#                       caches at each --kv-depths context (filled with random rows: --fill-depth)
#   --kv-depths LIST    contexts for that table (default 1024,4096,16384)
#   --kv-gen N          decode steps per measurement there (default 32)
#   --no-rss            skip the peak-memory runs
#   --simd NAME         run both engines on a smaller SIMD level of this CPU, to measure what a CPU
#                       of that level would do: AVX2 (no AVX-512), AVX3 (AVX-512) or SSE4. frugal
#                       gets FRUGAL_SIMD=NAME; llama.cpp must be a GGML_BACKEND_DL build with every
#                       CPU variant (GGML_CPU_ALL_VARIANTS), of which only the matching one is kept
#                       (haswell, skylakex, sandybridge) in a folder of links. Memory bandwidth and
#                       cache sizes stay this machine's.
#   --max-load L        before each model, wait until the 1-minute load average is below L
#   --max-wait S        ... but for at most S seconds (default 1800), then measure anyway
#   --append FILE       also append the table to FILE
#   --work DIR          keep the raw outputs in DIR (default: a new temporary folder)
#
# Every command is printed (prefixed "+") on stderr before it runs; the markdown table goes to stdout.
# Models are written with `frugal synth` and kept: an existing file is reused.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

llamacpp_bin="${LLAMACPP_BIN:-}"
frugal="$root/build/bin/frugal"
models_dir="$root/bench/models"
only=""
extra_models=()
threads=2
n_prompt=512
n_gen=128
reps=2
rounds=2
kv_models="default,tinyllama-1.1b:Q4_0"
kv_depths="1024,4096,16384"
kv_gen=32
do_rss=1
append=""
work=""
simd=""
max_load=""
max_wait=1800
prompt="Once upon a time"

die() { echo "cpu_vs_llamacpp: $*" >&2; exit 2; }
need_arg() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --llamacpp-bin) need_arg "$@"; llamacpp_bin="$2"; shift 2 ;;
    --frugal) need_arg "$@"; frugal="$2"; shift 2 ;;
    --models-dir) need_arg "$@"; models_dir="$2"; shift 2 ;;
    --only) need_arg "$@"; only="$2"; shift 2 ;;
    --model) need_arg "$@"; extra_models+=("$2"); shift 2 ;;
    -t) need_arg "$@"; threads="$2"; shift 2 ;;
    -p) need_arg "$@"; n_prompt="$2"; shift 2 ;;
    -n) need_arg "$@"; n_gen="$2"; shift 2 ;;
    -r) need_arg "$@"; reps="$2"; shift 2 ;;
    --rounds) need_arg "$@"; rounds="$2"; shift 2 ;;
    --kv-models) need_arg "$@"; kv_models="$2"; shift 2 ;;
    --kv-depths) need_arg "$@"; kv_depths="$2"; shift 2 ;;
    --kv-gen) need_arg "$@"; kv_gen="$2"; shift 2 ;;
    --no-rss) do_rss=0; shift ;;
    --simd) need_arg "$@"; simd="$2"; shift 2 ;;
    --max-load) need_arg "$@"; max_load="$2"; shift 2 ;;
    --max-wait) need_arg "$@"; max_wait="$2"; shift 2 ;;
    --append) need_arg "$@"; append="$2"; shift 2 ;;
    --work) need_arg "$@"; work="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

[[ -z "$max_load" || "$max_load" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--max-load must be a number, got '$max_load'"
for v in threads n_prompt n_gen reps rounds max_wait kv_gen; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[[ -x "$frugal" ]] || die "no frugal binary at $frugal (build it: cmake --preset release && cmake --build --preset release --target frugal)"
command -v python3 >/dev/null || die "python3 is needed to read the JSON results"

have_llama=0
if [[ -n "$llamacpp_bin" ]]; then
  if [[ -x "$llamacpp_bin/llama-bench" ]]; then
    have_llama=1
  else
    echo "cpu_vs_llamacpp: no llama-bench in '$llamacpp_bin': measuring frugal only" >&2
  fi
else
  echo "cpu_vs_llamacpp: LLAMACPP_BIN / --llamacpp-bin not set: measuring frugal only" >&2
fi
if [[ -n "$simd" ]]; then
  case "${simd^^}" in
    AVX2) variant=haswell ;;
    AVX3) variant=skylakex ;;
    SSE4) variant=sandybridge ;;
    *) die "--simd must be AVX2, AVX3 or SSE4, got '$simd'" ;;
  esac
  export FRUGAL_SIMD="${simd^^}"
  "$frugal" --version >/dev/null || die "frugal refused FRUGAL_SIMD=$FRUGAL_SIMD (see above)"
  if [[ $have_llama == 1 ]]; then
    [[ -e "$llamacpp_bin/libggml-cpu-$variant.so" ]] ||
      die "--simd needs a llama.cpp built with GGML_BACKEND_DL and GGML_CPU_ALL_VARIANTS (no libggml-cpu-$variant.so in $llamacpp_bin)"
    # llama.cpp loads the best CPU variant found beside its binary (the real path of
    # /proc/self/exe): offer it only the one asked for, with copies of the programs.
    simd_bin="$(mktemp -d "${TMPDIR:-/tmp}/llamacpp-$variant.XXXXXX")"
    for f in "$llamacpp_bin"/*; do
      name="$(basename "$f")"
      case "$name" in
        libggml-cpu-*.so) [[ "$name" == "libggml-cpu-$variant.so" ]] && ln -s "$(readlink -f "$f")" "$simd_bin/$name" ;;
        *.so*) ln -s "$(readlink -f "$f")" "$simd_bin/$name" ;;
        llama-bench|llama-cli) cp "$f" "$simd_bin/$name" ;;
      esac
    done
    llamacpp_bin="$simd_bin"
    export LD_LIBRARY_PATH="$simd_bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  echo "cpu_vs_llamacpp: SIMD level $FRUGAL_SIMD (llama.cpp variant $variant)" >&2
fi
have_cli=0
[[ $have_llama == 1 && -x "$llamacpp_bin/llama-cli" ]] && have_cli=1
have_time=0
time_bin="${GNU_TIME:-/usr/bin/time}"  # GNU time; GNU_TIME names another copy
[[ -x $time_bin ]] && have_time=1
[[ $do_rss == 1 && $have_time == 0 ]] && echo "cpu_vs_llamacpp: no GNU time at $time_bin: skipping peak memory" >&2

if [[ -z "$work" ]]; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/cpu_vs_llamacpp.XXXXXX")"
fi
mkdir -p "$work" "$models_dir" || die "cannot create $work or $models_dir"
echo "cpu_vs_llamacpp: raw outputs in $work" >&2

# Prints a command, then runs it; stdout and stderr go to the files given.
run_logged() {
  local out="$1" err="$2"
  shift 2
  echo "+ $(printf '%q ' "$@")> $out" >&2
  "$@" >"$out" 2>"$err"
  local rc=$?
  [[ $rc -ne 0 ]] && echo "  (exit status $rc; see $err)" >&2
  return $rc
}

default_models="tinyllama-1.1b:F16,tinyllama-1.1b:Q8_0,tinyllama-1.1b:Q4_0,tinyllama-1.1b:Q4_K_M"
default_models+=",qwen2.5-0.5b:F16,qwen2.5-0.5b:Q8_0,qwen2.5-0.5b:Q4_0,qwen2.5-0.5b:Q4_K_M"
IFS=',' read -r -a synth_models <<<"${only:-$default_models}"

# Writes (or reuses) the random-weight model PRESET:TYPE and prints its path; fails if it cannot.
synth_model() {
  local spec="$1" preset type path
  preset="${spec%%:*}"
  type="${spec#*:}"
  [[ "$preset" != "$spec" && -n "$type" ]] || die "model '$spec' is not PRESET:TYPE"
  path="$models_dir/$preset-$type.gguf"
  if [[ -s "$path" ]]; then
    echo "cpu_vs_llamacpp: reusing $path" >&2
  else
    echo "+ $(printf '%q ' "$frugal" synth --preset "$preset" --type "$type" --seed 1 -o "$path")" >&2
    if ! "$frugal" synth --preset "$preset" --type "$type" --seed 1 -o "$path" >&2; then
      echo "cpu_vs_llamacpp: could not write $path; skipping it" >&2
      return 1
    fi
  fi
  echo "$path"
}

# Model files to measure, as "label|type|path".
entries=()
for spec in "${synth_models[@]}"; do
  [[ "$spec" == "none" || -z "$spec" ]] && continue
  path="$(synth_model "$spec")" || continue
  entries+=("${spec%%:*}|${spec#*:}|$path")
done
for path in "${extra_models[@]}"; do
  [[ -s "$path" ]] || { echo "cpu_vs_llamacpp: no model file $path; skipping it" >&2; continue; }
  entries+=("$(basename "$path" .gguf)|-|$path")
done
# Models of the quantized-KV table, as "label|path".
kv_entries=()
IFS=',' read -r -a kv_specs <<<"$kv_models"
IFS=',' read -r -a kv_depth_list <<<"$kv_depths"
for d in "${kv_depth_list[@]}"; do [[ "$d" =~ ^[1-9][0-9]*$ ]] || die "--kv-depths: '$d' is not a positive integer"; done
for spec in "${kv_specs[@]}"; do
  [[ "$spec" == "none" || -z "$spec" ]] && continue
  if [[ "$spec" == "default" ]]; then
    path="$root/models/default.gguf"
    [[ -s "$path" ]] || { echo "cpu_vs_llamacpp: no $path; skipping the default model's KV rows" >&2; continue; }
  else
    path="$(synth_model "$spec")" || continue
  fi
  kv_entries+=("$spec|$path")
done
[[ ${#entries[@]} -gt 0 || ${#kv_entries[@]} -gt 0 ]] || die "no models to measure"

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "cpu_vs_llamacpp: load average before: $load_before" >&2

# Waits (up to max_wait seconds) for the machine to calm down; other people's jobs distort both
# engines, llama.cpp's spinning thread pool much more than the rest.
wait_for_quiet() {
  [[ -z "$max_load" ]] && return 0
  local waited=0 load
  while :; do
    load="$(cut -d' ' -f1 /proc/loadavg)"
    python3 -c "import sys; sys.exit(0 if float('$load') < float('$max_load') else 1)" && return 0
    if [[ $waited -ge $max_wait ]]; then
      echo "cpu_vs_llamacpp: load average $load is still above $max_load after ${waited}s: measuring anyway" >&2
      return 0
    fi
    [[ $waited -eq 0 ]] && echo "cpu_vs_llamacpp: load average $load >= $max_load: waiting (up to ${max_wait}s)" >&2
    sleep 30
    waited=$((waited + 30))
  done
}

llama_bench() {  # tag round model
  run_logged "$work/$1.llama.$2.json" "$work/$1.llama.$2.err" \
    "$llamacpp_bin/llama-bench" -m "$3" -t "$threads" -p "$n_prompt" -n "$n_gen" -r "$reps" -o json
}
frugal_bench() {  # tag round model
  run_logged "$work/$1.frugal.$2.json" "$work/$1.frugal.$2.err" \
    "$frugal" bench -m "$3" -t "$threads" -p "$n_prompt" -n "$n_gen" -r "$reps" --json
}

i=0
for entry in "${entries[@]}"; do
  IFS='|' read -r label type path <<<"$entry"
  tag="$(printf '%02d' "$i")"
  i=$((i + 1))
  wait_for_quiet
  load="$(cut -d' ' -f1 /proc/loadavg)"
  printf '%s\t%s\t%s\t%s\n' "$label" "$type" "$path" "$load" >"$work/$tag.model"
  echo "cpu_vs_llamacpp: === $label $type ($path), load average $load" >&2
  for ((r = 1; r <= rounds; r++)); do
    # A B B A: a slow drift of the machine's load hits both engines alike.
    if [[ $have_llama == 1 && $((r % 2)) == 1 ]]; then llama_bench "$tag" "$r" "$path"; fi
    frugal_bench "$tag" "$r" "$path"
    if [[ $have_llama == 1 && $((r % 2)) == 0 ]]; then llama_bench "$tag" "$r" "$path"; fi
  done
  if [[ $do_rss == 1 && $have_time == 1 ]]; then
    if [[ $have_cli == 1 ]]; then
      run_logged /dev/null "$work/$tag.llama.rss" "$time_bin" -v "$llamacpp_bin/llama-cli" -m "$path" \
        -p "$prompt" -n "$n_gen" -t "$threads" -c 2048 --temp 0 --ignore-eos -no-cnv --no-warmup </dev/null
    fi
    run_logged /dev/null "$work/$tag.frugal.rss" "$time_bin" -v "$frugal" run -m "$path" \
      -p "$prompt" -n "$n_gen" -t "$threads" -c 2048 --temp 0 --ignore-eos </dev/null
  fi
done

# Quantized KV: frugal only (llama.cpp's quantized caches are another format), every cache type
# back to back at each context, so a change of the machine's load hits all four alike.
k=0
for entry in "${kv_entries[@]}"; do
  IFS='|' read -r label path <<<"$entry"
  tag="kv$(printf '%02d' "$k")"
  k=$((k + 1))
  wait_for_quiet
  printf '%s\t%s\t%s\n' "$label" "$path" "$(cut -d' ' -f1 /proc/loadavg)" >"$work/$tag.kvmodel"
  echo "cpu_vs_llamacpp: === quantized KV: $label ($path)" >&2
  for d in "${kv_depth_list[@]}"; do
    for q in none int8 int4 hyquant hbq; do
      run_logged "$work/$tag.$d.$q.json" "$work/$tag.$d.$q.err" "$frugal" bench -m "$path" -t "$threads" -p 0 \
        -n "$kv_gen" -d "$d" --fill-depth --kv-quant "$q" -r "$reps" --json
    done
  done
done

load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "cpu_vs_llamacpp: load average after: $load_after" >&2

table="$(python3 "$here/cpu_vs_llamacpp_report.py" "$work" --pp "$n_prompt" --tg "$n_gen" --threads "$threads" \
  --load-before "$load_before" --load-after "$load_after" --rounds "$rounds" --reps "$reps")" \
  || die "could not build the table from $work"
echo "$table"
if [[ -n "$append" ]]; then
  { echo; echo "$table"; } >>"$append" || die "cannot append to $append"
fi
