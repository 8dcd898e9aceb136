// AVX2 + FMA + F16C kernels (256-bit). Everything below the target pragma is compiled for that
// ISA only and reached through avx2_kernels() after a CPUID check.
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tensor/kernels.h"
#include "tensor/quants.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// -O3 so the small fixed-trip tile loops are fully unrolled early enough for their vector
// accumulator arrays to live in registers (at -O2 they stay on the stack).
#pragma GCC optimize("O3")

namespace ts::tensor::kern {
namespace {

inline __m256i mul_sum_us8(__m256i u8, __m256i s8) {
  // maddubs cannot saturate here: |u8| <= 128 and |s8| <= 127 in every caller.
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1));
}

inline __m256i madd_acc16(__m256i acc, __m256i a, __m256i b) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

#include "tensor/kernels_x86_impl.h"
constexpr int kKTileMax = 4;  // kernels_x86_more.h for_ktoken_tiles
#include "tensor/kernels_x86_more.h"
#include "tensor/kernels_avx2_r16.h"
#include "tensor/kernels_avx2_ggml.h"
#include "tensor/kernels_avx2_q5u.h"
#include "tensor/kernels_avx2_kquant.h"
#include "tensor/kernels_avx2_panels.h"
#include "tensor/kernels_avxvnni_r16.h"

// Vector traits of kernels_float_r16.h: a 16-row column as two ymm halves.
struct FloatR16Ymm {
  using Vec = __m256;
  static constexpr int kParts = 2;
  static constexpr int kDecodeGroups = 2;  // 2 streams, 4 FMA chains per token
  static constexpr int kBatchGroups = 1;
  static constexpr int kBatchTokens = 5;   // 10 accumulators, 5 broadcasts, a weight half (16 ymm)
  template <Layout L>
  static __m256 load(const uint8_t* col, int part) {
    if constexpr (L == Layout::kF32_R16) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(col) + 8 * part);
    } else {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col + 16 * part)));
    }
  }
  static __m256 zero() { return _mm256_setzero_ps(); }
  static __m256 bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static __m256 fma(__m256 w, __m256 x, __m256 acc) { return _mm256_fmadd_ps(w, x, acc); }
  static void store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
};
#include "tensor/kernels_float_r16.h"

