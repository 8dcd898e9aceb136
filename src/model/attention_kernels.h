// Inner kernels of the tiled attention (attention.cc) and the exp-based element-wise op, one table per ISA (scalar reference,
// AVX2 + FMA + F16C, AVX-512). Internal to src/model; pure functions over raw float buffers.
//
// A key tile holds kKeyTile consecutive positions of one KV head, converted once from the
// cache: K transposed to [head_dim][kKeyTile] (lane i = key i) so scores for all keys of the
// tile come out of one pass without horizontal sums, V as [kKeyTile][head_dim]. Lanes past the
// tile's key count are zero and their scores are ignored by the caller.
//
// Bit-exactness: every table computes, per key and per output element, the same sequence of
// IEEE operations as the scalar reference (explicit fused multiply-adds, the same summation
// tree), so all ISAs give identical results; tests/model/attention_test.cc checks it.
#pragma once

#include <cstdint>

namespace ts::model::attn {

inline constexpr int32_t kKeyTile = 16;

// expf as glibc 2.28+ computes it on FMA hosts (__expf_fma: 2^(k/32) table, cubic in double,
// three fused multiply-adds), the exp llama.cpp's CPU flash attention calls. exp_ref is the
// scalar form; the SIMD tables evaluate the same operations lane-wise, so the softmax weights
// are the libm ones (tests check exp_ref against std::exp) at vector speed.
namespace expf_data {
inline constexpr double kInvLn2N = 0x1.71547652b82fep+5;  // 32 / ln 2
inline constexpr double kShift = 0x1.8p+52;
inline constexpr double kC0 = 0x1.c6af84b912394p-20, kC1 = 0x1.ebfce50fac4f3p-13, kC2 = 0x1.62e42ff0c52d6p-6;
inline constexpr float kOverflow = 0x1.62e42ep6f;    // above: +inf
inline constexpr float kUnderflow = -0x1.9fe368p6f;  // below: 0
inline constexpr float kMayUnderflow = -0x1.9d1d9ep6f;  // [kUnderflow, this): the smallest subnormal
// 2^(i/32) as doubles, minus i << 47 (the exponent bits added back from k).
inline constexpr unsigned long long kTab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};
}  // namespace expf_data
float exp_ref(float x);

// The f32 prefill tiles (attention.h, uses_f32_tiles): kFlashKeys keys per tile, K as
// kFlashKeys / kKeyTile consecutive [hd][kKeyTile] sub-tiles (the layout load_kt_f16 writes),
// V as [kFlashKeys][hd] rows. Tiles start at multiples of kFlashKeys, so a query's arithmetic
// depends only on its own context.
inline constexpr int32_t kFlashKeys = 64;
// exp for the f32 tiles, a float-only form (every tier runs the same operations, so the bits
// agree across tiers; within 2 ulp of expf for x in [-87, 0]): x clamped to >= -87 (a NaN to
// -87; below, e^x < 2^-125 is a weight nobody sees), n = nearbyint(x * log2 e),
// r = fma(n, -ln2_lo, fma(n, -ln2_hi, x)), p = the degree-7 Taylor polynomial of e^r by Horner
// fmas, result p * 2^n (2^n built from its exponent bits). Only for x <= 0.
namespace expflash_data {
inline constexpr float kLog2e = 0x1.715476p+0f, kLn2Hi = 0x1.62e4p-1f, kLn2Lo = 0x1.7f7d1cp-20f;
inline constexpr float kMin = -87.f;
inline constexpr float kC[8] = {1.f, 1.f, 0.5f, 0x1.555556p-3f, 0x1.555556p-5f, 0x1.111112p-7f, 0x1.6c16c2p-10f,
                                0x1.a01a02p-13f};  // 1/k!
}  // namespace expflash_data
float exp_flash(float x);

