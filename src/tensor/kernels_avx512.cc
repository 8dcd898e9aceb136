// AVX-512 (F/BW/VL/DQ + VNNI) kernels. 512-bit float kernels and the Q8_0_R16 kernel are
// written here; the K-quant and plain Q8_0/Q4_0 kernels are the shared 256-bit ones compiled
// with VNNI (vpdpbusd / vpdpwssd). Reached through avx512_kernels() after a CPUID check.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

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
#include "tensor/kernels_x86_more.h"

inline __m512i bcast_dword(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// ---- 512-bit F32 / F16 / BF16 ----------------------------------------------------------------

struct Z32 {
  static __m512 load(const uint8_t* p, int64_t k) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p) + k); }
  static __m512 load_tail(const uint8_t* p, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p) + k);
  }
};
struct Z16 {
  static __m512 load(const uint8_t* p, int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * k)));
  }
  static __m512 load_tail(const uint8_t* p, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * k));
  }
};
struct ZB16 {
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
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 <= cols; k += 16) {
    __m512 xv[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(x[t] + k);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 wv = L::load(w[r], k);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  if (k < cols) {
    const __mmask16 m = static_cast<__mmask16>((1u << (cols - k)) - 1);
    __m512 xv[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x[t] + k);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 wv = L::load_tail(w[r], k, m);
#pragma GCC unroll 4
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
  for (; r + 4 <= g.num_rows; r += 4) {
    for_token_tiles(n_tok, [&]<int T>(int64_t t0) { zfloat_tile<L, 4, T>(g, r, t0); });
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

// Every line of the K-quant R16 block record kR16KPrefetchBytes ahead of `rec` (the record being
// computed), at every batch size: with one line per record, or none below 2-4 tokens, 1-3 token
// Q4_K/Q6_K matmuls streamed from DRAM at ~2/3 of the rate the 4-token ones reached.
constexpr int kR16KPrefetchBytes = 8192;
template <size_t kBytes>
inline void prefetch_record(const uint8_t* rec) {
  const char* p = reinterpret_cast<const char*>(rec) + kR16KPrefetchBytes;
#pragma GCC unroll 64
  for (size_t o = 0; o < kBytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

// Rows [lane0, lane1) of one 16-row group for tokens [t0, t0 + T), written to
// y[t][out_r + lane - lane0].
// kBias: the stored u8 is w + kBias (128 for Q8_0, 8 for Q4_0 panels). kQ4: Q4_0_R16 records
// (nibbles; one zmm feeds two k4 groups) instead of the Q8_0_R16 layout.
template <int T, int kBias, bool kQ4 = false>
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
    constexpr size_t kRec = kQ4 ? kR16Q4PairBytes : kR16PairBytes;
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * kRec;
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * (kQ4 ? 256 : 512);
    {
      // Every line of the block's values (the scales line with the first half), as in r16_il_tile.
      constexpr int kLines = kQ4 ? 4 : 8;
      const char* pf = reinterpret_cast<const char*>(vals) + kR16PrefetchBytes;
#pragma GCC unroll 8
      for (int l = 0; l < kLines; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
      if (half == 0) _mm_prefetch(reinterpret_cast<const char*>(rec) + kR16PrefetchBytes, _MM_HINT_T0);
    }
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
        // k4 < 4: low nibbles of line k4 (values 4*k4..); k4 >= 4: high nibbles of line k4 - 4
        // (values 16 + 4*(k4 - 4) = 4*k4..), so the activation index is 4*k4 either way.
        const __m512i v = _mm512_load_si512(reinterpret_cast<const __m512i*>(vals + 64 * (k4 % 4)));
        w = _mm512_and_si512(k4 < 4 ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(0xF));
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
  if (lane0 == 0 && lane1 == 16) {
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(g.y + (t0 + t) * g.ldy + out_r, acc[t]);
  } else {
    for (int t = 0; t < T; ++t) {
      alignas(64) float out[16];
      _mm512_store_ps(out, acc[t]);
      for (int l = lane0; l < lane1; ++l) g.y[(t0 + t) * g.ldy + out_r + (l - lane0)] = out[l];
    }
  }
}

// Q8_0_R16 x interleaved activations (Act::q8_il), tokens [t0, t0 + T) with t0 a multiple of
// kActIlTile: one base pointer for the tile's activations, so every broadcast is an embedded
// {1to16} operand of vpdpbusd, and the bias / scale terms are broadcast loads.
template <int T>
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
    {
      // Every line of the block (8 value lines, and the scale line with the first half).
      const char* pf = reinterpret_cast<const char*>(vals) + kR16PrefetchBytes;
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
      if (half == 0) _mm_prefetch(reinterpret_cast<const char*>(rec) + kR16PrefetchBytes, _MM_HINT_T0);
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
  if (lane0 == 0 && lane1 == 16) {
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(g.y + (t0 + t) * g.ldy + out_r, acc[t]);
  } else {
    for (int t = 0; t < T; ++t) {
      alignas(64) float out[16];
      _mm512_store_ps(out, acc[t]);
      for (int l = lane0; l < lane1; ++l) g.y[(t0 + t) * g.ldy + out_r + (l - lane0)] = out[l];
    }
  }
}

void r16_il_group(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
  const int64_t n_tok = g.act->n_tok;
  int64_t t0 = 0;
  for (; t0 + 8 <= n_tok; t0 += 8) r16_il_tile<8>(g, grp, lane0, lane1, out_r, t0);
  switch (n_tok - t0) {
    case 7: r16_il_tile<7>(g, grp, lane0, lane1, out_r, t0); break;
    case 6: r16_il_tile<6>(g, grp, lane0, lane1, out_r, t0); break;
    case 5: r16_il_tile<5>(g, grp, lane0, lane1, out_r, t0); break;
    case 4: r16_il_tile<4>(g, grp, lane0, lane1, out_r, t0); break;
    case 3: r16_il_tile<3>(g, grp, lane0, lane1, out_r, t0); break;
    case 2: r16_il_tile<2>(g, grp, lane0, lane1, out_r, t0); break;
    case 1: r16_il_tile<1>(g, grp, lane0, lane1, out_r, t0); break;
    default: break;
  }
}

// Lanes [lane0, lane1) of one R16-format group, all tokens, into y[t][out_r + lane - lane0].
template <int kBias, bool kQ4 = false>
void r16_group(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
  const int64_t n_tok = g.act->n_tok;
  int64_t t0 = 0;
  for (; t0 + 8 <= n_tok; t0 += 8) r16_tile<8, kBias, kQ4>(g, grp, lane0, lane1, out_r, t0);
  switch (n_tok - t0) {
    case 7: r16_tile<7, kBias, kQ4>(g, grp, lane0, lane1, out_r, t0); break;
    case 6: r16_tile<6, kBias, kQ4>(g, grp, lane0, lane1, out_r, t0); break;
    case 5: r16_tile<5, kBias, kQ4>(g, grp, lane0, lane1, out_r, t0); break;
    case 4: r16_tile<4, kBias, kQ4>(g, grp, lane0, lane1, out_r, t0); break;
    case 3: r16_tile<3, kBias, kQ4>(g, grp, lane0, lane1, out_r, t0); break;
    case 2: r16_tile<2, kBias, kQ4>(g, grp, lane0, lane1, out_r, t0); break;
    case 1: r16_tile<1, kBias, kQ4>(g, grp, lane0, lane1, out_r, t0); break;
    default: break;
  }
}

template <int kBias, bool kQ4>
void gemm_r16_groups(const GemmArgs& g) {
  int64_t done = 0;
  const uint8_t* grp = g.w;
  int lane0 = static_cast<int>(g.row0);
  while (done < g.num_rows) {
    const int64_t left = g.num_rows - done;
    const int lane1 = left < 16 - lane0 ? lane0 + static_cast<int>(left) : 16;
    if (!kQ4 && g.act->q8_il != nullptr) {
      r16_il_group(g, grp, lane0, lane1, done);
    } else {
      r16_group<kBias, kQ4>(g, grp, lane0, lane1, done);
    }
    done += lane1 - lane0;
    lane0 = 0;
    grp += g.stride;
  }
}

void gemm_q8_0_r16(const GemmArgs& g) { gemm_r16_groups<128, false>(g); }
void gemm_q4_0_r16(const GemmArgs& g) { gemm_r16_groups<8, true>(g); }

// ---- Q4_K_R16: one zmm = 8 nibbles of 16 rows; unpacked once per token tile -----------------

template <int T>
inline void q4k_r16_tile(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const __m512i m4 = _mm512_set1_epi8(0xF);
  const BlockQ8_K* xk[T];
  for (int t = 0; t < T; ++t) xk[t] = a.qk + (t0 + t) * nb;
  __m512 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b) * kQ4KR16BlockBytes;
    prefetch_record<kQ4KR16BlockBytes>(rec);
    __m512i isum[T], msum[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      isum[t] = _mm512_setzero_si512();
      msum[t] = _mm512_setzero_si512();
    }
    // Two chains per sub-block (even/odd m) at small T, where one would be latency-bound.
    constexpr int kChains = T <= 2 ? 2 : 1;
#pragma GCC unroll 1
    for (int c = 0; c < 4; ++c) {
      __m512i il[kChains][T], ih[kChains][T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
#pragma GCC unroll 2
        for (int k = 0; k < kChains; ++k) {
          il[k][t] = _mm512_setzero_si512();
          ih[k][t] = _mm512_setzero_si512();
        }
      }
#pragma GCC unroll 8
      for (int m = 0; m < 8; ++m) {
        const __m512i v = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + (c * 8 + m) * 64));
        const __m512i lo = _mm512_and_si512(v, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = xk[t][b].qs + 64 * c + 4 * m;
          il[m % kChains][t] = _mm512_dpbusd_epi32(il[m % kChains][t], lo, bcast_dword(xq));
          ih[m % kChains][t] = _mm512_dpbusd_epi32(ih[m % kChains][t], hi, bcast_dword(xq + 32));
        }
      }
      if constexpr (kChains == 2) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          il[0][t] = _mm512_add_epi32(il[0][t], il[1][t]);
          ih[0][t] = _mm512_add_epi32(ih[0][t], ih[1][t]);
        }
      }
      const __m512i scl = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + 2048 + 32 * c)));
      const __m512i sch = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + 2048 + 32 * c + 16)));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        isum[t] = _mm512_add_epi32(isum[t],
                                   _mm512_add_epi32(_mm512_mullo_epi32(il[0][t], scl), _mm512_mullo_epi32(ih[0][t], sch)));
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512i mj = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + 2176 + 16 * j)));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m512i bs = _mm512_set1_epi32(xk[t][b].bsums[2 * j] + xk[t][b].bsums[2 * j + 1]);
        msum[t] = _mm512_add_epi32(msum[t], _mm512_mullo_epi32(mj, bs));
      }
    }
    const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + 2304)));
    const __m512 dmv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + 2336)));
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(xk[t][b].d);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[t]), _mm512_mul_ps(dmv, dx), acc[t]);
    }
  }
  if (lane0 == 0 && lane1 == 16) {
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(g.y + (t0 + t) * g.ldy + out_r, acc[t]);
  } else {
    for (int t = 0; t < T; ++t) {
      alignas(64) float out[16];
      _mm512_store_ps(out, acc[t]);
      for (int l = lane0; l < lane1; ++l) g.y[(t0 + t) * g.ldy + out_r + (l - lane0)] = out[l];
    }
  }
}

