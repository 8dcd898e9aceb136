#!/usr/bin/env bash
# Runs every test tier: Release unit + golden + integration tests (ctest, including the Node
# openai-client and headless-Chromium dashboard tests against the real server, and PostgreSQL /
# Redis gateway tests), the ASan+UBSan build of the unit tests, and bounded libFuzzer runs.
# Installs what it needs first (scripts/setup.sh, test-only Debian and npm packages).
# Shared test data is found at ../shared or $TOKENSERVE_SHARED.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=$(nproc)
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
SUMMARY=$(mktemp)

scripts/setup.sh

# Test-only packages: a browser for the dashboard test, Node for the openai client tests,
# PostgreSQL and Redis servers for the gateway tests; openssl (https remotes) and iproute2
# (network namespaces) for the scale-out tests.
test_pkgs=(chromium nodejs npm postgresql redis-server redis-tools yq haproxy prometheus openssl iproute2)
missing=()
for p in "${test_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node may come from elsewhere on the image; only install Debian's when there is none.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=($(printf '%s\n' "${missing[@]}" | grep -vxE 'nodejs|npm' || true))
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "test: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
for d in tests/integration tests/browser tests/scaleout; do
  [ -f "$d/package.json" ] && (cd "$d" && npm ci --no-audit --no-fund --loglevel=error)
done

echo "== Test services (PostgreSQL, Redis) =="
services=$(scripts/start_test_services.sh)
eval "$services"
trap 'scripts/stop_test_services.sh "$TOKENSERVE_TEST_SERVICES_DIR" >/dev/null 2>&1 || true; rm -f "$SUMMARY"' EXIT

echo "== Release tests =="
ctest --test-dir build --output-on-failure -j"$JOBS" --timeout 900 2>&1 | tee -a "$SUMMARY"

echo "== ASan + UBSan unit tests =="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTS_SANITIZE=ON -DTS_UNIT_ONLY=ON \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" >/dev/null
ninja -C build-asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TS_SANITIZER_BUILD=1 \
  ctest --test-dir build-asan --output-on-failure -j"$JOBS" --timeout 900 2>&1 | tee -a "$SUMMARY"

echo "== Fuzz (libFuzzer, ${FUZZ_SECONDS}s per target) =="
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DTS_FUZZ=ON >/dev/null
fuzzers=$(cd fuzz && ls *_fuzz.cc | sed 's/\.cc$//')
ninja -C build-fuzz -j"$JOBS" $fuzzers
fuzz_ok=0
for f in $fuzzers; do
  corpus=build-fuzz/corpus-$f
  mkdir -p "$corpus"
  [ -d "fuzz/seeds/$f" ] && cp -n fuzz/seeds/"$f"/* "$corpus"/ 2>/dev/null || true
  echo "-- $f"
  build-fuzz/fuzz/$f "$corpus" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -max_len=65536 \
    -timeout=10 -print_final_stats=1 >build-fuzz/$f.log 2>&1 || { tail -n 40 build-fuzz/$f.log; exit 1; }
  grep -E 'stat::number_of_executed_units' build-fuzz/$f.log || true
  fuzz_ok=$((fuzz_ok + 1))
done

# One closing line over every tier (ctest counts + fuzz targets).
passed=$(grep -Eo 'tests passed, [0-9]+ tests failed out of [0-9]+' "$SUMMARY" | awk '{t+=$8; f+=$4} END {print t-f}')
failed=$(grep -Eo 'tests passed, [0-9]+ tests failed out of [0-9]+' "$SUMMARY" | awk '{f+=$4} END {print f+0}')
echo "== All test tiers passed =="
echo "tokenserve: $((passed + fuzz_ok)) passed, $failed failed"
