// AMX int8 tile kernels (Intel Sapphire Rapids and later): the AVX-512 table with the R16
// Q8_0 / Q4_0 matmuls of prefill-sized batches (n_tok >= kAmxMinTokens) run as int8 tile
// GEMMs. Reached through amx_kernels() after a CPUID check and the Linux permission request
// (cpu_features.h: amx_permission()); compiled for AMX per function with target pragmas, so the
// binary still runs on every x86-64.
//
// One 16-row group x 16 tokens per tile step: the R16 block's [k4][row16][4] u8 values (w + bias)
// are the VNNI B tile as stored (8 rows x 64 bytes, K = 32), the tokens' Q8_0 values the signed A
// tile (M tokens x 32 bytes, read in place with the token stride), TDPBSUD gives the exact int32
// block sums for 16 tokens x 16 rows, and the epilogue does what the AVX-512 R16 kernels do per
// block: subtract bias * (activation block sum), convert, and one FMA with fp16 d_w * d_x into a
// float accumulator per token, blocks in order. The results are therefore bit-identical to the
// avx512 tier's kernels (tests/tensor/amx_kernels_test.cc checks it), so a token's row still does
// not depend on the batch (the small-batch fallback is the avx512 kernel itself).
//
// Measured on a 2-core Sapphire Rapids-class KVM guest (see the commit messages for commands):
// only x1.0-1.25 of the avx512 kernels per matmul (L2-resident Q8_0 ~205 vs ~200 GMAC/s, Q4_0
// ~195 vs ~165 at 64-128 tokens; 512-token 4864x896 from DRAM x0.81 / x0.90 on 1 / 2 threads),
// and prefill of 572 tokens at parity. The per-32-block float scales are the limit: every block's
// C tile (1 KB) goes through a tile store and 16 vector loads, and a TDPBSUD with K = 32 costs as
// much as one with K = 64; the tile work and the vector epilogue did not overlap here (measured
// apart: ~575 and ~400 GMAC/s alone, ~200 together). Tried and dropped (no gain): two groups x two
// token tiles per step with accumulators in L1 (4 C tiles), signed weight panels (TDPBSSD, no
// compensation), a precomputed compensation operand, a deeper software pipeline (epilogue 2-3
// blocks behind the tile store). Kept: Q8_0 C tiles start from kActIlBias0 - 128 * block sum
// (a tile load), so the epilogue is vsubps + vmulps + FMA (1 thread, L2, 1024x896: 210 -> 233
// GMAC/s at 16 tokens, 214 -> 235 at 64, 221 -> 217 at 256).
// Not done: Q4_1/Q5_0/Q5_1 (their kernels sum in ggml's 8-lane float order, per 4-value group: a
// K = 32 tile sum cannot reproduce it bit for bit); IQ4_NL, which now sums each block exactly
// like Q4_0 and could share its tiles with a table decode (not written: no AMX host to test
// on); Q4_K/Q6_K (per-sub-block int scales:
// the same C-extraction cost per 32 or 16 values, not expected to gain given the above).
//
// Tile state: the tile configuration is per thread; each kernel call loads it when the thread's
// current one differs (thread_local), so pool workers configure themselves on first use.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/cpu_features.h"
#include "tensor/kernels.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")
#pragma GCC optimize("O3")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ts::tensor::kern {
namespace {

// ldtilecfg's 64-byte operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tiles: 0/3 A (16 tokens x 32 B), 1/4 B (8 x 64 B), 2/5 C (16 x 16 int32): two sets so one
// block's tile work overlaps the previous block's epilogue. 6 A and 7 C for the last token tile
// when it has m_rem < 16 tokens (with B tile 1).
void configure_tiles(int m_rem) {
  thread_local int current = 0;  // m_rem of this thread's loaded configuration, 0: none
  if (current == m_rem) return;
  TileConfig cfg;
  for (int t : {0, 3}) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 32;
  }
  for (int t : {1, 4}) {
    cfg.rows[t] = 8;
    cfg.colsb[t] = 64;
  }
  for (int t : {2, 5}) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  cfg.rows[6] = static_cast<uint8_t>(m_rem);
  cfg.colsb[6] = 32;
  cfg.rows[7] = static_cast<uint8_t>(m_rem);
  cfg.colsb[7] = 64;
  // Not _tile_loadconfig: its asm names only the first 8 bytes as read, so the compiler may drop
  // the stores to the rest of a local config as dead.
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
  current = m_rem;
}