void gemm_q4_k_r16(const GemmArgs& g) {
  int64_t done = 0;
  const uint8_t* grp = g.w;
  int lane0 = static_cast<int>(g.row0);
  while (done < g.num_rows) {
    const int64_t left = g.num_rows - done;
    const int lane1 = left < 16 - lane0 ? lane0 + static_cast<int>(left) : 16;
    for_token_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { q4k_r16_tile<T>(g, grp, lane0, lane1, done, t0); });
    done += lane1 - lane0;
    lane0 = 0;
    grp += g.stride;
  }
}

// ---- Q6_K_R16: three zmm (ql low half, ql high half, qh) = 16 values of 16 rows ------------

template <int T>
inline void q6k_r16_tile(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const __m512i m4 = _mm512_set1_epi8(0xF);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const BlockQ8_K* xk[T];
  for (int t = 0; t < T; ++t) xk[t] = a.qk + (t0 + t) * nb;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b) * kQ6KR16BlockBytes;
    prefetch_record<kQ6KR16BlockBytes>(rec);
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int c = 0; c < 2; ++c) {
#pragma GCC unroll 2
      for (int hh = 0; hh < 2; ++hh) {
        // Sub-blocks (16 values) 8c + 2i + hh for i = 0..3 (the four 32-value quarters q1..q4).
        __m512i isub[4][T];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
#pragma GCC unroll 2
          for (int t = 0; t < T; ++t) {
            // Values are stored + 32: start from -32 * (sum of the sub-block's activations).
            isub[i][t] = _mm512_set1_epi32(-32 * xk[t][b].bsums[8 * c + 2 * i + hh]);
          }
        }
#pragma GCC unroll 4
        for (int mm = 0; mm < 4; ++mm) {
          const int m = 4 * hh + mm;
          const __m512i va = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + (c * 16 + m) * 64));
          const __m512i vb = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + (c * 16 + m + 8) * 64));
          const __m512i vh = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + 2048 + (c * 8 + m) * 64));
          __m512i q[4];
          q[0] = _mm512_or_si512(_mm512_and_si512(va, m4), _mm512_and_si512(_mm512_slli_epi16(vh, 4), m30));
          q[1] = _mm512_or_si512(_mm512_and_si512(vb, m4), _mm512_and_si512(_mm512_slli_epi16(vh, 2), m30));
          q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(va, 4), m4), _mm512_and_si512(vh, m30));
          q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(vb, 4), m4),
                                 _mm512_and_si512(_mm512_srli_epi16(vh, 2), m30));
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
#pragma GCC unroll 2
            for (int t = 0; t < T; ++t) {
              isub[i][t] = _mm512_dpbusd_epi32(isub[i][t], q[i], bcast_dword(xk[t][b].qs + 128 * c + 32 * i + 4 * m));
            }
          }
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const __m512i sc = _mm512_cvtepi8_epi32(
              _mm_load_si128(reinterpret_cast<const __m128i*>(rec + 3072 + (8 * c + 2 * i + hh) * 16)));
