#!/usr/bin/env bash
# Installs the Debian 12 packages Strata needs to build, test and benchmark.
# Idempotent: prints nothing and touches nothing when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libxxhash-dev libcurl4-openssl-dev libssl-dev libpugixml-dev
  libgtest-dev libgmock-dev libbenchmark-dev libasio-dev libisal-dev
  clang clang-format xxhash python3
  pybind11-dev python3-dev python3-numpy python3-pytest python3-torch python3-yaml
  prometheus
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root or install them)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
