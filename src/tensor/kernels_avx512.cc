// AVX-512 (F/BW/VL/DQ + VNNI) kernels. 512-bit float kernels and the Q8_0_R16 kernel are
// written here; the K-quant and plain Q8_0/Q4_0 kernels are the shared 256-bit ones compiled
// with VNNI (vpdpbusd / vpdpwssd). Reached through avx512_kernels() after a CPUID check.
#include <immintrin.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/quants.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
// -O3 so the small fixed-trip tile loops are fully unrolled early enough for their vector
// accumulator arrays to live in registers (at -O2 they stay on the stack).
#pragma GCC optimize("O3")
// GCC 12's AVX-512 intrinsic headers start some results from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports once inlined here (false positives in the system headers).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ts::tensor::kern {
namespace {

inline __m256i mul_sum_us8(__m256i u8, __m256i s8) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u8, s8);
}

inline __m256i madd_acc16(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }

#include "tensor/kernels_x86_impl.h"
constexpr int kKTileMax = 8;  // kernels_x86_more.h for_ktoken_tiles
#include "tensor/kernels_x86_more.h"

inline __m512i bcast_dword(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// ---- 512-bit F32 / F16 / BF16 ----------------------------------------------------------------

struct Z32 {
  static constexpr int64_t kBytes = 4;
  static __m512 load(const uint8_t* p, int64_t k) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p) + k); }
  static __m512 load_tail(const uint8_t* p, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p) + k);
  }
};
struct Z16 {
  static constexpr int64_t kBytes = 2;
  static __m512 load(const uint8_t* p, int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * k)));
  }
  static __m512 load_tail(const uint8_t* p, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * k));
  }
};
struct ZB16 {
  static constexpr int64_t kBytes = 2;
  static __m512 load(const uint8_t* p, int64_t k) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * k)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static __m512 load_tail(const uint8_t* p, int64_t k, __mmask16 m) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p + 2 * k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
};