#pragma GCC unroll 2
          for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(isub[i][t], sc));
        }
      }
    }
    const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + 3328)));
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, _mm512_set1_ps(xk[t][b].d)), acc[t]);
    }
  }
  if (lane0 == 0 && lane1 == 16) {
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(g.y + (t0 + t) * g.ldy + out_r, acc[t]);
  } else {
    for (int t = 0; t < T; ++t) {
      alignas(64) float out[16];
      _mm512_store_ps(out, acc[t]);
      for (int l = lane0; l < lane1; ++l) g.y[(t0 + t) * g.ldy + out_r + (l - lane0)] = out[l];
    }
  }
}

void gemm_q6_k_r16(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok;
  int64_t done = 0;
  const uint8_t* grp = g.w;
  int lane0 = static_cast<int>(g.row0);
  while (done < g.num_rows) {
    const int64_t left = g.num_rows - done;
    const int lane1 = left < 16 - lane0 ? lane0 + static_cast<int>(left) : 16;
    int64_t t0 = 0;
    for (; t0 + 2 <= n_tok; t0 += 2) q6k_r16_tile<2>(g, grp, lane0, lane1, done, t0);
    if (t0 < n_tok) q6k_r16_tile<1>(g, grp, lane0, lane1, done, t0);
    done += lane1 - lane0;
    lane0 = 0;
    grp += g.stride;
  }
}

