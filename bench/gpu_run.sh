# Sourced by the scripts that run on a GPU machine from the packed binaries (bench/cuda_h200.sh
# --pack): the work folder, the archive every output lands in, the log, the time budget, and the
# library path for frugal, its libraries and cuBLAS.
# Before sourcing: ROOT (the repository), BUDGET (seconds), RUN (the archive's name: $RUN.tgz),
# LOGNAME_ (the log's file name), optionally FRUGAL_BIN. Sets PACK, RESULT, WORK, LOG, STEPS, START, F, CUBLAS and the
# functions pack, left and say.
PACK=$ROOT/.cudabench
START=$(date +%s)
RESULT=${OUT:-$ROOT/$RUN-out}
WORK=${TMPDIR:-/tmp}/$RUN-work
rm -rf "$WORK" && mkdir -p "$WORK" "$RESULT"
LOG=$RESULT/$LOGNAME_
STEPS=$WORK/steps.tsv
: >"$STEPS"
exec > >(tee "$LOG") 2>&1
pack() { cp "$LOG" "$WORK/" 2>/dev/null; tar czf "$RESULT/$RUN.tgz.part" -C "$WORK" . 2>/dev/null &&
  mv -f "$RESULT/$RUN.tgz.part" "$RESULT/$RUN.tgz"; }
trap pack EXIT
left() { echo $((BUDGET - ($(date +%s) - START))); }
say() { echo "[$(($(date +%s) - START))s] $*"; }
ulimit -c 0

# FRUGAL_BIN: another frugal binary (an earlier commit's, for an A/B) with the same libraries.
F=${FRUGAL_BIN:-$PACK/bin/frugal}
[ -x "$F" ] || { echo "no $F: run BUILD=<cuda build> bench/cuda_h200.sh --pack first"; exit 2; }
CUBLAS=$(ls /usr/local/cuda/lib64/libcublas.so.13 /usr/local/cuda*/targets/x86_64-linux/lib/libcublas.so.13 2>/dev/null | head -1)
[ -n "$CUBLAS" ] || CUBLAS=$(find /opt /usr -name 'libcublas.so.13' 2>/dev/null | head -1)
CXXLIB=
if ! grep -qa GLIBCXX_3.4.30 "$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 /{print $NF; exit}')" 2>/dev/null; then
  CXXLIB=:$PACK/lib/cxx
fi
export LD_LIBRARY_PATH=$PACK/lib$CXXLIB${CUBLAS:+:$(dirname "$CUBLAS")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
