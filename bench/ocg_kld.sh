#!/bin/sh
# NVFP4 RTN, H-Scale, OCG and both, scored by KL divergence against the unquantized model with
# float activations (W4A16) and with NVFP4 activations (W4A4, `--act-quant nvfp4`), plus the
# unquantized weights with NVFP4 activations (W16A4) with and without OCG's reordering.
# docs/quantization.md, "OCG", has the results and what they mean.
#
# usage: bench/ocg_kld.sh MODEL.gguf FLOAT_TYPE OUTDIR [THREADS]
#   FLOAT_TYPE: the model's own weight type (F16 for models/default.gguf, F32 for stories260K),
#   used for the reordered-only model so that its products run through the same kernels.
# Run from the repository root with build/bin/frugal built.
set -eu
M=$1
FT=$2
D=$3
T=${4:-2}
F=build/bin/frugal
mkdir -p "$D"
python3 -c "t=open('/usr/share/common-licenses/GPL-3').read(); open('$D/eval.txt','w').write(t[20000:32000]); open('$D/calib.txt','w').write(t[:20000])"
$F imatrix -m "$M" -f "$D/calib.txt" -o "$D/imatrix.dat" -c 128 -t "$T"
$F perplexity -m "$M" -f "$D/eval.txt" -c 128 --kl-divergence-base "$D/base.kld" -t "$T" | tee "$D/base.txt"
W=$(sed -n 's/.*(\([0-9]*\) windows of.*/\1/p' "$D/base.txt")
$F quantize "$M" "$D/rtn.gguf" NVFP4 -t "$T"
$F quantize "$M" "$D/hscale.gguf" NVFP4 --nvfp4-scale hscale --imatrix "$D/imatrix.dat" -t "$T"
$F quantize "$M" "$D/ocg.gguf" NVFP4 --ocg --imatrix "$D/imatrix.dat" -t "$T"
$F quantize "$M" "$D/both.gguf" NVFP4 --ocg --nvfp4-scale hscale --imatrix "$D/imatrix.dat" -t "$T"
$F quantize "$M" "$D/float-ocg.gguf" "$FT" --ocg --imatrix "$D/imatrix.dat" -t "$T"
cp "$M" "$D/float.gguf"
score() {  # file, activation mode, tag
  $F perplexity -m "$D/$1.gguf" --kl-divergence-base "$D/base.kld" --kl-divergence --act-quant "$2" \
    --kl-values "$D/$3.vals" -t "$T" > "$D/$3.txt"
  printf '%-16s %s\n' "$3" "$(grep -E 'Mean +KLD' "$D/$3.txt")"
}
score float-ocg none w16a16-ocg
for m in rtn hscale ocg both; do score $m none w4a16-$m; done
for m in rtn hscale ocg both; do score $m nvfp4 w4a4-$m; done
score float nvfp4 w16a4-plain
score float-ocg nvfp4 w16a4-ocg
echo "paired against RTN (window means, $W windows):"
python3 bench/paired_kld.py --windows "$W" "$D/w4a16-rtn.vals" "$D/w4a16-hscale.vals" "$D/w4a16-ocg.vals" "$D/w4a16-both.vals"
python3 bench/paired_kld.py --windows "$W" "$D/w4a4-rtn.vals" "$D/w4a4-hscale.vals" "$D/w4a4-ocg.vals" "$D/w4a4-both.vals"
python3 bench/paired_kld.py --windows "$W" "$D/w16a4-plain.vals" "$D/w16a4-ocg.vals"