// ---- Batched Q4_0 / Q4_K / Q6_K: decode 16-row panels once, then vpdpbusd over all tokens ----

// Plain (not repacked) Q4_0 / Q4_K / Q6_K rows always go through the panels, even for one
// token where the per-row 256-bit kernels would be a little faster: those sum in another
// order, and a row's result must not depend on the batch size (batch_invariance_test). Plain
// layouts only run here when repacking was turned off (tests, benchmarks) or failed.
// The ggml-ordered signed panels (Q5_0 / IQ4_NL, kernels_avx512_more.h) give the per-row
// kernels' bits exactly, so they switch at kPanelMinTokens, where decoding starts to pay.
constexpr int64_t kPanelMinTokens = 4;

// 16 rows x 16 dwords (row i at src + i * src_stride) -> dst + c * 64 holds dword c of rows
// 0..15 (a 16x16 32-bit transpose: unpack 32, unpack 64, then two 128-bit lane shuffles).
inline void transpose_16x16_dwords(const uint8_t* src, size_t src_stride, uint8_t* dst) {
  __m512i r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + static_cast<size_t>(i) * src_stride);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // Per group of 4 rows q (t[4q..4q+3]): u[4q + m] holds, in each 128-bit lane L, dword 4L + m
  // of rows 4q..4q+3.
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    r[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    r[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    r[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    r[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512i v = _mm512_shuffle_i32x4(r[m], r[4 + m], 0x88);    // L0,L2 of rows 0-3 | 4-7
    const __m512i w = _mm512_shuffle_i32x4(r[m], r[4 + m], 0xDD);    // L1,L3
    const __m512i v2 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0x88);
    const __m512i w2 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0xDD);
    _mm512_store_si512(dst + (0 + m) * 64, _mm512_shuffle_i32x4(v, v2, 0x88));
    _mm512_store_si512(dst + (8 + m) * 64, _mm512_shuffle_i32x4(v, v2, 0xDD));
    _mm512_store_si512(dst + (4 + m) * 64, _mm512_shuffle_i32x4(w, w2, 0x88));
    _mm512_store_si512(dst + (12 + m) * 64, _mm512_shuffle_i32x4(w, w2, 0xDD));
  }
}

