#!/usr/bin/env bash
# Static checks of the Dockerfile (no Docker engine on these machines, so it is not built here):
#   - two stages: a Debian 12 build stage and a bookworm-slim runtime stage;
#   - the build stage installs every build package of scripts/setup.sh it needs (all but the
#     test-only compilers and benchmark libraries);
#   - the runtime stage installs the Debian package of every shared library the real binary
#     links (readelf NEEDED -> dpkg -S), libc/libgcc aside (essential in the base image), and
#     nothing that the binary does not link but ca-certificates;
#   - it runs as a non-root numeric user, with exec-form ENTRYPOINT ["tokenserve"], EXPOSE and
#     STOPSIGNAL SIGTERM (the drain signal), and every COPY source exists in the repository.
# Usage: dockerfile_test.sh path/to/tokenserve. Exit 77 (skip) without readelf/dpkg.
set -euo pipefail
BIN=${1:?usage: dockerfile_test.sh path/to/tokenserve}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DF=$ROOT/Dockerfile
command -v readelf >/dev/null && command -v dpkg >/dev/null || { echo "SKIP: readelf/dpkg not available"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

# Joins continuation lines, then prints the packages of the apt-get install in stage N (1-based).
stage_pkgs() {
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$DF" | awk -v n="$1" '
    /^FROM /{stage++}
    stage==n && /^RUN .*apt-get install/ {
      sub(/.*apt-get install/, ""); sub(/&&.*/, "");
      for (i = 1; i <= NF; i++) if ($i !~ /^-/) print $i
    }' | sort -u
}

[ "$(grep -c '^FROM ' "$DF")" = 2 ] || fail "expected two stages"
grep -q '^FROM debian:bookworm AS build$' "$DF" || fail "build stage must be debian:bookworm AS build"
grep -q '^FROM debian:bookworm-slim$' "$DF" || fail "runtime stage must be debian:bookworm-slim"

build_pkgs=$(stage_pkgs 1)
runtime_pkgs=$(stage_pkgs 2)
[ -n "$build_pkgs" ] && [ -n "$runtime_pkgs" ] || fail "no apt-get install found"

# setup.sh's packages, minus the ones the image does not need.
setup_pkgs=$(sed -n '/^PKGS=(/,/)/p' "$ROOT/scripts/setup.sh" | tr -d '()' | sed 's/PKGS=//' | tr ' ' '\n' | grep -v '^$' |
  grep -vE '^(clang|libclang-rt-.*|libbenchmark-dev)$' | sort -u)
missing=$(comm -23 <(echo "$setup_pkgs") <(echo "$build_pkgs"))
[ -z "$missing" ] || fail "build stage lacks setup.sh packages: $missing"

needed=$(readelf -d "$BIN" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || fail "readelf found no NEEDED libraries in $BIN"
want=""
for lib in $needed; do
  case "$lib" in libc.so.*|libm.so.*|libgcc_s.so.*|ld-linux*|libpthread.so.*|libdl.so.*) continue ;; esac
  path=$(ldd "$BIN" | awk -v l="$lib" '$1 == l {print $3}')
  [ -n "$path" ] || fail "ldd does not resolve $lib"
  pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -n1 | cut -d: -f1) || true
  [ -n "$pkg" ] || pkg=$(dpkg -S "$path" 2>/dev/null | head -n1 | cut -d: -f1) || true
  [ -n "$pkg" ] || fail "no Debian package owns $path ($lib)"
  want="$want $pkg"
done
want=$(echo $want | tr ' ' '\n' | sort -u)
missing=$(comm -23 <(echo "$want") <(echo "$runtime_pkgs"))
[ -z "$missing" ] || fail "runtime stage lacks the packages of linked libraries: $missing"
extra=$(comm -13 <(echo "$want") <(echo "$runtime_pkgs") | grep -v '^ca-certificates$' || true)
[ -z "$extra" ] || fail "runtime stage installs packages the binary does not link: $extra"

grep -qE '^USER [1-9][0-9]*(:[0-9]+)?$' "$DF" || fail "must run as a numeric non-root USER"
grep -qx 'ENTRYPOINT \["tokenserve"\]' "$DF" || fail 'ENTRYPOINT must be ["tokenserve"] (exec form)'
grep -qx 'STOPSIGNAL SIGTERM' "$DF" || fail "STOPSIGNAL SIGTERM (the drain signal) missing"
grep -qE '^EXPOSE [0-9]+$' "$DF" || fail "EXPOSE missing"
grep -q 'ninja -C build tokenserve' "$DF" || fail "the build stage must build the tokenserve target"
while read -r src; do
  [ -e "$ROOT/$src" ] || fail "COPY source $src does not exist"
done < <(awk '/^COPY / && !/--from=/ {print $2}' "$DF")
# Everything the build reads must be copied: the top-level CMake file's subdirectories.
for d in $(sed -n 's/^ *add_subdirectory(\([a-z]*\)).*/\1/p' "$ROOT/CMakeLists.txt"); do
  case "$d" in bench|fuzz) continue ;; esac  # off in the image (TS_BUILD_BENCH=OFF, TS_FUZZ off)
  grep -qE "^COPY $d " "$DF" || fail "CMakeLists.txt adds $d/ but the Dockerfile does not copy it"
done
echo "PASS: Dockerfile (runtime packages: $(echo $runtime_pkgs))"