template <typename L, int R, int T>
inline void zfloat_tile(const GemmArgs& g, int64_t r0, int64_t t0) {
  const Act& a = *g.act;
  const int64_t cols = a.cols;
  const uint8_t* w[R];
  const float* x[T];
  for (int r = 0; r < R; ++r) w[r] = g.w + static_cast<size_t>(r0 + r) * g.stride;
  for (int t = 0; t < T; ++t) x[t] = a.xf + (t0 + t) * cols;
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const auto step = [&](int64_t kk) {
    __m512 xv[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(x[t] + kk);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 wv = L::load(w[r], kk);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  };
  int64_t k = 0;
  if (T <= 2 && g.sw_prefetch) {
    // Decode batches: each row's stream prefetched float_prefetch_ahead bytes ahead, one line a step.
    const int64_t pf_ahead = float_prefetch_ahead(g.stride, R);
    constexpr int64_t kLine = 64 / L::kBytes;  // values per 64-byte line
    for (; k + kLine <= cols; k += kLine) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(w[r] + k * L::kBytes) + pf_ahead, _MM_HINT_T0);
#pragma GCC unroll 4
      for (int64_t kk = k; kk < k + kLine; kk += 16) step(kk);
    }
  }
  for (; k + 16 <= cols; k += 16) step(k);
  if (k < cols) {
    const __mmask16 m = static_cast<__mmask16>((1u << (cols - k)) - 1);
    __m512 xv[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x[t] + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 wv = L::load_tail(w[r], k, m);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.ldy + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

template <typename L>
void zgemm_float(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok;
  int64_t r = 0;
  // 4 rows a tile; batches in tiles of 6 tokens (24 accumulators, each converted weight vector
  // reused by 6 FMAs), then 4..1. A row's sums do not depend on the tile.
  for (; r + 4 <= g.num_rows; r += 4) {
    int64_t t0 = 0;
    for (; t0 + 6 <= n_tok; t0 += 6) zfloat_tile<L, 4, 6>(g, r, t0);
    if (n_tok - t0 == 5) {
      zfloat_tile<L, 4, 5>(g, r, t0);
      continue;
    }
    for_token_tiles(n_tok - t0, [&]<int T>(int64_t t1) { zfloat_tile<L, 4, T>(g, r, t0 + t1); });
  }
  for (; r < g.num_rows; ++r) {
    for_token_tiles(n_tok, [&]<int T>(int64_t t0) { zfloat_tile<L, 1, T>(g, r, t0); });
  }
}

// ---- Q8_0_R16: one zmm = 4 k-values of 16 rows; vpdpbusd with a broadcast activation dword --

// Software prefetch distance of the batched R16 kernels: every line of each block, this far
// ahead in the group's stream (one line per block left most of the stream to the hardware
// prefetcher, and a batch-8 matmul took ~1.5x the batch-1 time; with all lines ~1x).
constexpr int kR16PrefetchBytes = 4096;

// The Q8_0_R16 x interleaved-activation kernel (r16_il_tile) prefetches every line of each block
// this far ahead into L2 (prefetcht1), not L1. Measured on a Sapphire Rapids-class KVM guest
// (kernels_bench BM_MatmulOp, Qwen/SmolLM2 op shapes, same process): against 4096 B with
// prefetcht0, 2-4 token matmuls went from 0.60-0.80 to 0.80-0.98 of the streaming bandwidth
// (e.g. 9728x896 at 4 tokens, 1 thread: 977 -> 753 us), 1 token 0.83-0.89 -> 0.93-1.0, 8 tokens
// unchanged (~0.70: vpdpbusd-bound, see BM_MatmulL2). prefetcht1 at 1024/4096/8192/16384 B and
// prefetcht0 at 0/2048/8192 B were each no better.
constexpr int kR16IlPrefetchBytes = 2048;
// From this many tokens Q8_0_R16 over interleaved activations runs whole pairs of groups
// through r16_il_pair (1 thread, L2-resident 1024x896, CPU time, Zen 5 KVM: 128 tokens 261/263
// -> 287/284 GMAC/s, 8 tokens 260/259 -> 272/272). Decode-sized batches keep r16_il_tile: its
// streaming from DRAM (one group's lines prefetched at a time) was not re-measured, the shared
// host gave no stable bandwidth figure that session.
constexpr int64_t kR16IlPairMinTokens = 16;
static_assert(kQ4IlMinTokens >= kR16IlPairMinTokens, "Q4_0_R16's Act::q8_il must reach its pair passes");

std::atomic<bool> g_r16_pair_tile{true};  // set_r16_pair_tile

// Decode-sized batches (kR16IlPairTileMinTokens..kActIlTile tokens) of matrices with at least
// kR16IlPairTileMinBlocks 32-column blocks run whole pairs of groups through r16_il_pair_tile
// (one pass, each activation broadcast shared by 32 rows). Measured on Zen 5 (kernels_bench
// BM_PairTileAB: both kernels alternated in one process, weights streamed from DRAM): Qwen2.5-0.5B's
// down projection (896 x 4864) took x0.73-0.87 the r16_il_tile time at 5 and 8 tokens with 2
// threads (x0.91-1.02 in a minute when the host's bandwidth fell to ~30 GB/s), x0.79-0.83 with 1;
// engine_bench's 8-sequence Qwen step 17.6-18.1 -> 16.6-17.3 ms (6 runs alternated, 1-sequence
// step unchanged). At 1536 columns (SmolLM2's down) x0.86 at 5 tokens but x1.03-1.05 at 8, at
// 576-896 columns x1.04-1.15: there the 8-token activation tile (40 bytes per 32 columns per
// token) stays in L1 for the next group anyway, and r16_il_tile has no accumulator stores.
constexpr int64_t kR16IlPairTileMinBlocks = 104;  // 3328 columns: an 8-token tile of ~32 KB
constexpr int64_t kR16IlPairTileMinTokens = 5;

// Every line of the K-quant R16 block record kR16KPrefetchBytes ahead of `rec` (the record being
// computed), at every batch size: with one line per record, or none below 2-4 tokens, 1-3 token
// Q4_K/Q6_K matmuls streamed from DRAM at ~2/3 of the rate the 4-token ones reached. The
// register tiles request the same lines spread through each block step instead (TilePrefetch).
constexpr int kR16KPrefetchBytes = 8192;
template <size_t kBytes>
inline void prefetch_record(const uint8_t* rec) {
  const char* p = reinterpret_cast<const char*>(rec) + kR16KPrefetchBytes;
#pragma GCC unroll 64
  for (size_t o = 0; o < kBytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

// The K-quant register tiles' prefetch (Q4_K_R16 / Q5_K_R16, Q6_K_R16 and its kinds, IQ4_XS_R16),
// handed to the tile as the lines of each block step, which it issues through the step's inner
// loop (LinePrefetch): with one pass over its 16-row group (Q4_K / Q5_K: up to 8 tokens, the
// others as before) the record kR16KPrefetchBytes ahead; with several (Q4_K / Q5_K 9-31 tokens),
// the next group spread over every block step of every pass (PrefetchSpread), as the panels do:
// a lookahead that runs into the group's own cached lines in the later passes left DRAM idle.
// The record's lines requested all at once at the block's start (prefetch_record) left the
// stream no faster than the sum of its memory and compute times once the tile computed for 5-8
// tokens, and slowed even 1-token decode: BM_Matmul 2 threads, streamed, 4864x1024 / 1024x4864,
// min of 4-6 alternated rounds, us, before -> after: 1 token Q4_K 56 / 58 -> 47 / 45, Q5_K
// 85 / 77 -> 61 / 56, Q6_K 89 / 75 -> 70 / 66, IQ4_XS 56 / 62 -> 43 / 45 (Q3_K 62 / 41 -> 55 / 46);
// 8 tokens (Q4_K / Q5_K now one pass, q4k_r16_tile) Q4_K 104 / 117 -> 89 / 87, Q5_K 118 / 123 -> 99 / 92.
struct TilePrefetch {
  PrefetchSpread* spread = nullptr;  // null: one pass, the record kR16KPrefetchBytes ahead
  template <size_t kBytes>
  LinePrefetch lines(const GemmArgs& g, const uint8_t* rec) const {
    if (spread != nullptr) return spread->take<LinePrefetch>();
    if (!g.sw_prefetch) return {};
    return {reinterpret_cast<const char*>(rec) + kR16KPrefetchBytes, static_cast<int>(kBytes / 64)};
  }
};

// Runs pass(tp) over each 16-row group of the matmul, `passes` passes a group: with more than
// one, tp spreads the next group's prefetch over them.
template <typename F>
inline void for_r16_groups_passes(const GemmArgs& g, int64_t passes, F&& pass) {
  const int64_t nb = g.act->cols / kQK_K;
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    if (passes <= 1) return pass(grp, lane0, lane1, out_r, TilePrefetch{});
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, passes * nb);
    pass(grp, lane0, lane1, out_r, TilePrefetch{&pf});
  });
}

// The IQ4_NL table values + 128 (1..241) in every 128-bit lane, for vpshufb by nibble.
inline __m512i iq4nl_table128_512() {
  return _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues))),
                          _mm512_set1_epi8(static_cast<char>(0x80)));
}