inline void store_lanes(const GemmArgs& g, __m512 acc, int64_t t, int64_t r, int lanes) {
  if (lanes == 16) {
    _mm512_storeu_ps(g.y + t * g.ldy + r, acc);
  } else {
    _mm512_mask_storeu_ps(g.y + t * g.ldy + r, static_cast<__mmask16>((1u << lanes) - 1), acc);
  }
}

// Q4_0 rows -> R16 format with bias 8 (u8 = nibble, weight = nibble - 8).
void decode_q4_0_panel(const GemmArgs& g, int64_t r, int lanes, uint8_t* panel) {
  const int64_t nb = g.act->cols / 32;
  const __m128i m4 = _mm_set1_epi8(0xF);
  alignas(64) uint8_t q[16][64];  // per lane: blocks b and b + 1, unsigned nibbles in order
  for (int64_t b = 0; b < nb; b += 2) {
    uint8_t* rec = panel + static_cast<size_t>(b / 2) * kR16PairBytes;
    for (int lane = 0; lane < 16; ++lane) {
      const bool live = lane < lanes;
      const uint8_t* row = g.w + static_cast<size_t>(r + (live ? lane : 0)) * g.stride;
      for (int h = 0; h < 2; ++h) {
        uint16_t d = 0;
        if (b + h < nb) {
          const uint8_t* blk = row + (b + h) * sizeof(BlockQ4_0);
          if (live) __builtin_memcpy(&d, blk, 2);
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
          _mm_store_si128(reinterpret_cast<__m128i*>(q[lane] + 32 * h), _mm_and_si128(v, m4));
          _mm_store_si128(reinterpret_cast<__m128i*>(q[lane] + 32 * h + 16), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
        } else {
          _mm256_store_si256(reinterpret_cast<__m256i*>(q[lane] + 32 * h), _mm256_setzero_si256());
        }
        __builtin_memcpy(rec + h * 32 + lane * 2, &d, 2);
      }
    }
    transpose_16x16_dwords(&q[0][0], 64, rec + 64);
  }
}

void gemm_q4_0(const GemmArgs& g) {
  if (g.scratch == nullptr) return gemm_q4_0_256(g);  // every batch size (see above)
  for (int64_t r = 0; r < g.num_rows; r += 16) {
    const int lanes = static_cast<int>(g.num_rows - r < 16 ? g.num_rows - r : 16);
    decode_q4_0_panel(g, r, lanes, g.scratch);
    r16_group<8>(g, g.scratch, 0, lanes, r);
  }
}

// K-quant panel, per 256-value block (kKPanelBlock bytes):
//   vals  [64 k4][16 lanes][4] u8   (4096 B)   unsigned values (Q4_K 0..15, Q6_K 0..63)
//   sc    [S][16] int32             sub-block scales (Q4_K S = 8 of 32 values; Q6_K S = 16 of 16)
//   pairs [S/2][16][2] int16        Q4_K: mins (m_2i, m_2i+1); Q6_K: scales (sc_2i, sc_2i+1)
//   d     [16] float, dmin [16] float (Q4_K only)
constexpr size_t kKPanelBlock = 4096 + 1024 + 512 + 64 + 64;  // panel_scratch_bytes() reserves 5760
static_assert(kKPanelBlock == 5760);
struct KPanel {
  uint8_t* base;
  static constexpr size_t kVals = 0, kSc = 4096, kPairs = 4096 + 1024, kD = 4096 + 1024 + 512, kDmin = kD + 64;
  uint8_t* blk(int64_t b) const { return base + static_cast<size_t>(b) * kKPanelBlock; }
};

void decode_q4_k_panel(const GemmArgs& g, int64_t r, int lanes, uint8_t* panel) {
  const int64_t nb = g.act->cols / kQK_K;
  const KPanel p{panel};
  const __m256i m4 = _mm256_set1_epi8(0xF);
  alignas(64) uint8_t qall[16][256];
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* pb = p.blk(b);
    for (int lane = 0; lane < 16; ++lane) {
      const bool live = lane < lanes;
      const uint8_t* blk = g.w + static_cast<size_t>(r + (live ? lane : 0)) * g.stride + b * sizeof(BlockQ4_K);
      uint8_t* q = qall[lane];
      for (int c = 0; c < 4; ++c) {
        const __m256i v = loadu256(blk + 16 + 32 * c);
        _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64 * c), _mm256_and_si256(v, m4));
        _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64 * c + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
      }
      uint8_t sc[8], mn[8];
      for (int j = 0; j < 8; ++j) q4k_scale_min(j, blk + 4, &sc[j], &mn[j]);
      for (int j = 0; j < 8; ++j) {
        const int32_t s32 = live ? sc[j] : 0;
        __builtin_memcpy(pb + KPanel::kSc + (j * 16 + lane) * 4, &s32, 4);
      }
      for (int i = 0; i < 4; ++i) {
        const int16_t pr[2] = {static_cast<int16_t>(live ? mn[2 * i] : 0), static_cast<int16_t>(live ? mn[2 * i + 1] : 0)};
        __builtin_memcpy(pb + KPanel::kPairs + (i * 16 + lane) * 4, pr, 4);
      }
      const float d = live ? load_f16(blk) : 0.0f, dmin = live ? load_f16(blk + 2) : 0.0f;
      __builtin_memcpy(pb + KPanel::kD + lane * 4, &d, 4);
      __builtin_memcpy(pb + KPanel::kDmin + lane * 4, &dmin, 4);
    }
    for (int c = 0; c < 4; ++c) transpose_16x16_dwords(&qall[0][64 * c], 256, pb + KPanel::kVals + c * 16 * 64);
  }
}

