#!/usr/bin/env bash
# Installs what Strata needs to build, test and benchmark on Debian 12:
# Debian's packages for the toolchain, the C++ libraries and system tools
# (apt), then the project's Python environment from PyPI, pinned
# (scripts/python-env.sh). Idempotent: a second run prints nothing and
# touches nothing when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libxxhash-dev libcurl4-openssl-dev libssl-dev libpugixml-dev
  libgtest-dev libgmock-dev libbenchmark-dev libasio-dev libisal-dev
  clang clang-format xxhash curl iproute2 procps openssl
  python3 python3-dev python3-venv
  prometheus
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]} (run as root or install them)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# STRATA_PYTHON_ENV=later: Debian's packages only; the caller makes the
# Python environment itself (CI does, beside its first compile).
if [ "${STRATA_PYTHON_ENV:-}" != later ]; then
  bash scripts/python-env.sh
fi