// C[m][n] = sum_k a[m][k] * b[k][n] for one 32-value block into c[m][16] (64-byte rows), using
// tile set kSet (0, 1; 2: the m_rem tiles). a: row m at a + m * lda (signed), b: 512 bytes of
// [8 k4][16 rows][4] u8.
// kInit: C starts from the 16 x 16 int32 tile at init (see group_tile), else from zero.
template <int kSet, bool kInit>
inline void tile_block(const int8_t* a, size_t lda, const uint8_t* b, int32_t* c, const int32_t* init) {
  const long s = static_cast<long>(lda);
  if constexpr (kSet == 0) {
    _tile_loadd(0, a, s);
    _tile_loadd(1, b, 64);
    if constexpr (kInit) {
      _tile_loadd(2, init, 64);
    } else {
      _tile_zero(2);
    }
    _tile_dpbsud(2, 0, 1);
    _tile_stored(2, c, 64);
  } else if constexpr (kSet == 1) {
    _tile_loadd(3, a, s);
    _tile_loadd(4, b, 64);
    if constexpr (kInit) {
      _tile_loadd(5, init, 64);
    } else {
      _tile_zero(5);
    }
    _tile_dpbsud(5, 3, 4);
    _tile_stored(5, c, 64);
  } else {
    _tile_loadd(6, a, s);
    _tile_loadd(1, b, 64);
    if constexpr (kInit) {
      _tile_loadd(7, init, 64);
    } else {
      _tile_zero(7);
    }
    _tile_dpbsud(7, 6, 1);
    _tile_stored(7, c, 64);
  }
}

// Prefetches a group's bytes evenly over the block steps of the tile passes that read the
// current group (the passes are compute-bound; the next group would otherwise arrive at the
// speed of the first pass's demand loads).
struct Spread {
  const char* next = nullptr;
  size_t bytes = 0, done = 0, per_step = 64;
  Spread(const uint8_t* next_group, size_t group_bytes, int64_t steps)
      : next(reinterpret_cast<const char*>(next_group)), bytes(group_bytes) {
    if (steps > 0) per_step = (group_bytes / static_cast<size_t>(steps) / 64 + 1) * 64;
  }
  void step() {
    if (next == nullptr) return;
    const size_t end = done + per_step < bytes ? done + per_step : bytes;
    for (; done < end; done += 64) _mm_prefetch(next + done, _MM_HINT_T0);
  }
};

// acc[t] += (C[t] - bias * xs[t]) * (d_w * d_x[t]) for t < M: the AVX-512 R16 kernels' per-block
// float step, in the same operations. kInit: C started from kActIlBias0 - bias * xs[t], so its
// bits are the float 1.5 * 2^23 + S (|S| < 2^22) and one vsubps gives S exactly (the avx512
// interleaved-activation kernel's step; two vector ALU operations fewer per token and block).
template <int M, bool kInit>
inline void epilogue(const int32_t* c, __m512 dw, const int32_t* xs, const float* xd, int64_t nb, int bias,
                     __m512* acc) {
#pragma GCC unroll 16
  for (int t = 0; t < M; ++t) {
    __m512 sf;
    if constexpr (kInit) {
      sf = _mm512_sub_ps(_mm512_castsi512_ps(_mm512_load_si512(c + 16 * t)), _mm512_set1_ps(kActIlBias0F));
    } else {
      sf = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(c + 16 * t), _mm512_set1_epi32(bias * xs[t * nb])));
    }
    acc[t] = _mm512_fmadd_ps(sf, _mm512_mul_ps(dw, _mm512_set1_ps(xd[t * nb])), acc[t]);
  }
}

