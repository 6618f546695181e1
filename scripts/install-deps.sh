#!/usr/bin/env bash
# Installs with apt what a fresh Debian 12 machine lacks to build and test frugal.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libhwy-dev libcli11-dev nlohmann-json3-dev
          libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev
          clang libclang-rt-dev)  # clang and its libFuzzer runtime: the fuzz preset (scripts/fuzz.sh)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js runs the server tests with the official API clients; any recent version will do.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
