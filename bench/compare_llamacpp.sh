#!/usr/bin/env bash
# Side-by-side benchmark: tokenserve against llama.cpp on this host, in one run.
#
#   bench/compare_llamacpp.sh [--models "qwen smollm"] [--isa "scalar avx2 avx512"] [--threads 2]
#                             (--models also takes qwen-q4km, smollm-q4km and the wide-* K-quant
#                             files wide-q4km wide-q5km wide-q3km wide-q2k wide-iq4xs, wide-f16 and
#                             the legacy wide-q4_0 wide-q4_1 wide-q5_0 wide-q5_1 wide-q8_0
#                             wide-iq4nl: see model_file)
#                             [--quick] [--skip-server] [--out DIR]
#                             [--llama-isa native|avx512|avxvnni|avx2|matched]
#                             [--server-isa "avx2"]  (server load tiers; default: --isa without scalar)
#
# llama.cpp is built from the source the npm package node-llama-cpp@3.22.1 carries
# (llama/gitRelease.bundle, a git bundle; `npm pack` fetches it) into a cache outside the
# repository ($TOKENSERVE_CACHE or ~/.cache/tokenserve), once. Then, for each model shape
# (Q8_0 weights made by `tokenserve synth`, the same file for both engines):
#   - measured read bandwidth (kernels_bench BM_Bandwidth, same minutes);
#   - decode at batch 1: `llama-bench -p 0 -n 128` vs `tokenserve generate -n 128 --ignore-eos` from a
#     one-word prompt (both decode from an empty context);
#   - prefill of 512 tokens: `llama-bench -p 512 -n 0` vs the prompt rate of `generate -n 2`;
#   - the 8-sequence decode step vs the 1-sequence step (engine_bench --conc 1,8);
#   - server load: 32 requests at concurrency 8 and 64 at concurrency 32 (128 prompt / 64 output
#     tokens) by `tokenserve bench` against `llama-server -np 8` and `tokenserve serve`.
# tokenserve figures are repeated for every ISA path the host can run (TOKENSERVE_ISA); the
# server load skips the scalar reference path unless --server-isa names it.
# --llama-isa avx2 builds llama.cpp without AVX-512/VNNI/AMX (a second build folder), so the
# AVX2 tier can be compared with llama.cpp's AVX2 path on a host that has more. --llama-isa avx512
# builds it with AVX-512 (VNNI, BF16, VBMI) and AVX-VNNI but without AMX: on the AMX host of
# 2026-12-03 (Sapphire Rapids class KVM guest) the native build's AMX Q8_0 kernel dies in every
# prefill (SIGILL on tileloadd with 1 thread, SIGSEGV with 2: its tile configuration never takes
# effect, cf. upstream PR ggml-org/llama.cpp#26954), so that build is the strongest llama.cpp
# that runs there. --llama-isa avxvnni builds it for AVX2 + AVX-VNNI (no AVX-512): what llama.cpp
# is on an Alder Lake-class CPU. --llama-isa matched compares every tokenserve tier with the
# llama.cpp build for the same instruction set (avx2 with avx2, avxvnni with avxvnni, the other
# tiers with native), as on a host whose best ISA is that tier, and reports the native build's
# figures beside them (each llama.cpp build is measured in the same run).
# Not part of the test command. Everything listens on 127.0.0.1 and is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TS=$ROOT/build/tokenserve
MODELS="qwen smollm"
THREADS=2
QUICK=0
SKIP_SERVER=0
ISAS=""
SERVER_ISAS=""
OUT=""
LLAMA_ISA=native
while [ $# -gt 0 ]; do
  case "$1" in
    --models) MODELS=$2; shift 2 ;;
    --isa) ISAS=$2; shift 2 ;;
    --server-isa) SERVER_ISAS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --skip-server) SKIP_SERVER=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    --llama-isa) LLAMA_ISA=$2; shift 2 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "compare_llamacpp: unknown argument $1" >&2; exit 2 ;;
  esac
done

CACHE=${TOKENSERVE_CACHE:-$HOME/.cache/tokenserve}
LLAMA_SRC=$CACHE/llama.cpp-node-llama-cpp-3.22.1
case "$LLAMA_ISA" in
  native|avx2|avxvnni|avx512|matched) ;;
  *) echo "compare_llamacpp: --llama-isa must be native, avx512, avxvnni, avx2 or matched" >&2; exit 2 ;;