// What the nibbles of the Q4_0_R16-shaped kernels (kQ4) are: kNibPlain Q4_0_R16 (stored u8 = w +
// 8), kNibTable IQ4_NL_R16 (each nibble looked up as its table value + 128), kNibQ5 Q5_0_R16 (the
// nibble with the record's 5th bit as bit 4: u8 = w + 16; records of kR16Q5PairBytes).
enum NibKind : int { kNibPlain = 0, kNibTable = 1, kNibQ5 = 2 };

// The u8 values 4*k4 .. 4*k4 + 3 of 16 rows from a Q4_0_R16-shaped line `v` (k4 < 4: its low
// nibbles; else its high ones, values 16 + 4*(k4 - 4) = 4*k4..); kNibQ5: `planes` is the block's
// 5th-bit line (bit k4 of byte (row, j) is value 4*k4 + j's), moved to bit 4 (a 16-bit shift keeps
// each byte's bit 4 inside its byte for shifts up to 4) and or'ed in.
template <int kNib>
__attribute__((always_inline)) inline __m512i q4_line_values(__m512i v, int k4, __m512i planes) {
  __m512i w = _mm512_and_si512(k4 < 4 ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(0xF));
  if constexpr (kNib == kNibTable) w = _mm512_shuffle_epi8(iq4nl_table128_512(), w);
  if constexpr (kNib == kNibQ5) {
    const __m512i at4 = k4 < 4   ? _mm512_slli_epi16(planes, 4 - k4)
                        : k4 > 4 ? _mm512_srli_epi16(planes, k4 - 4)
                                 : planes;
    w = _mm512_ternarylogic_epi32(w, at4, _mm512_set1_epi8(0x10), 0xF8);  // w | (at4 & 0x10)
  }
  return w;
}
template <bool kQ4, int kNib>
constexpr size_t r16_rec_bytes() {
  return !kQ4 ? kR16PairBytes : kNib == kNibQ5 ? kR16Q5PairBytes : kR16Q4PairBytes;
}

