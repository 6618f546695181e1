#!/usr/bin/env bash
# Fails when host code in CUDA objects can reach exit().
#
# nvcc compiles a host-side call of a __device__-only function inside a template into a stub that
# calls exit(1) with no diagnostic at build time; at run time the process just ends. Nothing in
# frugal's CUDA sources calls exit() on purpose, so any reference to exit in these objects is such
# a stub. For each one the script names the object and the function that makes the call.
#
# Usage: scripts/check_cuda_host_stubs.sh OBJECT_OR_ARCHIVE...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 OBJECT_OR_ARCHIVE..." >&2; exit 2; }
command -v objdump >/dev/null || { echo "check_cuda_host_stubs: objdump not found (binutils)" >&2; exit 2; }
bad=0
for f in "$@"; do
  [ -f "$f" ] || { echo "check_cuda_host_stubs: no such file: $f" >&2; exit 2; }
  # -d disassembles host code, -r prints the relocation under each call: in an object file a call
  # of exit is "call ... R_X86_64_PLT32 exit-0x4"; in a linked file it is "call ... <exit@plt>".
  hits=$(objdump -dr --no-show-raw-insn -C "$f" 2>/dev/null | awk '
    /^[0-9a-f]+ <.*>:$/ { fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn) }
    /^In archive|file format/ { obj = $1 }
    /R_X86_64_(PLT32|PC32|GOTPCREL[A-Z]*)[[:space:]]+(exit|_exit|_Exit)([-+]|$)/ || /<(exit|_exit|_Exit)@plt>/ {
      print "  " obj " in " fn
    }' | sort -u)
  if [ -n "$hits" ]; then
    echo "check_cuda_host_stubs: $f: host code calls exit() (a __device__-only function called from host code?):"
    echo "$hits"
    bad=1
  fi
done
if [ $bad -ne 0 ]; then
  echo "check_cuda_host_stubs: mark helpers used on both sides __host__ __device__" >&2
  exit 1
fi
echo "check_cuda_host_stubs: no exit() reachable from host code in $*"