esac
llama_build_dir() { [ "$1" = native ] && echo "$LLAMA_SRC/build" || echo "$LLAMA_SRC/build-$1"; }
# The llama.cpp build a tokenserve tier is compared with.
llama_for() {
  if [ "$LLAMA_ISA" != matched ]; then echo "$LLAMA_ISA"; return; fi
  case "$1" in avx2|avxvnni) echo "$1" ;; *) echo native ;; esac
}
OUT=${OUT:-$(mktemp -d /tmp/compare_llamacpp.XXXXXX)}
mkdir -p "$CACHE" "$OUT"
VOCAB=${TOKENSERVE_SHARED:-$ROOT/../shared}/models/llama.cpp-vocab
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

log() { echo "[compare] $*" >&2; }

# ---- tools --------------------------------------------------------------------------------
for c in cmake ninja git npm python3 curl; do
  command -v $c >/dev/null || { echo "compare_llamacpp: needs $c (apt-get install it)" >&2; exit 2; }
done
[ -x "$TS" ] || { echo "compare_llamacpp: build tokenserve first (scripts/setup.sh)" >&2; exit 2; }

if [ ! -d "$LLAMA_SRC/.git" ]; then
  log "fetching llama.cpp from node-llama-cpp@3.22.1's git bundle into $LLAMA_SRC"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent node-llama-cpp@3.22.1 >/dev/null && tar xzf node-llama-cpp-3.22.1.tgz package/llama/gitRelease.bundle)
  rm -rf "$LLAMA_SRC"
  git clone -q "$tmp/package/llama/gitRelease.bundle" "$LLAMA_SRC"
  rm -rf "$tmp"
fi
build_llama() {  # FLAVOR: builds llama-bench and llama-server into llama_build_dir FLAVOR once
  local dir; dir=$(llama_build_dir "$1")
  [ -x "$dir/bin/llama-bench" ] && [ -x "$dir/bin/llama-server" ] && return 0
  log "building llama.cpp ($1) into $dir"
  local common=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_TILE=OFF
                -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  case "$1" in
    avx2) isa_flags=("${common[@]}" -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF) ;;
    avxvnni) isa_flags=("${common[@]}" -DGGML_AVX512=OFF -DGGML_AVX_VNNI=ON -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF) ;;
    avx512) isa_flags=("${common[@]}" -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
                       -DGGML_AVX_VNNI=ON) ;;
    *) isa_flags=(-DGGML_NATIVE=ON) ;;
  esac
  cmake -S "$LLAMA_SRC" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${isa_flags[@]}" \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >/dev/null
  ninja -C "$dir" -j"$(nproc)" llama-bench llama-server >/dev/null
}
LLAMA_REV=$(git -C "$LLAMA_SRC" describe --tags --always 2>/dev/null || git -C "$LLAMA_SRC" rev-parse --short HEAD)

if [ -z "$ISAS" ]; then
  ISAS="scalar avx2"
  grep -qw avx512_vnni /proc/cpuinfo && ISAS="$ISAS avx512"
  grep -qw amx_tile /proc/cpuinfo && ISAS="$ISAS amx"
  grep -qw avx2 /proc/cpuinfo || ISAS="scalar"
  [ $QUICK = 1 ] && ISAS=$(echo "$ISAS" | awk '{print $NF}')
fi

# The server load runs the fast tiers only unless --server-isa names them: the scalar reference
# path serves ~5 t/s on a 0.5B model, so its 96 requests would take the better part of an hour.
if [ -z "$SERVER_ISAS" ]; then
  SERVER_ISAS=$(echo "$ISAS" | tr ' ' '\n' | grep -vx scalar | tr '\n' ' ' || true)
  [ -z "${SERVER_ISAS// /}" ] && SERVER_ISAS=$ISAS
fi

# The llama.cpp builds this run needs: one per distinct llama_for tier, and native beside them
# in matched mode (the strongest llama.cpp on this host stays in the report).
LLAMA_FLAVORS=""
for isa in $ISAS; do
  f=$(llama_for "$isa")
  case " $LLAMA_FLAVORS " in *" $f "*) ;; *) LLAMA_FLAVORS="$LLAMA_FLAVORS $f" ;; esac