// A tile's accumulators (acc[t]: one 16-row group, token t0 + t) -> y[t0 + t][out_r + lane -
// lane0] for the group's rows [lane0, lane1).
// Always inlined: a call would take the tile's accumulators' address and keep them in memory.
__attribute__((always_inline)) inline void store_group512(const GemmArgs& g, const __m512* acc, int n_tok, int64_t t0,
                                                          int lane0, int lane1, int64_t out_r) {
  if (lane0 == 0 && lane1 == 16) {
    for (int t = 0; t < n_tok; ++t) _mm512_storeu_ps(g.y + (t0 + t) * g.ldy + out_r, acc[t]);
    return;
  }
  for (int t = 0; t < n_tok; ++t) {
    alignas(64) float out[16];
    _mm512_store_ps(out, acc[t]);
    for (int l = lane0; l < lane1; ++l) g.y[(t0 + t) * g.ldy + out_r + (l - lane0)] = out[l];
  }
}

// Rows [lane0, lane1) of one 16-row group for tokens [t0, t0 + T), written to
// y[t][out_r + lane - lane0].
// kBias: the stored u8 is w + kBias (128 for Q8_0, 8 for Q4_0 panels). kQ4: Q4_0_R16-shaped
// records (nibbles; one zmm feeds two k4 groups) instead of the Q8_0_R16 layout, their nibbles
// of kind kNib (IQ4_NL_R16 with kBias 128, Q5_0_R16 with kBias 16).
template <int T, int kBias, bool kQ4 = false, bool kPf = true, int kNib = kNibPlain>
inline void r16_tile(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  // Independent dpbusd chains per token: at small T a single chain would be latency-bound.
  constexpr int kChains = T <= 2 ? 4 : (T <= 4 ? 2 : 1);
  const int8_t* xq[T];
  const float* xd[T];
  const int32_t* xs[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.q8 + (t0 + t) * a.cols;
    xd[t] = a.d8 + (t0 + t) * nb;
    xs[t] = a.s8 + (t0 + t) * nb;
  }
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * r16_rec_bytes<kQ4, kNib>();
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * (kQ4 ? 256 : 512);
    const uint8_t* planes_line = rec + kR16Q4PairBytes + half * 64;  // kNibQ5 only
    if constexpr (kPf) {
      // Every line of the block's values (the scales line with the first half), as in r16_il_tile.
      constexpr int kLines = kQ4 ? 4 : 8;
      const char* pf = reinterpret_cast<const char*>(vals) + kR16PrefetchBytes;
#pragma GCC unroll 8
      for (int l = 0; l < kLines; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
      if (half == 0) _mm_prefetch(reinterpret_cast<const char*>(rec) + kR16PrefetchBytes, _MM_HINT_T0);
      if constexpr (kNib == kNibQ5) {
        _mm_prefetch(reinterpret_cast<const char*>(planes_line) + kR16PrefetchBytes, _MM_HINT_T0);
      }
    }
    __m512i planes = _mm512_setzero_si512();
    if constexpr (kNib == kNibQ5) planes = _mm512_load_si512(reinterpret_cast<const __m512i*>(planes_line));
    __m512i isum[kChains][T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      // Stored values are w + kBias: subtract kBias * sum(x) up front.
      isum[0][t] = _mm512_set1_epi32(-kBias * xs[t][b]);
#pragma GCC unroll 4
      for (int c = 1; c < kChains; ++c) isum[c][t] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      __m512i w;
      if constexpr (kQ4) {
        // The activation index is 4*k4 for the low and the high nibbles alike (q4_line_values).
        w = q4_line_values<kNib>(_mm512_load_si512(reinterpret_cast<const __m512i*>(vals + 64 * (k4 % 4))), k4, planes);
      } else {
        w = _mm512_load_si512(reinterpret_cast<const __m512i*>(vals + 64 * k4));
      }
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        int32_t x4;
        __builtin_memcpy(&x4, xq[t] + b * 32 + 4 * k4, 4);
        isum[k4 % kChains][t] = _mm512_dpbusd_epi32(isum[k4 % kChains][t], w, _mm512_set1_epi32(x4));
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + half * 32)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      __m512i s = isum[0][t];
#pragma GCC unroll 4
      for (int c = 1; c < kChains; ++c) s = _mm512_add_epi32(s, isum[c][t]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xd[t][b])), acc[t]);
    }
  }
  store_group512(g, acc, T, t0, lane0, lane1, out_r);
}

