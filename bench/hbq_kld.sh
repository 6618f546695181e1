#!/bin/sh
# HBQ-A and HBQ-E (significand, power-of-two and integer second-level multipliers) against NVFP4,
# MXFP4, IQ4_NL and Q4_K_M: KL divergence from the unquantized model and perplexity on the same
# text, plus each file's bits per weight over its quantized 2-D weights. docs/quantization.md,
# "HBQ", has the results.
#
# usage: bench/hbq_kld.sh MODEL.gguf EVAL.txt OUTDIR [THREADS] [CTX]
# Run from the repository root with build/bin/frugal built.
set -eu
M=$1
E=$2
D=$3
T=${4:-2}
C=${5:-256}
F=build/bin/frugal
mkdir -p "$D"
$F perplexity -m "$M" -f "$E" -c "$C" --kl-divergence-base "$D/base.kld" -t "$T" > "$D/base.txt"
grep -E '^perplexity' "$D/base.txt" || tail -n 3 "$D/base.txt"
q() {  # tag, type, extra quantize flags
  tag=$1
  type=$2
  shift 2
  $F quantize "$M" "$D/$tag.gguf" "$type" -t "$T" "$@" > "$D/$tag.quantize.txt"
  $F perplexity -m "$D/$tag.gguf" --kl-divergence-base "$D/base.kld" --kl-divergence -t "$T" > "$D/$tag.txt"
  bpw=$(python3 bench/layer_bpw.py "$D/$tag.gguf" | cut -d' ' -f2-5)
  printf '%-12s %s | %s | %s\n' "$tag" "$bpw" "$(grep -E 'Mean +KLD' "$D/$tag.txt")" \
    "$(grep -E 'Mean PPL\(Q\) ' "$D/$tag.txt")"
}
q hbq_a_sig HBQ_A
q hbq_a_pow2 HBQ_A --hbq-scale pow2
q hbq_a_int HBQ_A --hbq-scale int
q hbq_e_sig HBQ_E
q hbq_e_pow2 HBQ_E --hbq-scale pow2
q hbq_e_int HBQ_E --hbq-scale int
q nvfp4 NVFP4
q mxfp4 MXFP4
q iq4_nl IQ4_NL
q q4_k_m Q4_K_M
