#!/usr/bin/env bash
# Installs what is missing, builds everything (Release, warnings as errors) into build/ and runs
# every test; then the GGUF and tokenizer tests again under AddressSanitizer + UBSan, and the
# server end-to-end tests with the official npm clients. build/bin/frugal is usable afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
scripts/install-deps.sh

cmake --preset ci >/dev/null
cmake --build --preset ci -j "$jobs"
ctest --preset ci -j "$jobs"

cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs" --target format_tests tokenize_tests
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --preset asan -j "$jobs" -L 'format|tokenize'

# The server driven by the official OpenAI, Anthropic and Ollama clients from npm.
if [ -x tests/server_e2e/run.sh ]; then
  npm ci --no-audit --no-fund --loglevel=error
  tests/server_e2e/run.sh build/bin
fi
echo "all tests passed"