// Q8_0_R16 x interleaved activations (Act::q8_il), tokens [t0, t0 + T) with t0 a multiple of
// kActIlTile: one base pointer for the tile's activations, so every broadcast is an embedded
// {1to16} operand of vpdpbusd, and the bias / scale terms are broadcast loads.
template <int T, bool kPf>
inline void r16_il_tile(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const uint8_t* xa = a.q8_il + static_cast<size_t>(t0 / kActIlTile) * static_cast<size_t>(nb) * kActIlBlockBytes;
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, xa += kActIlBlockBytes) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * kR16PairBytes;
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * 512;
    if constexpr (kPf) {
      // Every line of the block (8 value lines, and the scale line with the first half), into L2.
      const char* pf = reinterpret_cast<const char*>(vals) + kR16IlPrefetchBytes;
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T1);
      if (half == 0) _mm_prefetch(reinterpret_cast<const char*>(rec) + kR16IlPrefetchBytes, _MM_HINT_T1);
    }
    __m512i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = bcast_dword(xa + kActIlTile * 32 + 4 * t);
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m512i w = _mm512_load_si512(reinterpret_cast<const __m512i*>(vals + 64 * k4));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) isum[t] = _mm512_dpbusd_epi32(isum[t], w, bcast_dword(xa + 32 * t + 4 * k4));
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + half * 32)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      float xd;
      __builtin_memcpy(&xd, xa + kActIlTile * 36 + 4 * t, 4);
      // isum = kActIlBias0 + S: as float 1.5 * 2^23 + S exactly; the subtraction gives S (what
      // vcvtdq2ps would, but on either FMA port instead of only the one vpdpbusd also needs).
      const __m512 sf = _mm512_sub_ps(_mm512_castsi512_ps(isum[t]), _mm512_set1_ps(kActIlBias0F));
      acc[t] = _mm512_fmadd_ps(sf, _mm512_mul_ps(dw, _mm512_set1_ps(xd)), acc[t]);
    }
  }
  store_group512(g, acc, T, t0, lane0, lane1, out_r);
}

#include "tensor/kernels_avx512_pair.h"

template <bool kPf>
void r16_il_group_pf(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
  const int64_t n_tok = g.act->n_tok;
  int64_t t0 = 0;
  for (; t0 + 8 <= n_tok; t0 += 8) r16_il_tile<8, kPf>(g, grp, lane0, lane1, out_r, t0);
  switch (n_tok - t0) {
    case 7: r16_il_tile<7, kPf>(g, grp, lane0, lane1, out_r, t0); break;
    case 6: r16_il_tile<6, kPf>(g, grp, lane0, lane1, out_r, t0); break;
    case 5: r16_il_tile<5, kPf>(g, grp, lane0, lane1, out_r, t0); break;
    case 4: r16_il_tile<4, kPf>(g, grp, lane0, lane1, out_r, t0); break;
    case 3: r16_il_tile<3, kPf>(g, grp, lane0, lane1, out_r, t0); break;
    case 2: r16_il_tile<2, kPf>(g, grp, lane0, lane1, out_r, t0); break;
    case 1: r16_il_tile<1, kPf>(g, grp, lane0, lane1, out_r, t0); break;
    default: break;
  }
}

