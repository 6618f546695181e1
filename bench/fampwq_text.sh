#!/bin/sh
# FAMPWQ on the natural-text model (models/text.gguf: rows of 512 and 1536 take every K-quant):
# Fisher mixed precision at 3.0 / 3.5 / 4.0 bits per weight of the layer matrices and at the
# sizes of Q3_K_M and Q4_K_M, against the mixes and uniform types, by mean KLD from the F16
# model and perplexity on held-out text. docs/quantization.md, "FAMPWQ on the natural-text model".
#
# usage: bench/fampwq_text.sh CALIB.txt EVAL.txt OUTDIR [THREADS]
# CALIB should come from the training side of the corpus, EVAL from the held-out side
# (train/text/heldout_overlap.py's heldout_sample.txt). The Fisher file is computed once
# (train/fisher.py, -c 256) and kept in OUTDIR. TORCH_PYTHON: an interpreter with PyTorch.
set -eu
M=${MODEL:-models/text.gguf}
C=$1
E=$2
D=$3
T=${4:-2}
F=build/bin/frugal
PY=${TORCH_PYTHON:-/usr/bin/python3}
mkdir -p "$D"
$F tokenize -m "$M" -f "$C" > "$D/calib.tokens.json"
[ -f "$D/fisher.gguf" ] || $PY train/fisher.py -m "$M" --tokens "$D/calib.tokens.json" -c 256 -t "$T" -o "$D/fisher.gguf"
[ -f "$D/imatrix.dat" ] || $F imatrix -m "$M" -f "$C" -o "$D/imatrix.dat" -c 512 -t "$T"
$F perplexity -m "$M" -f "$E" -c 512 --kl-divergence-base "$D/base.kld" -t "$T" > "$D/base.txt"
for ty in Q2_K Q3_K_S Q3_K_M Q4_K_S Q4_K_M; do
  $F quantize "$M" "$D/$ty.gguf" "$ty" --imatrix "$D/imatrix.dat" -t "$T" 2> "$D/$ty.log"
done
budgets="3.0 3.5 4.0 $(python3 bench/layer_bpw.py "$D/Q3_K_M.gguf" | cut -d' ' -f2) $(python3 bench/layer_bpw.py "$D/Q4_K_M.gguf" | cut -d' ' -f2)"
for B in $budgets; do
  for al in dp rl; do
    name="fampwq-$al@$B"
    $F quantize "$M" "$D/$name.gguf" Q4_K_M --target-bpw "$B" --fisher "$D/fisher.gguf" --allocator "$al" \
      --granularity tensor --imatrix "$D/imatrix.dat" -t "$T" > "$D/$name.alloc" 2>&1 || echo "$name: $(tail -1 "$D/$name.alloc")"
  done
done
echo "| file | layer bpw | tensor bytes | Fisher cost | mean KLD ± se | same top % | PPL(Q) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for f in "$D"/*.gguf; do
  n=$(basename "$f" .gguf)
  case $n in fisher) continue ;; esac
  $F perplexity -m "$f" --kl-divergence-base "$D/base.kld" --kl-divergence -t "$T" > "$D/$n.kld" 2>&1
  python3 bench/fampwq_row.py "$f" "$D/$n"
done