void gemm_f32(const GemmArgs& g) { gemm_f32_256(g); }
void gemm_f16(const GemmArgs& g) { gemm_f16_256(g); }
void gemm_bf16(const GemmArgs& g) { gemm_bf16_256(g); }
void gemm_q8_0(const GemmArgs& g) { gemm_q8_0_256(g); }
void gemm_q4_0(const GemmArgs& g) { gemm_q4_0_256(g); }
void gemm_q4_k(const GemmArgs& g) { gemm_q4_k_256(g); }
void gemm_q6_k(const GemmArgs& g) { gemm_q6_k_256(g); }
void gemm_q8_0_r16(const GemmArgs& g) {
  if (g.act->q16 == nullptr || g.act->n_tok < kActQ16MinTokens || g.scratch == nullptr) return gemm_q8_0_r16_avx2(g);
  gemm_q8_0_r16_panels_avx2(g);
}
void gemm_q8_0_r16_avxvnni(const GemmArgs& g) { gemm_q8_0_r16_vnni(g); }
// Q4_0_R16 batches from kQ4PanelMinTokens through the unpacked chunk panels
// (kernels_avx2_panels.h), below them the 3-token tiles that unpack per tile. 4864x896, 1
// thread, Zen 5, alternated (tiles -> panels): avx2 8 / 64 / 512 tokens 392 / 3059 / 24780 us
// -> 332 / 2127 / 17501; avx-vnni 295 / 2239 / 18315 -> 276 / 1772 / 14460.
constexpr int64_t kQ4PanelMinTokens = 8;
void gemm_q4_0_r16_avxvnni(const GemmArgs& g) {
  if (g.act->n_tok < kQ4PanelMinTokens || g.scratch == nullptr) return gemm_q4_0_r16_vnni<Q4Vals::kQ4_0>(g);
  gemm_q4_0_r16_panels_avx2<true>(g);
}
// Q5_0_R16: ggml's order (the x16t kernels), or in Q50Order::kBlock (GemmArgs::q5_block) the
// Q4_0_R16 tiles and chunk panels with the 5th bit (the scalar reference's bits in that order).
void gemm_q5_0_r16_avxvnni(const GemmArgs& g) {
  if (!g.q5_block) return gemm_r16_ggml_vnni<DecQ5_0256>(g);
  if (g.act->n_tok < kQ4PanelMinTokens || g.scratch == nullptr) return gemm_q4_0_r16_vnni<Q4Vals::kQ5Plus16>(g);
  gemm_q4_0_r16_panels_avx2<true, Q4Vals::kQ5Plus16>(g);
}
// IQ4_NL_R16 in llama.cpp's x86 order (kernels_scalar.cc gemm_iq4_nl) through the Q4_0_R16
// kernels (the same bytes), the nibbles looked up in the table: the 3-token tiles, and from
// kQ4PanelMinTokens the chunk panels.
void gemm_iq4_nl_r16_avxvnni(const GemmArgs& g) {
  if (g.act->n_tok < kQ4PanelMinTokens || g.scratch == nullptr) return gemm_q4_0_r16_vnni<Q4Vals::kNlPlus128>(g);
  gemm_q4_0_r16_panels_avx2<true, Q4Vals::kNlPlus128>(g);
}
void act_round_f16(const float* x, float* out, int64_t n) { round_f16_256(x, out, n); }
void act_round_bf16(const float* x, float* out, int64_t n) { round_bf16_256(x, out, n); }
void act_q8_0(const float* x, int64_t n, int8_t* qs, float* d, int32_t* s) { quantize_q8_0_256(x, n, qs, d, s); }
void act_q8_k(const float* x, int64_t n, BlockQ8_K* y) { quantize_q8_k_256(x, n, y); }
void gemm_q4_1(const GemmArgs& g) { gemm_q4_1_256(g); }
void gemm_q5_0(const GemmArgs& g) { gemm_q5_0_256(g); }
void gemm_q5_1(const GemmArgs& g) { gemm_q5_1_256(g); }
void gemm_q2_k(const GemmArgs& g) { gemm_q2_k_256(g); }
void gemm_q3_k(const GemmArgs& g) { gemm_q3_k_256(g); }
void gemm_q5_k(const GemmArgs& g) { gemm_q5_k_256(g); }
void gemm_iq4_nl(const GemmArgs& g) { gemm_iq4_nl_256(g); }
void gemm_iq4_xs(const GemmArgs& g) { gemm_iq4_xs_256(g); }
void gemm_q4_k_r16(const GemmArgs& g) {
  if (g.act->n_tok < kAvx2KPanelMinTokens || g.scratch == nullptr) return gemm_q4_k_r16_avx2(g);
  gemm_kquant_r16_panels_avx2<DecQ4KR16Avx2>(g);
}
void gemm_q6_k_r16(const GemmArgs& g) {
  if (g.act->n_tok < kAvx2KPanelMinTokens || g.scratch == nullptr) return gemm_q6_k_r16_avx2<false>(g);
  gemm_kquant_r16_panels_avx2<DecQ6KR16Avx2>(g);
}
void gemm_q4_0_r16(const GemmArgs& g) {
  if (g.act->n_tok < kQ4PanelMinTokens || g.scratch == nullptr) return gemm_q4_0_r16_avx2(g);
  gemm_q4_0_r16_panels_avx2<false>(g);
}
void gemm_q4_k_r16_avxvnni(const GemmArgs& g) {
  if (g.act->n_tok < kAvx2KPanelMinTokens || g.scratch == nullptr) return gemm_q4_k_r16_avx2(g);
  gemm_kquant_r16_panels_avx2<DecQ4KR16Avx2, true>(g);
}
void gemm_q6_k_r16_avxvnni(const GemmArgs& g) {
  if (g.act->n_tok < kAvx2KPanelMinTokens || g.scratch == nullptr) return gemm_q6_k_r16_avx2<true>(g);
  gemm_kquant_r16_panels_avx2<DecQ6KR16Avx2, true>(g);
}
void gemm_iq4_nl_r16(const GemmArgs& g) {
  if (g.act->n_tok < kQ4PanelMinTokens || g.scratch == nullptr) return gemm_iq4nl_r16_avx2(g);
  gemm_q4_0_r16_panels_avx2<false, Q4Vals::kNlSigned>(g);
}
void gemm_q5_0_r16(const GemmArgs& g) { gemm_r16_ggml_avx2<DecQ5_0256>(g); }
void gemm_q4_1_r16(const GemmArgs& g) { gemm_r16_ggml_avx2<DecQ4_1256>(g); }
void gemm_q5_1_r16(const GemmArgs& g) { gemm_r16_ggml_avx2<DecQ5_1256>(g); }
// Q5_K_R16 / Q3_K_R16 / Q2_K_R16 / IQ4_XS_R16: up to kAvx2KTileMaxTokens the register tiles
// (Q4_K_R16's for Q5_K, Q6_K_R16's for Q3_K / Q2_K, iq4xs_r16_tile_avx2), above them the decoded
// panels (block by block up to kAvx2KFusedMaxTokens), or the reference without the caller's
// scratch; the same integer sums and float steps either way. The tiles unpack the values once per 2-token tile: one thread,
// L2-resident 128x4096 (us, panels / tiles, same minutes): 1 token Q2_K 12.9 / 12.8, Q3_K
// 15.0 / 14.5, Q5_K 15.0 / 13.0 (avxvnni 13.0 / 8.5, 15.2 / 12.5, 14.7 / 12.9); 4 tokens
// 26.2 / 29.8, 28.0 / 39.7, 28.8 / 35.4.
constexpr int64_t kAvx2KTileMaxTokens = 2;
template <typename Dec, Layout kL, bool kVnni>
void gemm_kr16_avx2(const GemmArgs& g, GemmFn small) {
  if (g.act->n_tok <= kAvx2KTileMaxTokens && small != nullptr) return small(g);
  if (g.scratch == nullptr) return scalar_kernels().gemm[static_cast<int>(kL)](g);
  gemm_kquant_r16_panels_avx2<Dec, kVnni>(g);
}
template <bool kVnni>
void gemm_q5_k_r16(const GemmArgs& g) { gemm_kr16_avx2<DecQ5KR16Avx2, Layout::kQ5_K_R16, kVnni>(g, gemm_q4_k_r16_avx2<true>); }
template <bool kVnni>
void gemm_q3_k_r16(const GemmArgs& g) {
  gemm_kr16_avx2<DecQ3KR16Avx2, Layout::kQ3_K_R16, kVnni>(g, gemm_k16_lines_avx2<kVnni, K16::kQ3_K>);
}
template <bool kVnni>
void gemm_q2_k_r16(const GemmArgs& g) {
  gemm_kr16_avx2<DecQ2KR16Avx2, Layout::kQ2_K_R16, kVnni>(g, gemm_k16_lines_avx2<kVnni, K16::kQ2_K>);
}
template <bool kVnni>
void gemm_iq4_xs_r16(const GemmArgs& g) {
  gemm_kr16_avx2<DecIQ4XSR16Avx2<kVnni>, Layout::kIQ4_XS_R16, kVnni>(g, gemm_iq4_xs_r16_avx2<kVnni>);
}

}  // namespace
}  // namespace ts::tensor::kern