// GemmArgs::sw_prefetch picks the variant (off: no prefetch instructions in the loop at all).
void r16_il_group(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
  if (g.sw_prefetch) {
    r16_il_group_pf<true>(g, grp, lane0, lane1, out_r);
  } else {
    r16_il_group_pf<false>(g, grp, lane0, lane1, out_r);
  }
}

template <int kBias, bool kQ4, bool kPf, int kNib>
void r16_group_pf(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
  const int64_t n_tok = g.act->n_tok;
  int64_t t0 = 0;
  for (; t0 + 8 <= n_tok; t0 += 8) r16_tile<8, kBias, kQ4, kPf, kNib>(g, grp, lane0, lane1, out_r, t0);
  switch (n_tok - t0) {
    case 7: r16_tile<7, kBias, kQ4, kPf, kNib>(g, grp, lane0, lane1, out_r, t0); break;
    case 6: r16_tile<6, kBias, kQ4, kPf, kNib>(g, grp, lane0, lane1, out_r, t0); break;
    case 5: r16_tile<5, kBias, kQ4, kPf, kNib>(g, grp, lane0, lane1, out_r, t0); break;
    case 4: r16_tile<4, kBias, kQ4, kPf, kNib>(g, grp, lane0, lane1, out_r, t0); break;
    case 3: r16_tile<3, kBias, kQ4, kPf, kNib>(g, grp, lane0, lane1, out_r, t0); break;
    case 2: r16_tile<2, kBias, kQ4, kPf, kNib>(g, grp, lane0, lane1, out_r, t0); break;
    case 1: r16_tile<1, kBias, kQ4, kPf, kNib>(g, grp, lane0, lane1, out_r, t0); break;
    default: break;
  }
}

// Lanes [lane0, lane1) of one R16-format group, all tokens, into y[t][out_r + lane - lane0].
template <int kBias, bool kQ4 = false, int kNib = kNibPlain>
void r16_group(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
  if (g.sw_prefetch) {
    r16_group_pf<kBias, kQ4, true, kNib>(g, grp, lane0, lane1, out_r);
  } else {
    r16_group_pf<kBias, kQ4, false, kNib>(g, grp, lane0, lane1, out_r);
  }
}

template <int kBias, bool kQ4, int kNib = kNibPlain>
void gemm_r16_groups(const GemmArgs& g) {
  int64_t done = 0;
  const uint8_t* grp = g.w;
  int lane0 = static_cast<int>(g.row0);
  // Decode-sized batches of wide matrices: whole pairs of groups through r16_il_pair_small.
  const bool pair_small = !kQ4 && g.act->q8_il != nullptr && g.act->n_tok >= kR16IlPairTileMinTokens &&
                          g.act->n_tok <= kActIlTile && g.act->cols / 32 >= kR16IlPairTileMinBlocks &&
                          g_r16_pair_tile.load(std::memory_order_relaxed);
  while (done < g.num_rows) {
    const int64_t left = g.num_rows - done;
    const int lane1 = left < 16 - lane0 ? lane0 + static_cast<int>(left) : 16;
    if (pair_small && lane0 == 0 && left >= 32) {
      if (g.sw_prefetch) {
        r16_il_pair_small<true>(g, grp, done);
      } else {
        r16_il_pair_small<false>(g, grp, done);
      }
      done += 32;
      grp += 2 * g.stride;
      continue;
    }
    if (g.act->q8_il != nullptr && g.act->n_tok >= kR16IlPairMinTokens && lane0 == 0 && left >= 32) {
      r16_il_pair<kQ4, kNib>(g, grp, done);  // two whole groups
      done += 32;
      grp += 2 * g.stride;
      continue;
    }
    if (!kQ4 && g.act->q8_il != nullptr) {
      r16_il_group(g, grp, lane0, lane1, done);
    } else {
      r16_group<kBias, kQ4, kNib>(g, grp, lane0, lane1, done);
    }
    done += lane1 - lane0;
    lane0 = 0;
    grp += g.stride;
  }
}

