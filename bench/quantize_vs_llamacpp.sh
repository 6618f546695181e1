#!/usr/bin/env bash
# frugal quantize against llama-quantize on one F16 model, in one run: for every type, with and
# without one importance matrix (llama-imatrix's, given to both tools), the file sizes, whether the
# files are byte-identical, and the mean KL divergence from the F16 model on an evaluation text
# (both files scored by `frugal perplexity --kl-divergence` against one base; a file identical to
# frugal's is not scored twice). Prints a markdown table.
#
#   LLAMACPP_BIN=DIR bench/quantize_vs_llamacpp.sh MODEL.gguf CALIBRATION.txt EVAL.txt [CTX] [TYPES]
#
# CTX (default 512) is the window of imatrix and perplexity; TYPES a comma-separated list.
set -euo pipefail
model="$1"; calib="$2"; eval_text="$3"; ctx="${4:-512}"
types="${5:-Q8_0,Q6_K,Q5_K_M,Q5_K_S,Q5_1,Q5_0,Q4_K_M,Q4_K_S,Q4_1,Q4_0,IQ4_NL,Q3_K_L,Q3_K_M,Q3_K_S,Q2_K,Q2_K_S}"
root="$(cd "$(dirname "$0")/.." && pwd)"
frugal="${FRUGAL:-$root/build/bin/frugal}"
llama="${LLAMACPP_BIN:?set LLAMACPP_BIN to a llama.cpp build/bin folder}"
threads="${THREADS:-2}"
work="${WORK:-$(mktemp -d)}"
mkdir -p "$work"
log() { echo "+ $*" >&2; }
run() { log "$@"; "$@" > "$work/last.log" 2>&1 || { cat "$work/last.log" >&2; return 1; }; }

run "$llama/llama-imatrix" -m "$model" -f "$calib" -c "$ctx" -t "$threads" -o "$work/imatrix.dat"
run "$frugal" perplexity -m "$model" -f "$eval_text" -c "$ctx" -t "$threads" --kl-divergence-base "$work/base.kld"
grep -E '^perplexity' "$work/last.log" >&2 || true

kld() {  # file -> "mean ± se | same top"
  "$frugal" perplexity -m "$1" --kl-divergence-base "$work/base.kld" --kl-divergence -t "$threads" > "$work/kld.log" 2>&1
  local mean top
  mean=$(grep -E '^Mean +KLD' "$work/kld.log" | head -1 | sed -E 's/^Mean +KLD: +//')
  top=$(grep -E '^Same top p' "$work/kld.log" | head -1 | sed -E 's/^Same top p: +//')
  echo "$mean | $top"
}

echo "| type | imatrix | frugal bytes | llama-quantize bytes | identical | KLD frugal (mean ± se) | same top frugal | KLD llama-quantize | same top llama-quantize |"
echo "|---|---|---:|---:|---|---:|---:|---:|---:|"
for t in ${types//,/ }; do
  for im in no yes; do
    [[ $t == Q2_K_S && $im == no ]] && continue  # refused by both tools without an imatrix
    args=(); largs=()
    [[ $im == yes ]] && args=(--imatrix "$work/imatrix.dat") && largs=(--imatrix "$work/imatrix.dat")
    f="$work/frugal-$t-$im.gguf"; l="$work/llama-$t-$im.gguf"
    run "$frugal" quantize "${args[@]}" -t "$threads" "$model" "$f" "$t"
    run "$llama/llama-quantize" "${largs[@]}" "$model" "$l" "$t" "$threads"
    fb=$(stat -c %s "$f"); lb=$(stat -c %s "$l")
    if cmp -s "$f" "$l"; then same=yes; else same=no; fi
    IFS='|' read -r fk ft <<< "$(kld "$f")"
    if [[ $same == yes ]]; then lk="(same file)"; lt=""; else IFS='|' read -r lk lt <<< "$(kld "$l")"; fi
    echo "| $t | $im | $fb | $lb | $same | $fk | $ft | $lk | $lt |"
    rm -f "$f" "$l"
  done
done