void decode_q6_k_panel(const GemmArgs& g, int64_t r, int lanes, uint8_t* panel) {
  const int64_t nb = g.act->cols / kQK_K;
  const KPanel p{panel};
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  alignas(64) uint8_t qall[16][256];
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* pb = p.blk(b);
    for (int lane = 0; lane < 16; ++lane) {
      const bool live = lane < lanes;
      const uint8_t* blk = g.w + static_cast<size_t>(r + (live ? lane : 0)) * g.stride + b * sizeof(BlockQ6_K);
      uint8_t* q = qall[lane];
      for (int c = 0; c < 2; ++c) {
        const __m256i l0 = loadu256(blk + 64 * c);
        const __m256i l1 = loadu256(blk + 64 * c + 32);
        const __m256i h = loadu256(blk + 128 + 32 * c);
        uint8_t* qc = q + 128 * c;
        _mm256_store_si256(reinterpret_cast<__m256i*>(qc),
                           _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(qc + 32),
                           _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(qc + 64),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m30)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(qc + 96),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(h, 2), m30)));
      }
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      for (int j = 0; j < 16; ++j) {
        const int32_t s32 = live ? sc[j] : 0;
        __builtin_memcpy(pb + KPanel::kSc + (j * 16 + lane) * 4, &s32, 4);
      }
      for (int i = 0; i < 8; ++i) {
        const int16_t pr[2] = {static_cast<int16_t>(live ? sc[2 * i] : 0), static_cast<int16_t>(live ? sc[2 * i + 1] : 0)};
        __builtin_memcpy(pb + KPanel::kPairs + (i * 16 + lane) * 4, pr, 4);
      }
      const float d = live ? load_f16(blk + 208) : 0.0f;
      __builtin_memcpy(pb + KPanel::kD + lane * 4, &d, 4);
    }
    for (int c = 0; c < 4; ++c) transpose_16x16_dwords(&qall[0][64 * c], 256, pb + KPanel::kVals + c * 16 * 64);
  }
}