// Q8_0_R16-shaped pair records (fp16 scales, then [2][8][16][4] u8) at grp: tokens [t0, t0 + M)
// of all nb blocks, lanes [lane0, lane1) written to y[t][out_r + lane - lane0]. kSetFull: M == 16
// (tile sets 0/1), else the m_rem tiles.
// init (kInit): [nb][16 tokens][16] int32 start tiles of this token tile, else null.
template <int M, bool kInit>
inline void group_tile(const GemmArgs& g, const uint8_t* grp, int bias, int lane0, int lane1, int64_t out_r,
                       int64_t t0, const int32_t* init, Spread* pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const int8_t* xq = a.q8 + t0 * a.cols;
  const int32_t* xs = a.s8 + t0 * nb;
  const float* xd = a.d8 + t0 * nb;
  const size_t lda = static_cast<size_t>(a.cols);
  alignas(64) int32_t c[2][16 * 16];
  __m512 acc[M];
#pragma GCC unroll 16
  for (int t = 0; t < M; ++t) acc[t] = _mm512_setzero_ps();
  auto vals = [&](int64_t b) { return grp + static_cast<size_t>(b >> 1) * kR16PairBytes + 64 + (b & 1) * 512; };
  auto scales = [&](int64_t b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * kR16PairBytes;
    return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + (b & 1) * 32)));
  };
  if constexpr (M == 16) {
    tile_block<0, kInit>(xq, lda, vals(0), c[0], init);
    for (int64_t b = 0; b < nb; b += 2) {
      // Block b's C is in c[0]; start b + 1 (set 1) before b's epilogue, then b + 2 (set 0).
      if (b + 1 < nb) tile_block<1, kInit>(xq + (b + 1) * 32, lda, vals(b + 1), c[1], init + (b + 1) * 256);
      pf->step();
      epilogue<M, kInit>(c[0], scales(b), xs + b, xd + b, nb, bias, acc);
      if (b + 1 >= nb) break;
      if (b + 2 < nb) tile_block<0, kInit>(xq + (b + 2) * 32, lda, vals(b + 2), c[0], init + (b + 2) * 256);
      pf->step();
      epilogue<M, kInit>(c[1], scales(b + 1), xs + b + 1, xd + b + 1, nb, bias, acc);
    }
  } else {
    for (int64_t b = 0; b < nb; ++b) {
      tile_block<2, kInit>(xq + b * 32, lda, vals(b), c[0], init + b * 256);
      pf->step();
      epilogue<M, kInit>(c[0], scales(b), xs + b, xd + b, nb, bias, acc);
    }
  }
  if (lane0 == 0) {
    const __mmask16 keep = static_cast<__mmask16>((1u << (lane1 - lane0)) - 1);
#pragma GCC unroll 16
    for (int t = 0; t < M; ++t) _mm512_mask_storeu_ps(g.y + (t0 + t) * g.ldy + out_r, keep, acc[t]);
  } else {
    for (int t = 0; t < M; ++t) {
      alignas(64) float out[16];
      _mm512_store_ps(out, acc[t]);
      for (int l = lane0; l < lane1; ++l) g.y[(t0 + t) * g.ldy + out_r + (l - lane0)] = out[l];
    }
  }
}

