#!/usr/bin/env bash
# MemSpec vs the bandit vs the oracle on the testbed pair (bench/memspec_study.cc): the pool is
# n-gram lookup, the shipped draft model in F16 and the same draft rounded by `frugal quantize` to
# Q8_0 and Q4_0 (smaller, cheaper to run, a little less accurate), under residency budgets of 1x,
# 1.5x and 2x the largest draft's footprint.
#
# Usage: bench/memspec.sh [WORKDIR] [extra memspec_study options, e.g. --seeds 10 --rounds 2]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${1:-$(mktemp -d "${TMPDIR:-/tmp}/memspec.XXXXXX")}"
shift || true
mkdir -p "$work"
frugal="$root/build/bin/frugal"
study="$root/build/bin/memspec_study"
[[ -x $frugal && -x $study ]] || { echo "memspec.sh: build frugal and memspec_study first" >&2; exit 2; }
for t in Q8_0 Q4_0; do
  [[ -f "$work/draft-$t.gguf" ]] || "$frugal" quantize "$root/models/draft.gguf" "$work/draft-$t.gguf" "$t" >&2
done
cd "$root"
echo "+ memspec_study --drafts ngram,models/draft.gguf,$work/draft-Q8_0.gguf,$work/draft-Q4_0.gguf $*" >&2
"$study" -m models/default.gguf --drafts "ngram,models/draft.gguf,$work/draft-Q8_0.gguf,$work/draft-Q4_0.gguf" "$@"