void gemm_q8_0_r16(const GemmArgs& g) { gemm_r16_groups<128, false>(g); }
void gemm_q4_0_r16(const GemmArgs& g) { gemm_r16_groups<8, true>(g); }
// IQ4_NL_R16 in llama.cpp's x86 order (kernels_scalar.cc gemm_iq4_nl): the Q4_0_R16 kernels (the
// same bytes) with every nibble looked up as its table value + 128 against -128 * sum(x), the
// Q8_0_R16 term: exact block sums, one FMA a block, the same bits as the scalar reference.
void gemm_iq4_nl_r16(const GemmArgs& g) { gemm_r16_groups<128, true, kNibTable>(g); }
// Q5_0_R16 in the block order (GemmArgs::q5_block, matrix.h Q50Order::kBlock; the scalar
// reference's gemm_q5_0 in that mode: exact block sums, one FMA a block): the Q4_0_R16 kernels over
// its records with each value's 5th bit or'ed in, the stored u8 w + 16 against -16 * sum(x), the
// same bits as the scalar reference. (The default, ggml's order: gemm_q5_0_r16 in
// kernels_avx512_more.h.)
void gemm_q5_0_r16_block(const GemmArgs& g) { gemm_r16_groups<16, true, kNibQ5>(g); }

#include "tensor/kernels_avx512_kquant.h"

#include "tensor/kernels_avx512_plain_panels.h"

#include "tensor/kernels_avx512_lanepanels.h"
#include "tensor/kernels_avx512_rowpairs.h"
#include "tensor/kernels_avx512_more.h"
#include "tensor/kernels_avx512_r16panels.h"
#include "tensor/kernels_avx512_kr16.h"

// Vector traits of kernels_float_r16.h: a 16-row column in one zmm.
struct FloatR16Zmm {
  using Vec = __m512;
  static constexpr int kParts = 1;
  static constexpr int kDecodeGroups = 4;  // 4 streams, 4 FMA chains per token
  static constexpr int kBatchGroups = 3;
  static constexpr int kBatchTokens = 8;  // 24 accumulators
  template <Layout L>
  static __m512 load(const uint8_t* col, int) {
    if constexpr (L == Layout::kF32_R16) {
      return _mm512_loadu_ps(col);
    } else {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col)));
    }
  }
  static __m512 zero() { return _mm512_setzero_ps(); }
  static __m512 bcast(const float* p) { return _mm512_set1_ps(*p); }
  static __m512 fma(__m512 w, __m512 x, __m512 acc) { return _mm512_fmadd_ps(w, x, acc); }
  static void store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
};
#include "tensor/kernels_float_r16.h"