// Tokens [t0, t0 + m) (m <= 16) of one group (in the Q8_0_R16 shape at grp).
template <bool kInit>
void group_tokens(const GemmArgs& g, const uint8_t* grp, int bias, int lane0, int lane1, int64_t out_r, int64_t t0,
                  int64_t m, const int32_t* init, Spread* pf) {
  switch (m) {
#define TS_AMX_TILE(n) \
  case n: group_tile<n, kInit>(g, grp, bias, lane0, lane1, out_r, t0, init, pf); break;
    TS_AMX_TILE(1) TS_AMX_TILE(2) TS_AMX_TILE(3) TS_AMX_TILE(4) TS_AMX_TILE(5) TS_AMX_TILE(6) TS_AMX_TILE(7)
    TS_AMX_TILE(8) TS_AMX_TILE(9) TS_AMX_TILE(10) TS_AMX_TILE(11) TS_AMX_TILE(12) TS_AMX_TILE(13) TS_AMX_TILE(14)
    TS_AMX_TILE(15) TS_AMX_TILE(16)
#undef TS_AMX_TILE
    default: break;
  }
}

// Q4_0_R16 group -> Q8_0_R16-shaped records in `panel` holding the unsigned nibbles (bias 8):
// lines k4 < 4 are the low nibbles of record line k4 (values 4 k4..), k4 >= 4 the high nibbles of
// line k4 - 4 (values 16 + 4 (k4 - 4)), as the AVX-512 kQ4 tile reads them.
void decode_q4_0_r16(const uint8_t* grp, int64_t nb, uint8_t* panel) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  for (int64_t p = 0; p < (nb + 1) / 2; ++p) {
    const uint8_t* rec = grp + static_cast<size_t>(p) * kR16Q4PairBytes;
    uint8_t* out = panel + static_cast<size_t>(p) * kR16PairBytes;
    _mm512_store_si512(out, _mm512_load_si512(rec));
    for (int h = 0; h < 2; ++h) {
      for (int m = 0; m < 4; ++m) {
        const __m512i v = _mm512_load_si512(rec + 64 + h * 256 + 64 * m);
        _mm512_store_si512(out + 64 + h * 512 + 64 * m, _mm512_and_si512(v, m4));
        _mm512_store_si512(out + 64 + h * 512 + 64 * (m + 4), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
      }
    }
  }
  __asm__ volatile("" ::: "memory");  // the tile loads (asm without a memory operand) read the panel
}

// kQ4: Q4_0_R16 groups (decoded per group into g.scratch), else Q8_0_R16 read in place.
// Every group of [row0, row0 + num_rows), all tokens. Q8_0_R16 (read in place): token tiles
// outer, groups inner, so a token tile's activations (16 x cols bytes) stay in L1 while the
// groups stream past (from DRAM on the first pass, prefetched a group ahead, then from L2: a
// caller's row chunk is sized for it); tile loads of activations from L2 (16 strided rows) were
// the slow part with groups outer (x0.57 of avx512 at 512 tokens x 896 columns). Q4_0_R16: groups
// outer, each decoded once into g.scratch for all tokens.
template <bool kQ4>
void gemm_r16_tiles(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  configure_tiles(n_tok % 16 == 0 ? 16 : static_cast<int>(n_tok % 16));
  const int64_t n_tiles = (n_tok + 15) / 16;
  // Walks the groups: fn(grp, lane0, lane1, out_r, next group or null).
  auto for_groups = [&](auto&& fn) {
    int64_t done = 0;
    const uint8_t* grp = g.w;
    int lane0 = static_cast<int>(g.row0);
    while (done < g.num_rows) {
      const int64_t left = g.num_rows - done;
      const int lane1 = left < 16 - lane0 ? lane0 + static_cast<int>(left) : 16;
      const bool more = done + (lane1 - lane0) < g.num_rows;
      fn(grp, lane0, lane1, done, more ? grp + g.stride : nullptr);
      done += lane1 - lane0;
      lane0 = 0;
      grp += g.stride;
    }
  };
  if constexpr (kQ4) {
    for_groups([&](const uint8_t* grp, int lane0, int lane1, int64_t out_r, const uint8_t* next) {
      decode_q4_0_r16(grp, nb, g.scratch);
      Spread pf(next, g.stride, n_tiles * nb);
      for (int64_t t0 = 0; t0 < n_tok; t0 += 16) {
        group_tokens<false>(g, g.scratch, 8, lane0, lane1, out_r, t0, n_tok - t0 < 16 ? n_tok - t0 : 16, nullptr, &pf);
      }
    });
  } else {
    // Start tiles of the current token tile (per executing thread; grows, never shrinks).
    thread_local std::vector<int32_t> init_buf;
    if (init_buf.size() < static_cast<size_t>(nb * 256 + 16)) init_buf.resize(static_cast<size_t>(nb * 256 + 16));
    int32_t* init = reinterpret_cast<int32_t*>((reinterpret_cast<uintptr_t>(init_buf.data()) + 63) & ~uintptr_t{63});
    for (int64_t t0 = 0; t0 < n_tok; t0 += 16) {
      const int64_t m = n_tok - t0 < 16 ? n_tok - t0 : 16;
      for (int64_t b = 0; b < nb; ++b) {
        for (int64_t t = 0; t < m; ++t) {
          const int32_t v = kActIlBias0 - 128 * g.act->s8[(t0 + t) * nb + b];
          _mm512_store_si512(init + b * 256 + t * 16, _mm512_set1_epi32(v));
        }
      }
      __asm__ volatile("" ::: "memory");  // the tile loads (asm without a memory operand) read init
      for_groups([&](const uint8_t* grp, int lane0, int lane1, int64_t out_r, const uint8_t* next) {
        Spread pf(t0 == 0 ? next : nullptr, g.stride, nb);
        group_tokens<true>(g, grp, 128, lane0, lane1, out_r, t0, m, init, &pf);
      });
    }
  }
}