done
if [ "$LLAMA_ISA" = matched ]; then
  case " $LLAMA_FLAVORS " in *" native "*) ;; *) LLAMA_FLAVORS="native$LLAMA_FLAVORS" ;; esac
fi
LLAMA_FLAVORS=${LLAMA_FLAVORS# }
for f in $LLAMA_FLAVORS; do build_llama "$f"; done

# ---- models -------------------------------------------------------------------------------
# qwen / smollm: Q8_0 weights throughout. qwen-q4km / smollm-q4km: the same shapes through
# `tokenserve quantize ... Q4_K_M` from F16, the mix users download for these models: rows of
# 896 or 576 columns are not whole 256-blocks, so most matrices fall back to Q5_0 (as in the
# published Qwen2.5-0.5B / SmolLM2-135M Q4_K_M files), the rest Q4_K / Q6_K, embeddings Q8_0.
# wide-*: a 1024-wide, 16-layer Llama-style shape (~0.3B parameters) whose every matrix has whole
# 256-value blocks, so the K-quant presets keep their own types throughout (Q5_K_M: Q5_K + Q6_K;
# Q3_K_M: Q3_K + Q4_K/Q5_K; Q2_K: Q2_K + Q3_K/Q4_K; IQ4_XS), as in the 1B-8B files users run;
# wide-f16 keeps the synthesized F16 weights; wide-q4_0, wide-q4_1, wide-q5_0, wide-q5_1,
# wide-q8_0 and wide-iq4nl the legacy 32-value presets (their own type throughout, the output
# matrix Q6_K as llama-quantize's rule has it).
wide_preset() {
  case "$1" in
    wide-q4km) echo Q4_K_M ;; wide-q5km) echo Q5_K_M ;; wide-q3km) echo Q3_K_M ;;
    wide-q2k) echo Q2_K ;; wide-iq4xs) echo IQ4_XS ;; wide-f16) echo F16 ;;
    wide-q4_0) echo Q4_0 ;; wide-q4_1) echo Q4_1 ;; wide-q5_0) echo Q5_0 ;; wide-q5_1) echo Q5_1 ;;
    wide-q8_0) echo Q8_0 ;; wide-iq4nl) echo IQ4_NL ;; *) return 1 ;;
  esac
}
model_file() {
  case "$1" in
    qwen) echo "$CACHE/qwen2.5-0.5b-shape-q8_0.gguf" ;;
    smollm) echo "$CACHE/smollm2-135m-shape-q8_0.gguf" ;;
    qwen-q4km) echo "$CACHE/qwen2.5-0.5b-shape-q4_k_m.gguf" ;;
    smollm-q4km) echo "$CACHE/smollm2-135m-shape-q4_k_m.gguf" ;;
    wide-*) wide_preset "$1" >/dev/null || { echo "compare_llamacpp: unknown model $1" >&2; exit 2; }
            echo "$CACHE/wide-1024-shape-$(wide_preset "$1").gguf" ;;
    *) echo "compare_llamacpp: unknown model $1 (qwen|smollm|qwen-q4km|smollm-q4km|wide-q4km|wide-q5km|wide-q3km|wide-q2k|wide-iq4xs|wide-f16|wide-q4_0|wide-q4_1|wide-q5_0|wide-q5_1|wide-q8_0|wide-iq4nl)" >&2; exit 2 ;;
  esac
}
synth_shape() {  # NAME TYPE OUT: the model shape NAME (qwen|smollm) with TYPE weights
  case "$1" in
    qwen) "$TS" synth --arch qwen2 --layers 24 --embd 896 --heads 14 --kv-heads 2 --ffn 4864 --tied \
            --rope-base 1000000 --vocab-from "$VOCAB/ggml-vocab-qwen2.gguf" --type "$2" -o "$3" >/dev/null ;;
    smollm) "$TS" synth --arch llama --layers 30 --embd 576 --heads 9 --kv-heads 3 --ffn 1536 --tied \
            --vocab-from "$VOCAB/ggml-vocab-starcoder.gguf" --type "$2" -o "$3" >/dev/null ;;
    wide) "$TS" synth --arch llama --layers 16 --embd 1024 --heads 16 --kv-heads 4 --ffn 4096 --tied \
            --vocab-from "$VOCAB/ggml-vocab-starcoder.gguf" --type "$2" -o "$3" >/dev/null ;;
  esac
}
make_model() {
  local f; f=$(model_file "$1")
  [ -f "$f" ] && return 0
  log "synthesizing $f"
  case "$1" in
    qwen | smollm) synth_shape "$1" q8_0 "$f" ;;
    wide-f16) synth_shape wide f16 "$f" ;;
    wide-*)
      synth_shape wide f16 "$f.f16.gguf"
      "$TS" quantize "$f.f16.gguf" "$f" "$(wide_preset "$1")" >/dev/null 2>&1
      rm -f "$f.f16.gguf" ;;
    *-q4km)
      synth_shape "${1%-q4km}" f16 "$f.f16.gguf"
      "$TS" quantize "$f.f16.gguf" "$f" Q4_K_M >/dev/null 2>&1
      rm -f "$f.f16.gguf" ;;
  esac
}

