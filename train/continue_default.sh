#!/usr/bin/env bash
# Continues training the default model from the committed models/default.gguf (same vocabulary and
# shape) on the current generators, then exports it and evaluates it on the test split.
#   train/continue_default.sh OUT [TRAIN_SECONDS] [extra train.py flags, which win]
# The draft model is left as it is (it only proposes tokens). Data rows stay in /tmp/ckpt so OUT
# holds only the run's log, GGUF and results.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: continue_default.sh OUT [TRAIN_SECONDS] [flags]}"
budget="${2:-165}"
shift $(( $# >= 2 ? 2 : 1 ))
exec python3 "$root/train/train.py" --gen-bin "$root/build-train/gen_data" --out "$out" \
  --ckpt-dir /tmp/ckpt --init-default "$root/models/default.gguf" --no-draft \
  --time-budget "$budget" --data-tokens 3.6e8 --curriculum 0 \
  --buckets 256:0.2,512:0.3,1024:0.45,2048:0.05 \
  --mix passkey=0.3,kv_recall=1.3,var_track=0.8,arithmetic=1.0,word_count=2.0 \
  --lr 1e-3 --warmup-steps 30 --min-lr-frac 0.05 \
  --probe-every 1e9 --export-every 60 --eval-n 64 --eval-lengths 256,512,1024,2048 "$@"