#pragma GCC pop_options

namespace ts::tensor::kern {

const KernelTable* avx2_kernels() {
  static const KernelTable table = {
      {gemm_f32, gemm_f16, gemm_bf16, gemm_q8_0, gemm_q4_0, gemm_q4_k, gemm_q6_k, gemm_q8_0_r16, gemm_q4_k_r16, gemm_q6_k_r16, gemm_q4_0_r16,
       gemm_q4_1, gemm_q5_0, gemm_q5_1, gemm_q2_k, gemm_q3_k, gemm_q5_k, gemm_iq4_nl, gemm_iq4_xs,
       gemm_iq4_nl_r16, gemm_q5_0_r16, gemm_q4_1_r16, gemm_q5_1_r16, gemm_q5_k_r16<false>, gemm_q3_k_r16<false>,
       gemm_q2_k_r16<false>, gemm_iq4_xs_r16<false>, gemm_float_r16<FloatR16Ymm, Layout::kF32_R16>,
       gemm_float_r16<FloatR16Ymm, Layout::kF16_R16>},
      {act_round_f16, act_round_bf16, act_q8_0, act_q8_k}};
  return &table;
}

const KernelTable* avxvnni_kernels() {
  static const KernelTable table = [] {
    KernelTable t = *avx2_kernels();
    t.gemm[static_cast<int>(Layout::kQ8_0_R16)] = gemm_q8_0_r16_avxvnni;
    t.gemm[static_cast<int>(Layout::kQ4_0_R16)] = gemm_q4_0_r16_avxvnni;
    t.gemm[static_cast<int>(Layout::kQ5_0_R16)] = gemm_q5_0_r16_avxvnni;
    t.gemm[static_cast<int>(Layout::kIQ4_NL_R16)] = gemm_iq4_nl_r16_avxvnni;
    t.gemm[static_cast<int>(Layout::kQ4_K_R16)] = gemm_q4_k_r16_avxvnni;
    t.gemm[static_cast<int>(Layout::kQ6_K_R16)] = gemm_q6_k_r16_avxvnni;
    t.gemm[static_cast<int>(Layout::kQ5_K_R16)] = gemm_q5_k_r16<true>;
    t.gemm[static_cast<int>(Layout::kQ3_K_R16)] = gemm_q3_k_r16<true>;
    t.gemm[static_cast<int>(Layout::kQ2_K_R16)] = gemm_q2_k_r16<true>;
    t.gemm[static_cast<int>(Layout::kIQ4_XS_R16)] = gemm_iq4_xs_r16<true>;
    return t;
  }();
  return &table;
}

}  // namespace ts::tensor::kern
