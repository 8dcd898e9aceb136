#!/usr/bin/env bash
# Runs every test tier: Release unit + golden + integration tests (ctest), the ASan+UBSan build
# of the unit tests, and bounded libFuzzer runs. Installs what it needs first (scripts/setup.sh).
# Shared test data is found at ../shared or $TOKENSERVE_SHARED.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
FUZZ_SECONDS=${FUZZ_SECONDS:-30}

scripts/setup.sh

echo "== Release tests =="
ctest --test-dir build --output-on-failure -j"$JOBS" --timeout 900

echo "== ASan + UBSan unit tests =="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTS_SANITIZE=ON -DTS_UNIT_ONLY=ON \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" >/dev/null
ninja -C build-asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$JOBS" --timeout 900

echo "== Fuzz (libFuzzer, ${FUZZ_SECONDS}s per target) =="
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DTS_FUZZ=ON \
  -DTS_BUILD_BENCH=OFF >/dev/null
fuzzers=$(cd fuzz && ls *_fuzz.cc | sed 's/\.cc$//')
ninja -C build-fuzz -j"$JOBS" $fuzzers
for f in $fuzzers; do
  corpus=build-fuzz/corpus-$f
  mkdir -p "$corpus"
  [ -d "fuzz/seeds/$f" ] && cp -n fuzz/seeds/"$f"/* "$corpus"/ 2>/dev/null || true
  echo "-- $f"
  build-fuzz/fuzz/$f "$corpus" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 2>&1 | tail -n 3
done

echo "== All test tiers passed =="
