#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks and builds frugal (Release) into build/.
# Usage: scripts/setup.sh            -> build/bin/frugal
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