inline __m512i load_panel(const uint8_t* p) { return _mm512_load_si512(reinterpret_cast<const __m512i*>(p)); }

// kSub: sub-blocks per 256-value block (16 of 16 values, or 8 of 32). kShift > 0: the panel
// values are stored + 2^kShift (Q6_K 32, Q3_K 4, IQ4_XS 128) and the pairs hold the sub-block
// scales; kShift == 0: Q4_K-style mins in the pairs, scaled by the dmin row.
template <int kSub, int kShift, int T>
inline void kpanel_tile(const GemmArgs& g, const uint8_t* panel, int lanes, int64_t r, int64_t t0,
                        PrefetchSpread* pf = nullptr) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  constexpr bool kQ6 = kSub == 16;         // 16-value sub-blocks: one bsum per sub-block
  constexpr int kK4 = kQ6 ? 4 : 8;         // 4-value groups per sub-block
  const KPanel p{const_cast<uint8_t*>(panel)};
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p.blk(b);
    if (pf != nullptr) pf->step();
    const BlockQ8_K* xb[T];
    for (int t = 0; t < T; ++t) xb[t] = a.qk + (t0 + t) * nb + b;
    __m512i isum[T], side[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      isum[t] = _mm512_setzero_si512();
      side[t] = _mm512_setzero_si512();
    }
    for (int j = 0; j < kSub; ++j) {
      __m512i isub[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) isub[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k4 = 0; k4 < kK4; ++k4) {
        const __m512i w = load_panel(pb + KPanel::kVals + (j * kK4 + k4) * 64);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          isub[t] = _mm512_dpbusd_epi32(isub[t], w, bcast_dword(xb[t]->qs + (j * kK4 + k4) * 4));
        }
      }
      const __m512i sc = load_panel(pb + KPanel::kSc + j * 64);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(isub[t], sc));
    }
    // Side term: Q4_K sum_j m_j * (x sum of sub-block j); Q6_K sum_j sc_j * bsum_j (for -32).
#pragma GCC unroll 8
    for (int i = 0; i < kSub / 2; ++i) {
      const __m512i pr = load_panel(pb + KPanel::kPairs + i * 64);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        __m512i xs;
        if constexpr (kQ6) {
          xs = bcast_dword(xb[t]->bsums + 2 * i);
        } else {
          const int32_t s0 = xb[t]->bsums[4 * i] + xb[t]->bsums[4 * i + 1];
          const int32_t s1 = xb[t]->bsums[4 * i + 2] + xb[t]->bsums[4 * i + 3];
          xs = _mm512_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(s0) & 0xFFFF) | (static_cast<uint32_t>(s1) << 16)));
        }
        side[t] = _mm512_dpwssd_epi32(side[t], pr, xs);
      }
    }
    const __m512 dv = _mm512_load_ps(reinterpret_cast<const float*>(pb + KPanel::kD));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(xb[t]->d);
      if constexpr (kShift > 0) {
        const __m512i s = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(side[t], kShift));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, dx), acc[t]);
      } else {
        const __m512 dm = _mm512_load_ps(reinterpret_cast<const float*>(pb + KPanel::kDmin));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, dx), acc[t]);
        acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(side[t]), _mm512_mul_ps(dm, dx), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) store_lanes(g, acc[t], t0 + t, r, lanes);
}