void gemm_f32(const GemmArgs& g) { zgemm_float<Z32>(g); }
void gemm_f16(const GemmArgs& g) { zgemm_float<Z16>(g); }
void gemm_bf16(const GemmArgs& g) { zgemm_float<ZB16>(g); }
void gemm_q8_0(const GemmArgs& g) { gemm_q8_0_256(g); }
void act_round_f16(const float* x, float* out, int64_t n) { round_f16_256(x, out, n); }
void act_round_bf16(const float* x, float* out, int64_t n) { round_bf16_256(x, out, n); }
// quantize_q8_0_256 with one zmm per half block: eight blocks at a time (maxima, scales and
// sums reduced together), the rest per block by the ymm code. Bit-identical (same operations
// per value; vpmovsdb saturates like the ymm packs, and |q| <= 127 anyway).
void act_q8_0(const float* x, int64_t n, int8_t* qs, float* d, int32_t* s) {
  const int64_t nb8 = n / 256 * 8;
  for (int64_t b = 0; b < nb8; b += 8) {
    const float* xb = x + 32 * b;
    __m512 v[8][2];
    __m256 mx[8];
    for (int k = 0; k < 8; ++k) {
      v[k][0] = _mm512_loadu_ps(xb + 32 * k);
      v[k][1] = _mm512_loadu_ps(xb + 32 * k + 16);
      const __m512 m = _mm512_max_ps(_mm512_abs_ps(v[k][0]), _mm512_abs_ps(v[k][1]));
      mx[k] = _mm256_max_ps(_mm512_castps512_ps256(m), _mm512_extractf32x8_ps(m, 1));
    }
    alignas(32) float id[8];
    _mm256_store_ps(id, q8_0_scales8(hmax8_ps(mx), d + b));
    __m256i sums[8];
    for (int k = 0; k < 8; ++k) {
      const __m512 vid = _mm512_set1_ps(id[k]);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v[k][0], vid));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v[k][1], vid));
      const __m256i q8 = _mm256_set_m128i(_mm512_cvtsepi32_epi8(q1), _mm512_cvtsepi32_epi8(q0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * (b + k)), q8);
      const __m512i sq = _mm512_add_epi32(q0, q1);
      sums[k] = _mm256_add_epi32(_mm512_castsi512_si256(sq), _mm512_extracti64x4_epi64(sq, 1));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s + b), hsum8_epi32(sums));
  }
  quantize_q8_0_256(x + 32 * nb8, n - 32 * nb8, qs + 32 * nb8, d + nb8, s + nb8);
}
void act_q8_k(const float* x, int64_t n, BlockQ8_K* y) { quantize_q8_k_256(x, n, y); }
void gemm_q4_1(const GemmArgs& g) { gemm_q4_1_256(g); }
void gemm_q5_1(const GemmArgs& g) { gemm_q5_1_256(g); }
void gemm_q2_k(const GemmArgs& g) { gemm_lane_or_plain<LaneKind::kQ2_K>(g, gemm_q2_k_pairs); }
// The panels need the caller's scratch (Matrix always gives it); without it, the reference.
template <typename Dec, Layout kL>
void gemm_kr16_or_ref(const GemmArgs& g) {
  if (g.scratch == nullptr) return scalar_kernels().gemm[static_cast<int>(kL)](g);
  gemm_kr16_panels<Dec>(g);
}
// Q5_K_R16 below its panels' batch size: Q4_K_R16's register tiles with the 5th bits (the same
// results as the panels, kpanel_block<8, 0>).
void gemm_q5_k_r16(const GemmArgs& g) {
  if (g.act->n_tok < kR16NibblePanelMinTokens) return gemm_q4_k_r16<true>(g);
  gemm_kr16_or_ref<DecQ5KR16, Layout::kQ5_K_R16>(g);
}
// Q3_K_R16 / Q2_K_R16 below the panels' batch size: Q6_K_R16's register tiles (K16 kinds).
void gemm_q3_k_r16(const GemmArgs& g) {
  if (g.act->n_tok < kK16PanelMinTokens) return gemm_q6_k_r16<K16::kQ3_K>(g);
  gemm_kr16_or_ref<DecQ3KR16, Layout::kQ3_K_R16>(g);
}
void gemm_q2_k_r16(const GemmArgs& g) {
  if (g.act->n_tok < kK16PanelMinTokens) return gemm_q6_k_r16<K16::kQ2_K>(g);
  gemm_kr16_or_ref<DecQ2KR16, Layout::kQ2_K_R16>(g);
}
void gemm_iq4_xs_r16(const GemmArgs& g) {
  if (g.act->n_tok < kR16NibblePanelMinTokens) return gemm_iq4_xs_r16_tiles(g);
  gemm_kr16_or_ref<DecIQ4XSR16, Layout::kIQ4_XS_R16>(g);
}

}  // namespace
}  // namespace ts::tensor::kern

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace ts::tensor::kern {

void set_r16_pair_tile(bool on) { g_r16_pair_tile.store(on, std::memory_order_relaxed); }

const KernelTable* avx512_kernels() {
  static const KernelTable table = {
      {gemm_f32, gemm_f16, gemm_bf16, gemm_q8_0, gemm_q4_0, gemm_q4_k, gemm_q6_k, gemm_q8_0_r16, gemm_q4_k_r16_any, gemm_q6_k_r16_any, gemm_q4_0_r16,
       gemm_q4_1, gemm_q5_0, gemm_q5_1, gemm_q2_k, gemm_q3_k, gemm_q5_k, gemm_iq4_nl, gemm_iq4_xs,
       gemm_iq4_nl_r16, gemm_q5_0_r16, gemm_q4_1_r16, gemm_q5_1_r16, gemm_q5_k_r16, gemm_q3_k_r16, gemm_q2_k_r16,
       gemm_iq4_xs_r16, gemm_float_r16<FloatR16Zmm, Layout::kF32_R16>, gemm_float_r16<FloatR16Zmm, Layout::kF16_R16>},
      {act_round_f16, act_round_bf16, act_q8_0, act_q8_k}};
  return &table;
}

}  // namespace ts::tensor::kern
