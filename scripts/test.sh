#!/usr/bin/env bash
# Runs every test tier: Release unit + golden + integration tests (ctest, including the Node
# openai-client and headless-Chromium dashboard tests against the real server, and PostgreSQL /
# Redis gateway tests), then one clang ASan+UBSan tree of the modules that parse untrusted bytes
# or own raw memory (CMakeLists.txt, TS_FUZZ) that runs their unit tests and builds the libFuzzer
# targets for bounded fuzzing runs. Every phase prints its time ("-- time:").
# Installs what it needs first (scripts/setup.sh, test-only Debian and npm packages).
# Shared test data is found at ../shared or $TOKENSERVE_SHARED.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=$(nproc)
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
SHARED=${TOKENSERVE_SHARED:-$ROOT/../shared}
SUMMARY=$(mktemp)
T0=$(date +%s); TP=$T0
phase() { local t; t=$(date +%s); echo "-- time: $1 $((t - TP)) s (total $((t - T0)) s)"; TP=$t; }

scripts/setup.sh --deps-only
phase "build packages"

# Test-only packages: a browser for the dashboard test, Node for the openai client tests,
# PostgreSQL and Redis servers for the gateway tests; openssl (https remotes) and iproute2
# (network namespaces) for the scale-out tests. They install (and `npm ci` runs) in the
# background while the Release tree builds: on a fresh 2-core machine that is a few minutes of
# mostly network and disk time the build would otherwise wait for (no test runs meanwhile).
install_test_packages() {
  local test_pkgs=(chromium nodejs npm postgresql redis-server redis-tools yq haproxy prometheus openssl iproute2)
  local missing=() p d
  for p in "${test_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # Node may come from elsewhere on the image; only install Debian's when there is none.
  if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=($(printf '%s\n' "${missing[@]}" | grep -vxE 'nodejs|npm' || true))
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "test: installing ${missing[*]}"
    local SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  for d in tests/integration tests/browser tests/scaleout; do
    [ -f "$d/package.json" ] && (cd "$d" && npm ci --no-audit --no-fund --loglevel=error)
  done
}
PKG_LOG=$(mktemp)
install_test_packages >"$PKG_LOG" 2>&1 &
pkg_pid=$!

scripts/setup.sh
phase "Release build (test packages installing beside it)"
if ! wait "$pkg_pid"; then
  cat "$PKG_LOG"; echo "test: installing the test packages failed" >&2; exit 1
fi
tail -n 5 "$PKG_LOG"; rm -f "$PKG_LOG"
phase "rest of the test packages"

echo "== Test services (PostgreSQL, Redis) =="
services=$(scripts/start_test_services.sh)
eval "$services"
phase "test packages + services"
trap 'scripts/stop_test_services.sh "$TOKENSERVE_TEST_SERVICES_DIR" >/dev/null 2>&1 || true; rm -f "$SUMMARY"' EXIT

echo "== Release tests =="
ctest --test-dir build --output-on-failure -j"$JOBS" --timeout 900 2>&1 | tee -a "$SUMMARY"
phase "Release tests"

echo "== ASan + UBSan unit tests (clang; the same tree builds the fuzz targets) =="
# A tree configured by an older version of this script with gcc is started afresh.
if [ -f build-asan/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' build-asan/CMakeCache.txt; then
  rm -rf build-asan
fi
CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTS_FUZZ=ON \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only" >/dev/null
ninja -C build-asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TS_SANITIZER_BUILD=1 \
  ctest --test-dir build-asan --output-on-failure -j"$JOBS" --timeout 900 2>&1 | tee -a "$SUMMARY"
phase "ASan + UBSan"

echo "== Fuzz (libFuzzer, ${FUZZ_SECONDS}s per target) =="
fuzzers=$(cd fuzz && ls *_fuzz.cc | sed 's/\.cc$//')
fuzz_ok=0
for f in $fuzzers; do
  corpus=build-asan/corpus-$f
  mkdir -p "$corpus"
  [ -d "fuzz/seeds/$f" ] && cp -n fuzz/seeds/"$f"/* "$corpus"/ 2>/dev/null || true
  # Real models' chat templates seed the template fuzzer.
  [ "$f" = chat_template_fuzz ] && [ -d "$SHARED/chat-templates" ] &&
    cp -n "$SHARED"/chat-templates/*.jinja "$corpus"/ 2>/dev/null || true
  echo "-- $f"
  build-asan/fuzz/$f "$corpus" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -max_len=65536 \
    -timeout=10 -print_final_stats=1 >build-asan/$f.log 2>&1 || { tail -n 40 build-asan/$f.log; exit 1; }
  grep -E 'stat::number_of_executed_units' build-asan/$f.log || true
  fuzz_ok=$((fuzz_ok + 1))
done

phase "fuzz"

# One closing line over every tier (ctest counts + fuzz targets).
passed=$(grep -Eo 'tests passed, [0-9]+ tests failed out of [0-9]+' "$SUMMARY" | awk '{t+=$8; f+=$4} END {print t-f}')
failed=$(grep -Eo 'tests passed, [0-9]+ tests failed out of [0-9]+' "$SUMMARY" | awk '{f+=$4} END {print f+0}')
echo "== All test tiers passed =="
echo "tokenserve: $((passed + fuzz_ok)) passed, $failed failed"