#include "tensor/kernels_avx512_panels.h"

template <KKind kKind>
void gemm_kquant_panels(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok;
  constexpr int kSub = kKind == KKind::kQ6_K ? 16 : 8;
  constexpr int kShift = kKind == KKind::kQ6_K ? 5 : 0;
  for (int64_t r = 0; r < g.num_rows; r += 16) {
    const int lanes = static_cast<int>(g.num_rows - r < 16 ? g.num_rows - r : 16);
    if constexpr (kKind == KKind::kQ6_K) {
      decode_q6_k_panel(g, r, lanes, g.scratch);
    } else {
      decode_q4_k_panel(g, r, lanes, g.scratch);
    }
    int64_t t0 = 0;
    for (; t0 + 4 <= n_tok; t0 += 4) kpanel_tile<kSub, kShift, 4>(g, g.scratch, lanes, r, t0);
    switch (n_tok - t0) {
      case 3: kpanel_tile<kSub, kShift, 3>(g, g.scratch, lanes, r, t0); break;
      case 2: kpanel_tile<kSub, kShift, 2>(g, g.scratch, lanes, r, t0); break;
      case 1: kpanel_tile<kSub, kShift, 1>(g, g.scratch, lanes, r, t0); break;
      default: break;
    }
  }
}

void gemm_q4_k(const GemmArgs& g) {
  if (g.scratch == nullptr) return gemm_q4_k_256(g);  // every batch size (see above)
  gemm_kquant_panels<KKind::kQ4_K>(g);
}

void gemm_q6_k(const GemmArgs& g) {
  if (g.scratch == nullptr) return gemm_q6_k_256(g);  // every batch size (see above)
  gemm_kquant_panels<KKind::kQ6_K>(g);
}

#include "tensor/kernels_avx512_more.h"
#include "tensor/kernels_avx512_r16panels.h"

void gemm_f32(const GemmArgs& g) { zgemm_float<Z32>(g); }
void gemm_f16(const GemmArgs& g) { zgemm_float<Z16>(g); }
void gemm_bf16(const GemmArgs& g) { zgemm_float<ZB16>(g); }
void gemm_q8_0(const GemmArgs& g) { gemm_q8_0_256(g); }
void act_round_f16(const float* x, float* out, int64_t n) { round_f16_256(x, out, n); }
void act_round_bf16(const float* x, float* out, int64_t n) { round_bf16_256(x, out, n); }
void act_q8_0(const float* x, int64_t n, int8_t* qs, float* d, int32_t* s) { quantize_q8_0_256(x, n, qs, d, s); }
void act_q8_k(const float* x, int64_t n, BlockQ8_K* y) { quantize_q8_k_256(x, n, y); }
void gemm_q4_1(const GemmArgs& g) { gemm_q4_1_256(g); }
void gemm_q5_1(const GemmArgs& g) { gemm_q5_1_256(g); }
void gemm_q2_k(const GemmArgs& g) { gemm_q2_k_256(g); }

}  // namespace
}  // namespace ts::tensor::kern

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace ts::tensor::kern {

const KernelTable* avx512_kernels() {
  static const KernelTable table = {
      {gemm_f32, gemm_f16, gemm_bf16, gemm_q8_0, gemm_q4_0, gemm_q4_k, gemm_q6_k, gemm_q8_0_r16, gemm_q4_k_r16_any, gemm_q6_k_r16_any, gemm_q4_0_r16,
       gemm_q4_1, gemm_q5_0, gemm_q5_1, gemm_q2_k, gemm_q3_k, gemm_q5_k, gemm_iq4_nl, gemm_iq4_xs,
       gemm_iq4_nl_r16, gemm_q5_0_r16, gemm_q4_1_r16, gemm_q5_1_r16},
      {act_round_f16, act_round_bf16, act_q8_0, act_q8_k}};
  return &table;
}

}  // namespace ts::tensor::kern