void amx_q8_0_r16(const GemmArgs& g) { gemm_r16_tiles<false>(g); }
void amx_q4_0_r16(const GemmArgs& g) { gemm_r16_tiles<true>(g); }

}  // namespace
}  // namespace ts::tensor::kern

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace ts::tensor::kern {
namespace {

GemmFn g_small_q8_0_r16 = nullptr;  // the avx512 kernels below kAmxMinTokens (set with the table)
GemmFn g_small_q4_0_r16 = nullptr;

void gemm_q8_0_r16(const GemmArgs& g) {
  if (g.act->n_tok < kAmxMinTokens) return g_small_q8_0_r16(g);
  amx_q8_0_r16(g);
}
void gemm_q4_0_r16(const GemmArgs& g) {
  if (g.act->n_tok < kAmxMinTokens || g.scratch == nullptr) return g_small_q4_0_r16(g);
  amx_q4_0_r16(g);
}
void gemm_q4_0_r16_tiles(const GemmArgs& g) {
  if (g.scratch == nullptr) return g_small_q4_0_r16(g);
  amx_q4_0_r16(g);
}

// The AVX-512 table with `q8` / `q4` as its Q8_0_R16 / Q4_0_R16 entries, or null without AMX.
const KernelTable* make_table(GemmFn q8, GemmFn q4) {
  const KernelTable* base = avx512_kernels();
  if (base == nullptr || !cpu_features().avx512_tier() || !amx_permission().granted) return nullptr;
  g_small_q8_0_r16 = base->gemm[static_cast<int>(Layout::kQ8_0_R16)];
  g_small_q4_0_r16 = base->gemm[static_cast<int>(Layout::kQ4_0_R16)];
  auto* t = new KernelTable(*base);  // lives for the process
  t->gemm[static_cast<int>(Layout::kQ8_0_R16)] = q8;
  t->gemm[static_cast<int>(Layout::kQ4_0_R16)] = q4;
  return t;
}

}  // namespace

const KernelTable* amx_kernels() {
  static const KernelTable* table = make_table(gemm_q8_0_r16, gemm_q4_0_r16);
  return table;
}

const KernelTable* amx_tile_kernels() {
  static const KernelTable* table = make_table(amx_q8_0_r16, gemm_q4_0_r16_tiles);
  return table;
}

}  // namespace ts::tensor::kern