# A prompt of about N tokens for MODEL (word-sized pieces; the exact count is read back from
# each engine's own report).
make_prompt() {
  local model=$1 n=$2 words="" i
  local base="the quick brown fox jumps over the lazy dog while a small bird sings in the old tree"
  for i in $(seq 1 $(( n / 18 + 2 ))); do words="$words $base"; done
  # Trim to n tokens by the model's own tokenizer.
  python3 - "$TS" "$model" "$n" "$words" <<'EOF'
import subprocess, sys
ts, model, n, text = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
words = text.split()
lo, hi = 1, len(words)
def count(k):
    out = subprocess.run([ts, "tokenize", "-m", model, "--ids", "--no-bos", " ".join(words[:k])],
                         capture_output=True, text=True, check=True).stdout.split()
    return len(out)
while lo < hi:
    mid = (lo + hi + 1) // 2
    if count(mid) <= n - 1: lo = mid
    else: hi = mid - 1
print(" ".join(words[:lo]))
EOF
}

bandwidth() {  # "X GB/s (1 thread), Y GB/s (2 threads)", measured now by kernels_bench
  "$ROOT/build/bench/kernels_bench" --benchmark_filter='^$' 2>/dev/null | grep -m1 -o 'bandwidth: .*' | sed 's/^bandwidth: //'
}

bw_threads() {  # the probe's figure for $THREADS threads (kernels_bench probes 1 and 2; else its last)
  local x
  x=$(echo "$1" | grep -o "[0-9.]* GB/s ($THREADS threads\?)" | tail -n1 | cut -d' ' -f1)
  [ -n "$x" ] || x=$(echo "$1" | grep -o '[0-9.]* GB/s ([0-9]* threads\?)' | tail -n1 | cut -d' ' -f1)
  echo "$x"
}

llama_bench() {  # FLAVOR MODEL -p P -n N -> tokens/s ("nan" and a log line when llama-bench fails)
  local out rc=0
  out=$("$(llama_build_dir "$1")/bin/llama-bench" -m "$2" -t "$THREADS" "${@:3}" -r 3 -o json 2>/dev/null) || rc=$?
  if [ $rc -ne 0 ]; then
    log "llama-bench ($1) ${*:3} failed (exit $rc$([ $rc -gt 128 ] && echo ", signal $((rc - 128))")); try --llama-isa avx512 or avx2"
    echo nan; return 0
  fi
  echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.1f" % d[0]["avg_ts"])' 2>/dev/null || echo nan
}