struct Kernels {
  const char* name;
  // out[i] = dot_ggml(q, K[:, i]) * scale for the kKeyTile lanes. dot_ggml is ggml_vec_dot_f16
  // as built for AVX2 + F16C: per 32 values, accumulators sum[j][l] (j < 4, l < 8) fed by
  // fma(q[32c + 8j + l], k[32c + 8j + l], sum[j][l]); r[l] = (sum0 + sum2) + (sum1 + sum3);
  // t[l] = r[l] + r[l + 4]; result (t0 + t1) + (t2 + t3); a tail past the last multiple of 32
  // is added in double. Used for every KV type (its 32 independent sums vectorize well).
  void (*scores_ggml)(const float* q, const float* kt, int32_t hd, float scale, float* out);
  // scores_ggml of `nrows` query rows (q: [nrows][hd], out: [nrows][kKeyTile]) against one tile:
  // per row bit-identical to scores_ggml; the SIMD tables load each K vector once for several
  // rows (a GQA group) instead of once per row.
  void (*scores_rows)(const float* q, int32_t nrows, const float* kt, int32_t hd, float scale, float* out);
  // scores_rows against an F16 K tile read straight from its transposed page (k: the tile's
  // first slot, stride: the block size), as if load_kt_f16(k, stride, hd, kt) came first
  // (bit-identical to that pair). The AVX-512 table converts each K vector in registers for
  // all the rows (no [hd][kKeyTile] f32 tile written and read back); the others run the pair.
  void (*scores_rows_f16k)(const float* q, int32_t nrows, const uint16_t* k, int32_t stride, int32_t hd, float scale,
                           float* out);
  // Online-softmax step of `nrows` rows (sc, w, ms: [nrows][kKeyTile]; m, s: [nrows], the rows'
  // running max and sum, updated in place) over keys i0..i1-1 with ggml's one-key-a-step rule:
  //   if sc[i] > m: ms[i] = exp(m - sc[i]), w[i] = 1, m = sc[i];  else ms[i] = 1, w[i] = exp(sc[i] - m);
  //   s = fma(s, ms[i], w[i]).
  // Lanes outside [i0, i1) of w and ms are scratch (the SIMD tables may overwrite them).
  void (*online_f16)(const float* sc, int32_t nrows, int32_t i0, int32_t i1, float* m, float* s, float* w, float* ms);
  // Online-softmax step of the f32-accumulator path for `nrows` rows (sc, w: [nrows][kKeyTile];
  // m, s, rescale: [nrows]), keys i0..i1-1, per row r:
  //   m' = m folded with m = std::max(m, sc[i]) in key order (NaN scores never taken),
  //   w[i] = exp_ref(sc[i] - m'), rescale = exp_ref(m - m'), s = s * rescale + w[i0] + ... + w[i1-1]
  //   (in key order), then m = m'.
  // All rows of a GQA group go in one call so the SIMD tables can overlap the rows' serial max
  // and sum chains and run one vector exp for all rows' rescales. Lanes outside [i0, i1) of w
  // are scratch.
  void (*online_f32)(const float* sc, int32_t nrows, int32_t i0, int32_t i1, float* m, float* s, float* w,
                     float* rescale);
  // y[i] = exp_ref(x[i]) for the kKeyTile lanes.
  void (*exp_tile)(const float* x, float* y);
  // SwiGLU, a[i] = a[i] / (1 + exp_ref(-a[i])) * b[i] (ops.h swiglu's arithmetic; lives here for
  // the vector exp).
  void (*swiglu)(float* a, const float* b, int64_t n);
  // dst[i] = float(fp16 src[i]) (exact), for loading F16 K/V tiles.
  void (*cvt_f16)(const uint16_t* src, float* dst, int32_t n);
  // kt[d][i] = float(k[d * stride + i]) for d < hd, i < kKeyTile: a K tile from a transposed
  // F16 page (k points at the tile's first slot, stride = block size).
  void (*load_kt_f16)(const uint16_t* k, int32_t stride, int32_t hd, float* kt);
  // kt[d][i] = scale[i] * k[d * stride + i] (q8_0 page; scale: the tile's per-token scales).
  void (*load_kt_q8)(const int8_t* k, int32_t stride, const float* scale, int32_t hd, float* kt);
  // vt[i][e] = scale[i] * v[i * hd + e] for i < n, e < hd: a V tile from a q8_0 page (row-major
  // int8, the tile's per-token scales consecutive), one multiply per value.
  void (*load_v_q8)(const int8_t* v, const float* scale, int32_t n, int32_t hd, float* vt);
  // dst[i] = fp16(src[i]), round to nearest even (F16 K/V stores).
  void (*cvt_to_f16)(const float* src, uint16_t* dst, int32_t n);
  // The fp16 output accumulator of ggml's CPU flash attention for `nrows` rows (acc [nrows][hd],
  // w and ms [nrows][kKeyTile]), keys i0..i1-1 in order, per row r and element d:
  //   if ms[r][i] != 1: acc = fp16(acc * ms[r][i]);  acc = fp16(fma(v[i][d], w[r][i], acc)).
  // (A rescale by exactly 1 is a no-op on fp16-representable values, so the test is exact.)
  void (*acc_f16)(float* acc, int32_t nrows, const float* v, const float* w, const float* ms, int32_t i0, int32_t i1,
                  int32_t hd);
  // acc[r][d] = acc[r][d] * rescale[r] + sum over i in [i0, i1) of p[r][i] * v[i][d] (fma, keys in order).
  void (*acc_f32)(float* acc, int32_t nrows, const float* v, const float* p, const float* rescale, int32_t i0,
                  int32_t i1, int32_t hd);
  // acc_f16 with V as fp16 (v: [kKeyTile][hd] row-major, an F16 page's V rows from the tile's
  // first slot; only keys i0..i1-1 are read), as if cvt_f16 into a V tile came first
  // (bit-identical to that pair). The AVX-512 table (and AVX2 where head_dim is a multiple of
  // 32) converts each V vector in registers once per key for a block of rows: no f32 V tile
  // written and read back.
  void (*acc_f16_h)(float* acc, int32_t nrows, const uint16_t* v, const float* w, const float* ms, int32_t i0,
                    int32_t i1, int32_t hd);
  // One kFlashKeys tile of the f32 prefill path for `nrows` query rows (q, acc: [nrows][hd];
  // m, s: [nrows], the rows' running max and sum) that all read keys [i0, i1) of the tile
  // (i0 < i1); hd a multiple of 16. Per row, with every step as written (fmas explicit):
  //   sc[i] = (x = 0; x = fma(q[d], K[d][i], x) for d = 0..hd-1) * scale, i in [i0, i1);
  //   a NaN score: the row's acc becomes NaN and nothing else of the row changes;
  //   t = max of sc[i0..i1); mn = (t > m ? t : m); if mn > m: e = exp_flash(m - mn), s *= e,
  //   acc[d] *= e; m = mn;
  //   p[i] = exp_flash(sc[i] - m) in [i0, i1), 0 elsewhere; s += sum64(p), the fixed tree
  //   u[j] = (p[j] + p[j+16]) + (p[j+32] + p[j+48]) (j < 16), then u[j] += u[j+w] for w = 8, 4, 2, 1;
  //   acc[d] = fma(p[i], V[i][d], acc[d]) for i = i0..i1-1 in order.
  void (*flash_tile)(const float* q, int32_t nrows, int32_t hd, const float* kt, const float* v, int32_t i0,
                     int32_t i1, float scale, float* m, float* s, float* acc);
};

const Kernels& scalar_kernels();
const Kernels& avx2_kernels();    // requires AVX2 + FMA + F16C
const Kernels& avx512_kernels();  // requires AVX-512 F
// The table for tensor::active_isa() (AVX-512 for the avx512/amx tiers, AVX2, else scalar).
const Kernels& active_kernels();

}  // namespace ts::model::attn
