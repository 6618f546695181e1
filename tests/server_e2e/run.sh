#!/usr/bin/env bash
# End-to-end tests of `frugal serve` through the official npm clients (openai, @anthropic-ai/sdk,
# ollama). Builds nothing: it needs a built frugal and server_tests (the helper that writes the
# tiny test model).
# Usage: tests/server_e2e/run.sh [BUILD_BIN_DIR | PATH_TO_FRUGAL]      (default: build/bin)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
arg="${1:-$root/build/bin}"
# Accept the frugal binary itself as well as the folder that holds it.
if [ -f "$arg" ]; then arg="$(dirname "$arg")"; fi
[ -d "$arg" ] || { echo "server_e2e: $arg is neither the build's bin folder nor the frugal binary" >&2; exit 1; }
bin_dir="$(cd "$arg" && pwd)"
frugal="$bin_dir/frugal"
helper="$bin_dir/server_tests"
for f in "$frugal" "$helper"; do
  [ -x "$f" ] || { echo "server_e2e: $f is missing (build the frugal and server_tests targets)" >&2; exit 1; }
done
if ! "$frugal" serve --help >/dev/null 2>&1; then
  echo "server_e2e: $frugal has no 'serve' command" >&2
  exit 1
fi
cd "$root"
if [ ! -d node_modules/openai ] || [ ! -d node_modules/@anthropic-ai/sdk ] || [ ! -d node_modules/ollama ]; then
  echo "server_e2e: installing the npm clients (npm ci)" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$helper" --write-model "$work/tiny.gguf"
export FRUGAL_BIN="$frugal" FRUGAL_MODEL="$work/tiny.gguf"
# One file at a time: each starts its own server, and the machine may have only two cores.
node --test --test-concurrency=1 tests/server_e2e/
