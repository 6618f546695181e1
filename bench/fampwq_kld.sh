#!/bin/sh
# FAMPWQ (Fisher-weighted mixed precision, `frugal quantize --target-bpw --fisher`) against
# llama-quantize-style mixes and uniform types at the same size of the layer matrices: mean KLD
# and perplexity on held-out text, testbed accuracy. docs/quantization.md, "FAMPWQ", has the
# results.
#
# usage: bench/fampwq_kld.sh MODEL.gguf OUTDIR [THREADS] [EVAL_N]
# Run from the repository root with build/bin/frugal built. train/fisher.py needs PyTorch:
# TORCH_PYTHON names the interpreter that has it (default /usr/bin/python3, Debian's python3-torch).
set -eu
M=$1
D=$2
T=${3:-2}
N=${4:-30}
F=build/bin/frugal
PY=${TORCH_PYTHON:-/usr/bin/python3}
mkdir -p "$D"
# Calibration: the first 20 000 characters of GPL-3; evaluation: the next 12 000 (no overlap).
python3 -c "t=open('/usr/share/common-licenses/GPL-3').read(); open('$D/eval.txt','w').write(t[20000:32000]); open('$D/calib.txt','w').write(t[:20000])"
$F tokenize -m "$M" -f "$D/calib.txt" > "$D/calib.tokens.json"
[ -f "$D/fisher.gguf" ] || $PY train/fisher.py -m "$M" --tokens "$D/calib.tokens.json" -c 128 -t "$T" -o "$D/fisher.gguf"
$F imatrix -m "$M" -f "$D/calib.txt" -o "$D/imatrix.dat" -c 128 -t "$T"
$F perplexity -m "$M" -f "$D/eval.txt" -c 128 --kl-divergence-base "$D/base.kld" -t "$T" > "$D/base.txt"
for ty in Q2_K IQ4_NL Q4_0 Q3_K_M Q4_1 Q4_K_M Q5_0; do
  $F quantize "$M" "$D/$ty.gguf" "$ty" --imatrix "$D/imatrix.dat" -t "$T" 2> "$D/$ty.log"
done
# FAMPWQ at each mix's bits per weight of the layer matrices, the mix's rules for the rest.
for mix in Q2_K IQ4_NL Q3_K_M Q4_1 Q4_K_M; do
  B=$(python3 bench/layer_bpw.py "$D/$mix.gguf" | cut -d' ' -f2)
  for al in dp rl; do
    for gr in layer tensor; do
      name="fampwq-$al-$gr@$mix"
      if ! $F quantize "$M" "$D/$name.gguf" "$mix" --target-bpw "$B" --fisher "$D/fisher.gguf" --allocator "$al" \
          --granularity "$gr" --imatrix "$D/imatrix.dat" -t "$T" > "$D/$name.alloc" 2>&1; then
        echo "$name: $(tail -1 "$D/$name.alloc")"
      fi
    done
  done
done
# One row per file: layer bpw, file bytes, Fisher cost (FAMPWQ files), mean KLD +- se, same top,
# PPL(Q), testbed accuracy with its Wilson 95% interval.
for f in "$D"/*.gguf; do
  n=$(basename "$f" .gguf)
  case $n in fisher) continue ;; esac
  $F perplexity -m "$f" --kl-divergence-base "$D/base.kld" --kl-divergence -t "$T" > "$D/$n.kld" 2>&1
  $F eval -m "$f" --lengths 1024 -n "$N" -t "$T" --no-ref -q --out "$D/$n.eval.json" > /dev/null 2>&1
  python3 bench/fampwq_row.py "$f" "$D/$n" --accuracy
done