ts_generate() {  # ISA MODEL PROMPT N -> "prompt_tps gen_tps prompt_tokens"
  # REPS runs, averaged like llama-bench's avg_ts over its -r 3 repetitions (a failed run voids
  # the figure rather than being left out).
  local out="" r
  for r in $(seq 1 "$REPS"); do
    out="$out
$(TOKENSERVE_ISA=$1 "$TS" generate -m "$2" -p "$3" -n "$4" --ignore-eos --temp 0 -t "$THREADS" 2>&1 >/dev/null | tail -n 3)"
  done
  echo "$out" | python3 -c '
import re, sys
runs = re.findall(r"prompt: (\d+) tokens, ([\d.]+) tokens/s; generation: (\d+) tokens, ([\d.]+) tokens/s", sys.stdin.read())
if len(runs) != int(sys.argv[1]): print("nan nan 0")
else: print(f"{sum(float(r[1]) for r in runs)/len(runs):.1f} {sum(float(r[3]) for r in runs)/len(runs):.1f} {runs[0][0]}")' "$REPS"
}

ts_step_ratio() {  # ISA MODEL -> "ms1 ms8 ratio"
  TOKENSERVE_ISA=$1 "$ROOT/build/bench/engine_bench" "$2" --threads "$THREADS" --prompt 128 --gen 64 --conc 1,8 2>&1 |
    python3 -c '
import re, sys
ms = {}
for line in sys.stdin:
    f = line.split()  # columns: conc, out tok/s, decode tok/s, step ms, ...
    if len(f) >= 4 and f[0].isdigit():
        ms[int(f[0])] = float(f[3])
if 1 in ms and 8 in ms: print(f"{ms[1]:.1f} {ms[8]:.1f} {ms[8]/ms[1]:.2f}")
else: print("nan nan nan")'
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {  # URL PID
  for _ in $(seq 1 600); do
    curl -sf -m 5 "$1" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

server_load() {  # URL MODEL_NAME CONC REQUESTS JSON -> "out_tps ttft_p95 tpot_p50"
  "$TS" bench --url "$1" --model "$2" --concurrency "$3" --requests "$4" --input-tokens 128 \
    --output-tokens 64 --timeout 900 -q --json "$5" >/dev/null 2>&1 || true
  python3 - "$5" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print("nan nan/nan nan"); sys.exit()
def find(obj, *keys):
    for k in keys:
        if isinstance(obj, dict) and k in obj: obj = obj[k]
        else: return float("nan")
    return obj
out = find(d, "throughput", "output_tokens_per_s")
ttft50 = find(d, "ttft_ms", "p50") / 1000.0
ttft = find(d, "ttft_ms", "p95") / 1000.0
tpot = find(d, "tpot_ms", "p50") / 1000.0
if find(d, "requests", "errors") not in (0, float("nan")): out = float("nan")  # errors void the figure
print(f"{out:.1f} {ttft50:.2f}/{ttft:.2f} {tpot*1000:.0f}")
EOF
}

# ---- run ----------------------------------------------------------------------------------
REPORT=$OUT/report.md
{
  echo "# tokenserve vs llama.cpp ($LLAMA_REV, $LLAMA_ISA: builds $LLAMA_FLAVORS), $(date -u +%FT%TZ)"
  echo
  echo "Host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, threads $THREADS; ISA paths: $ISAS"
  echo
} >"$REPORT"

GEN=128; PRE=512; REPS=3
[ $QUICK = 1 ] && { GEN=32; PRE=128; REPS=1; }

for name in $MODELS; do
  make_model "$name"
  M=$(model_file "$name")
  wbytes=$(stat -c %s "$M")
  bw=$(bandwidth)
  log "$name: bandwidth $bw"
  bw2=$(bw_threads "$bw")
  bound=$(python3 -c "print(f'{${bw2:-0}*1e9/$wbytes:.1f}')")
  prompt=$(make_prompt "$M" $PRE)
  declare -A LL_DEC=() LL_PRE=()
  for f in $LLAMA_FLAVORS; do
    LL_DEC[$f]=$(llama_bench "$f" "$M" -p 0 -n $GEN)
    LL_PRE[$f]=$(llama_bench "$f" "$M" -p $PRE -n 0)
  done
  ll_cell() {  # the llama.cpp column: "X" for one build, "native X; avx2 Y" for several
    local f out=""
    if [ "$(echo $LLAMA_FLAVORS | wc -w)" = 1 ]; then echo "$2"; return; fi
    for f in $LLAMA_FLAVORS; do out="$out${out:+; }$f $(eval echo "\${$1[$f]}")"; done
    echo "$out"
  }
  {
    echo "## $name ($(basename "$M"), $((wbytes / 1048576)) MiB file)"
    echo
    echo "Read bandwidth (kernels_bench, these minutes): $bw; batch-1 decode bound (bandwidth ÷ file bytes): $bound t/s."
    echo "Each tier's \"of bound\" uses the higher of two probes taken just before and just after its decode runs (the"
    echo "host's bandwidth swings with its neighbours; the higher probe gives the stricter bound). tokenserve figures are"
    echo "the mean of $REPS runs, as llama-bench's are of its 3 repetitions."
    echo
    echo "| measure | llama.cpp | tokenserve ($ISAS) |"
    echo "|---|---|---|"
  } >>"$REPORT"
  first=${LLAMA_FLAVORS%% *}
  dec_row="| decode batch 1, t/s | $(ll_cell LL_DEC "${LL_DEC[$first]}") |"
  pre_row="| prefill $PRE tokens, t/s | $(ll_cell LL_PRE "${LL_PRE[$first]}") |"
  step_row="| 8-seq step / 1-seq step | — |"
  for isa in $ISAS; do
    bw_a=$(bw_threads "$(bandwidth)")
    # Decode from a one-word prompt, as llama-bench's tg test decodes from an empty context (until
    # stop 27 the 512-token prompt was used here too, so tokenserve decoded at 512-640 positions
    # of context against llama.cpp's 0-128); prefill is the prompt rate of a 2-token generation.
    read -r _ g_tps _ <<<"$(ts_generate "$isa" "$M" "hello" $GEN)"
    bw_b=$(bw_threads "$(bandwidth)")
    ibound=$(python3 -c "print(f'{max(${bw_a:-0}, ${bw_b:-0})*1e9/$wbytes:.1f}')")
    log "$name/$isa: bandwidth around decode $bw_a / $bw_b GB/s, bound $ibound t/s"
    read -r p_tps _ p_n <<<"$(ts_generate "$isa" "$M" "$prompt" 2)"
    read -r ms1 ms8 ratio <<<"$(ts_step_ratio "$isa" "$M")"
    lf=$(llama_for "$isa")
    ll_dec=${LL_DEC[$lf]}; ll_pre=${LL_PRE[$lf]}; vs=""
    [ "$(echo $LLAMA_FLAVORS | wc -w)" = 1 ] || vs=" $lf"
    dec_row="$dec_row $isa: $g_tps ($(python3 -c "print(f'{$g_tps/$ll_dec:.2f}× llama.cpp$vs, {$g_tps/$ibound:.2f} of bound {$ibound}')" 2>/dev/null || echo nan));"
    pre_row="$pre_row $isa: $p_tps for $p_n tokens ($(python3 -c "print(f'{$p_tps/$ll_pre:.2f}')" 2>/dev/null || echo nan)×$vs"
    if [ "$lf" != native ] && [ -n "${LL_PRE[native]:-}" ]; then
      pre_row="$pre_row, $(python3 -c "print(f'{$p_tps/${LL_PRE[native]}:.2f}')" 2>/dev/null || echo nan)× native"
    fi
    pre_row="$pre_row);"
    step_row="$step_row $isa: $ms1 → $ms8 ms ($ratio×);"
    log "$name/$isa: decode $g_tps, prefill $p_tps, step $ratio"
  done
  { echo "$dec_row"; echo "$pre_row"; echo "$step_row"; echo; } >>"$REPORT"

  if [ $SKIP_SERVER = 0 ]; then
    reqs8=32; reqs32=64; [ $QUICK = 1 ] && { reqs8=8; reqs32=16; }
    declare -A L8O=() L8T=() L8P=() L32O=() L32T=() L32P=()
    server_flavors=""
    for isa in $SERVER_ISAS; do
      f=$(llama_for "$isa")
      case " $server_flavors " in *" $f "*) ;; *) server_flavors="$server_flavors $f" ;; esac
    done
    [ "$LLAMA_ISA" = matched ] && case " $server_flavors " in *" native "*) ;; *) server_flavors="native$server_flavors" ;; esac
    for f in $server_flavors; do
      port=$(free_port)
      "$(llama_build_dir "$f")/bin/llama-server" -m "$M" -t "$THREADS" -np 8 -c $((8 * 512)) --host 127.0.0.1 --port "$port" \
        >"$OUT/llama-server-$name-$f.log" 2>&1 &
      lpid=$!; PIDS+=("$lpid")
      if wait_http "http://127.0.0.1:$port/health" "$lpid"; then
        read -r "L8O[$f]" "L8T[$f]" "L8P[$f]" <<<"$(server_load "http://127.0.0.1:$port" "$name" 8 $reqs8 "$OUT/llama-$name-$f-c8.json")"
        read -r "L32O[$f]" "L32T[$f]" "L32P[$f]" <<<"$(server_load "http://127.0.0.1:$port" "$name" 32 $reqs32 "$OUT/llama-$name-$f-c32.json")"
      else
        L8O[$f]=nan; L8T[$f]=nan/nan; L8P[$f]=nan; L32O[$f]=nan; L32T[$f]=nan/nan; L32P[$f]=nan
      fi
      kill "$lpid" 2>/dev/null || true; wait "$lpid" 2>/dev/null || true
    done
    {
      echo "| server load (128 in / 64 out) | llama-server -np 8: out t/s, TTFT p50/p95 s, TPOT p50 ms | tokenserve serve (ratios: out t/s, TTFT p95) |"
      echo "|---|---|---|"
    } >>"$REPORT"
    c8=""; c32=""
    for f in $server_flavors; do
      p=""; [ "$(echo $server_flavors | wc -w)" = 1 ] || p="$f "
      c8="$c8${c8:+; }$p${L8O[$f]}, ${L8T[$f]}, ${L8P[$f]}"
      c32="$c32${c32:+; }$p${L32O[$f]}, ${L32T[$f]}, ${L32P[$f]}"
    done
    row8="| 32 req @ conc 8 | $c8 |"
    row32="| 64 req @ conc 32 | $c32 |"
    for isa in $SERVER_ISAS; do
      port=$(free_port)
      TOKENSERVE_ISA=$isa "$TS" serve -m "$M" --no-auth --threads "$THREADS" --host 127.0.0.1 --port "$port" \
        --model-name "$name" --ledger "$OUT/ledger-$name-$isa.db" >"$OUT/tokenserve-$name-$isa.log" 2>&1 &
      tpid=$!; PIDS+=("$tpid")
      if wait_http "http://127.0.0.1:$port/ready" "$tpid"; then
        read -r t8o t8t t8p <<<"$(server_load "http://127.0.0.1:$port" "$name" 8 $reqs8 "$OUT/ts-$name-$isa-c8.json")"
        read -r t32o t32t t32p <<<"$(server_load "http://127.0.0.1:$port" "$name" 32 $reqs32 "$OUT/ts-$name-$isa-c32.json")"
      else
        t8o=nan; t8t=nan/nan; t8p=nan; t32o=nan; t32t=nan/nan; t32p=nan
      fi
      kill -TERM "$tpid" 2>/dev/null || true; wait "$tpid" 2>/dev/null || true
      lf=$(llama_for "$isa"); vs=""
      [ "$(echo $server_flavors | wc -w)" = 1 ] || vs=" vs $lf"
      l8o=${L8O[$lf]}; l8t=${L8T[$lf]}; l32o=${L32O[$lf]}; l32t=${L32T[$lf]}
      r8=$(python3 -c "print(f'{$t8o/$l8o:.2f}')" 2>/dev/null || echo nan)
      r32=$(python3 -c "print(f'{$t32o/$l32o:.2f}')" 2>/dev/null || echo nan)
      q8=$(python3 -c "print(f'{${t8t#*/}/${l8t#*/}:.2f}')" 2>/dev/null || echo nan)
      q32=$(python3 -c "print(f'{${t32t#*/}/${l32t#*/}:.2f}')" 2>/dev/null || echo nan)
      row8="$row8 $isa: $t8o, $t8t, $t8p (out ×$r8, TTFT p95 ×$q8$vs);"
      row32="$row32 $isa: $t32o, $t32t, $t32p (out ×$r32, TTFT p95 ×$q32$vs);"
    done
    { echo "$row8"; echo "$row32"; echo; } >>"$REPORT"
  fi
done
cat "$REPORT"
echo "(files in $OUT)" >&2
