#!/usr/bin/env bash
# Installs the Debian packages tokenserve needs and builds it (Release) into build/.
# Usage: scripts/setup.sh            (idempotent; safe to re-run)
#        scripts/setup.sh --deps-only  (only the packages; scripts/test.sh builds while it installs
#                                       the test-only packages)
set -euo pipefail
cd "$(dirname "$0")/.."
deps_only=0
[ "${1:-}" = "--deps-only" ] && deps_only=1

PKGS=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libboost-dev libboost-system-dev nlohmann-json3-dev libpcre2-dev
      libsqlite3-dev libpq-dev libhiredis-dev libcurl4-openssl-dev libcli11-dev libtomlplusplus-dev
      libspdlog-dev libfmt-dev ca-certificates)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

[ "$deps_only" = 1 ] && exit 0

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
ninja -C build -j"$(nproc)"
echo "setup: built build/tokenserve"
