#!/usr/bin/env bash
# KV-cache eviction sweep on the testbed: every policy x prompt protection x budget, through
# `frugal eval`, one JSON per (policy, protection) in OUT; bench/kv_sweep_report.py turns them into
# the table and plot of docs/kv-cache.md.
#
#   bench/kv_sweep.sh OUT [--budget-of trace|generated] [--lengths 256] [-n 40] [-t 2]
#                     [--budgets 0.125,0.25,0.5] [--buffer 16] [--policies "random window ..."]
#                     [--bin build/bin/frugal] [--model PATH]
set -euo pipefail
out="${1:?usage: bench/kv_sweep.sh OUT [options]}"
shift
budget_of=trace lengths=256 n=40 threads=2 budgets=0.125,0.25,0.5 buffer=16
policies="random window snapkv h2o tova rkv" bin=build/bin/frugal model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-of) budget_of="$2"; shift 2 ;;
    --lengths) lengths="$2"; shift 2 ;;
    -n) n="$2"; shift 2 ;;
    -t) threads="$2"; shift 2 ;;
    --budgets) budgets="$2"; shift 2 ;;
    --buffer) buffer="$2"; shift 2 ;;
    --policies) policies="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    *) echo "kv_sweep: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
common=(eval --lengths "$lengths" -n "$n" -t "$threads" --kl-examples 3 --quiet)
[ -n "$model" ] && common+=(-m "$model")
echo "kv_sweep: $bin ${common[*]} (budget of the $budget_of, buffer $buffer) -> $out" >&2
start=$(date +%s)
# The keep-everything baseline once; every other run is measured against the same examples.
[ -f "$out/full.json" ] || "$bin" "${common[@]}" --out "$out/full.json" > "$out/full.txt"
for p in $policies; do
  for prot in 1 0; do
    f="$out/$p-protect$prot"
    [ -f "$f.json" ] && continue
    "$bin" "${common[@]}" --set kv-policy="$p" --set kv-buffer="$buffer" --set kv-protect-prompt="$prot" \
      --set kv-budget-of="$budget_of" --sweep kv-budget="$budgets" --out "$f.json" --plot "$f.svg" > "$f.txt"
    echo "kv_sweep: $p protect=$prot done at +$(( $(date +%s) - start )) s" >&2
  done
done
echo "kv_sweep: all runs done in $(( $(date +%s) - start )) s" >&2
