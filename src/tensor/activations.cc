#include "tensor/activations.h"

#include <cstring>
#include <memory>
#include <vector>

#include "core/check.h"
#include "tensor/quants.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ts::tensor {

namespace {

// Per-calling-thread activation scratch: grows to the largest request, never shrinks, so the
// steady state allocates nothing.
struct ActScratch {
  std::vector<float> xf;
  std::vector<int8_t> q8;
  std::vector<float> d8;
  std::vector<int32_t> s8;
  std::vector<float> s1;
  std::vector<BlockQ8_K> qk;
  std::vector<uint8_t> il;
  std::vector<int16_t> q16;
  std::vector<uint8_t> q8u;
  std::vector<int32_t> x16t;
};

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// From this many tokens on, activation preparation is split over the pool by tokens; below
// it, from kMinParallelPrepValues values (n_tok * cols) on, by chunks of kPrepColChunk columns.
// Why: a decode step's down projection (Qwen2.5-0.5B: 8 x 4864 values) was quantized on the
// calling thread while the other waited, half of its input still in the other core's cache
// (the gate/up job wrote it): on Zen 5 (kernels_bench BM_ActPrepAB, same-process alternation,
// loaded host) split/serial was x0.67 (avx512), x0.65 (avxvnni), x0.53 (avx2) at 8 x 4864
// (~25 -> ~17 us a call on avx512), x0.58-0.77 at 4 x 4864; at 2 x 4864 within noise, and at
// 8 x 896 / 8 x 1536 (q/k/v, gate/up inputs) the pool job cost more than it saved (x1.4-2.4).
constexpr int64_t kMinParallelPrepTokens = 16;
constexpr int64_t kMinParallelPrepValues = 16384;
constexpr int64_t kPrepColChunk = 512;


// The activation forms a layout needs (bits of PreparedActivations::Impl::have).
enum Form : unsigned {
  kFormF16 = 1u << 0,
  kFormBF16 = 1u << 1,
  kFormQ8 = 1u << 2,   // q8, d8, s8
  kFormS1 = 1u << 3,   // Q8_1 sums (needs kFormQ8)
  kFormIl = 1u << 4,   // AVX-512 Q8_0_R16 tile interleave (needs kFormQ8)
  kFormQK = 1u << 5,   // Q8_K blocks
  kFormQ16 = 1u << 6,  // AVX2 Q8_0_R16: q8 widened to int16 (needs kFormQ8)
  kFormQ8U = 1u << 7,  // Q5_0_R16 / Q5_1_R16 batches: q8 ^ 0x80 (needs kFormQ8)
  kFormX16T = 1u << 8,  // Q5_0_R16 below the panels: Act::x16t (needs kFormQ8)
};

// Act::x16t: per 4 consecutive q8 values, kActIlBias0 - factor * their sum.
void four_value_terms(const int8_t* q8, int64_t n, int32_t factor, int32_t* terms) {
  for (int64_t i = 0; i < n; i += 4) terms[i / 4] = kern::kActIlBias0 - factor * (q8[i] + q8[i + 1] + q8[i + 2] + q8[i + 3]);
}

unsigned forms_for(kern::Layout layout, int64_t n_tok, Isa isa) {
  switch (layout) {
    case kern::Layout::kF32:
    case kern::Layout::kF32_R16: return 0;
    case kern::Layout::kF16:
    case kern::Layout::kF16_R16: return kFormF16;
    case kern::Layout::kBF16: return kFormBF16;
    case kern::Layout::kQ4_1:
    case kern::Layout::kQ5_1: return kFormQ8 | kFormS1;
    case kern::Layout::kQ4_1_R16:
    case kern::Layout::kQ5_1_R16:
      // Q5_1: the ggml panels (Act::q8u) from kGgmlPanelMinTokensMin tokens on every SIMD tier.
      // Q4_1 reads its records in place at every size (kernels.h says why).
      return kFormQ8 | kFormS1 |
             (layout == kern::Layout::kQ5_1_R16 && isa >= Isa::kAvx2 && n_tok >= kern::kGgmlPanelMinTokensMin ? kFormQ8U
                                                                                                            : 0u);
    case kern::Layout::kQ8_0_R16:
      // The AMX tile kernel reads q8 in place; below kAmxMinTokens the avx512 kernel runs.
      return kFormQ8 |
             ((n_tok >= kern::kActIlMinTokens && isa >= Isa::kAvx512 && !(isa == Isa::kAmx && n_tok >= kern::kAmxMinTokens)) ||
                      (isa == Isa::kAvxVnni && n_tok >= kern::kAvxVnniIlMinTokens)
                  ? kFormIl
                  : 0u) |
             (n_tok >= kern::kActQ16MinTokens && isa == Isa::kAvx2 ? kFormQ16 : 0u);
    case kern::Layout::kQ5_0_R16: {
      // Q50Order::kBlock on AVX-VNNI / AVX-512 / AMX: the Q4_0_R16 kernels with the 5th bit (AVX-512
      // / AMX: Act::q8_il from kQ4IlMinTokens, as IQ4_NL_R16). Else ggml's order: the ggml panel
      // kernels (Act::q8u) from their tier's batch size (the AVX-VNNI tier runs its x16t panels at
      // every size, kernels.h); below them the values go in unsigned against Act::x16t on every
      // SIMD tier.
      if (q5_0_order() == Q50Order::kBlock && isa >= Isa::kAvxVnni) {
        return kFormQ8 | (n_tok >= kern::kQ4IlMinTokens && isa >= Isa::kAvx512 ? kFormIl : 0u);
      }
      const int64_t panel_min = isa >= Isa::kAvx512 ? kern::kGgmlPanelMinTokensAvx512
                                : isa == Isa::kAvx2 ? kern::kGgmlPanelMinTokensAvx2
                                                    : -1;
      const bool panels = panel_min > 0 && n_tok >= panel_min;
      return kFormQ8 | (panels ? kFormQ8U : (isa >= Isa::kAvx2 ? kFormX16T : 0u));
    }
    case kern::Layout::kQ4_0_R16:
      // AVX-512 batches from kQ4IlMinTokens also read Act::q8_il (the AMX tier's tile kernels
      // take them from kAmxMinTokens, reading q8 in place).
      return kFormQ8 | (n_tok >= kern::kQ4IlMinTokens && isa >= Isa::kAvx512 &&
                                !(isa == Isa::kAmx && n_tok >= kern::kAmxMinTokens)
                            ? kFormIl
                            : 0u);
    case kern::Layout::kIQ4_NL_R16:
      // The Q4_0_R16 kernels with table values (kernels.h kQ4IlMinTokens); the AMX tier runs the
      // AVX-512 ones for it at every size.
      return kFormQ8 | (n_tok >= kern::kQ4IlMinTokens && isa >= Isa::kAvx512 ? kFormIl : 0u);
    case kern::Layout::kQ8_0:
    case kern::Layout::kQ4_0:
    case kern::Layout::kQ5_0:
    case kern::Layout::kIQ4_NL: return kFormQ8;
    case kern::Layout::kQ2_K:
    case kern::Layout::kQ3_K:
    case kern::Layout::kQ5_K:
    case kern::Layout::kIQ4_XS:
    case kern::Layout::kQ4_K:
    case kern::Layout::kQ4_K_R16:
    case kern::Layout::kQ6_K_R16:
    case kern::Layout::kQ5_K_R16:
    case kern::Layout::kQ3_K_R16:
    case kern::Layout::kQ2_K_R16:
    case kern::Layout::kIQ4_XS_R16:
    case kern::Layout::kQ6_K: return kFormQK;
    case kern::Layout::kCount: break;
  }
  TS_CHECK(false, "matmul: bad layout");
  return 0;
}

}  // namespace

struct PreparedActivations::Impl {
  const float* x = nullptr;
  int64_t n_tok = 0;
  int64_t cols = 0;
  unsigned have = 0;  // Form bits made since reset()
  ActScratch buf;
  uint8_t* il = nullptr;  // 64-byte aligned inside buf.il when kFormIl is made
};

PreparedActivations::PreparedActivations() : impl_(std::make_unique<Impl>()) {}
PreparedActivations::~PreparedActivations() = default;
PreparedActivations::PreparedActivations(PreparedActivations&&) noexcept = default;
PreparedActivations& PreparedActivations::operator=(PreparedActivations&&) noexcept = default;

void PreparedActivations::reset(const float* x, int64_t n_tok, int64_t cols) {
  TS_CHECK(n_tok >= 0 && cols >= 0, "PreparedActivations::reset: negative shape");
  impl_->x = x;
  impl_->n_tok = n_tok;
  impl_->cols = cols;
  impl_->have = 0;
}
const float* PreparedActivations::data() const { return impl_->x; }
int64_t PreparedActivations::n_tok() const { return impl_->n_tok; }
int64_t PreparedActivations::cols() const { return impl_->cols; }
int PreparedActivations::num_prepared() const { return __builtin_popcount(impl_->have); }

namespace {

// dst[i] = src[i] (int8 -> int16). The Q16 form is made on the avx2 tier only (forms_for), so
// AVX2 is there; this file is built for the x86-64 baseline, where the loop ran ~1 cycle a value.
#if defined(__x86_64__)
__attribute__((target("avx2"))) void widen_i8(const int8_t* src, int16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = src[i];
}
#else
void widen_i8(const int8_t* src, int16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}
#endif

// Makes the forms in `want` that `p` lacks (split over the pool for large batches: it is
// O(n_tok * cols) and would otherwise run on one thread), and points `act` at all of them.
void prepare_forms(PreparedActivations::Impl& p, unsigned want, const kern::KernelTable& kt, ThreadPool* pool,
                   kern::Act* act) {
  const int64_t n_tok = p.n_tok, cols = p.cols;
  const size_t n = static_cast<size_t>(n_tok * cols);
  const int64_t nb32 = cols / kQK8_0, nb256 = cols / kQK_K;
  ActScratch& b = p.buf;
  const unsigned missing = want & ~p.have;
  if (missing != 0) {
    // Buffers first (on this thread), then the per-token work.
    if (missing & (kFormF16 | kFormBF16)) grow(b.xf, n);
    if (missing & kFormQ8) {
      grow(b.q8, n);
      grow(b.d8, static_cast<size_t>(n_tok * nb32));
      grow(b.s8, static_cast<size_t>(n_tok * nb32));
    }
    if (missing & kFormS1) grow(b.s1, static_cast<size_t>(n_tok * nb32));
    if (missing & kFormQK) grow(b.qk, static_cast<size_t>(n_tok * nb256));
    if (missing & kFormQ16) grow(b.q16, n);
    if (missing & kFormQ8U) grow(b.q8u, n);
    if (missing & kFormX16T) grow(b.x16t, n / 4);
    if (missing & kFormIl) {
      uint8_t* il = grow(b.il, kern::act_il_bytes(n_tok, cols) + 64);
      p.il = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(il) + 63) & ~uintptr_t{63});
    }
    const float* x = p.x;
    int8_t* q8 = b.q8.data();
    float* d8 = b.d8.data();
    int32_t* s8 = b.s8.data();
    uint8_t* il = p.il;
    // Tokens [t0, t1), columns [c0, c1) (multiples of 32; of 256 where Q8_K blocks are made).
    auto prepare = [&](int64_t t0, int64_t t1, int64_t c0, int64_t c1) {
      const int64_t nc = c1 - c0, b0 = c0 / kQK8_0, b1 = c1 / kQK8_0;
      for (int64_t t = t0; t < t1; ++t) {
        const float* xt = x + t * cols + c0;
        const size_t o = static_cast<size_t>(t * cols + c0), o32 = static_cast<size_t>(t * nb32 + b0);
        if (missing & kFormQ8) kt.act.q8_0(xt, nc, q8 + o, d8 + o32, s8 + o32);
        if (missing & kFormS1) quantize_act_q8_1_sums(xt, nc, s8 + o32, b.s1.data() + o32);
        if (missing & kFormIl) {
          // Token t's slot in its tile's block records (Act::q8_il).
          uint8_t* rec = il + (static_cast<size_t>(t / kern::kActIlTile) * static_cast<size_t>(nb32) + static_cast<size_t>(b0)) *
                                  kern::kActIlBlockBytes;
          const int slot = static_cast<int>(t % kern::kActIlTile);
          for (int64_t blk = b0; blk < b1; ++blk, rec += kern::kActIlBlockBytes) {
            std::memcpy(rec + slot * 32, q8 + t * cols + blk * 32, 32);
            const int32_t bias = kern::kActIlBias0 - 128 * s8[t * nb32 + blk];
            std::memcpy(rec + kern::kActIlTile * 32 + slot * 4, &bias, 4);
            std::memcpy(rec + kern::kActIlTile * 36 + slot * 4, &d8[t * nb32 + blk], 4);
          }
        }
        if (missing & kFormQ16) widen_i8(q8 + o, b.q16.data() + o, nc);
        if (missing & kFormX16T) four_value_terms(q8 + o, nc, 16, b.x16t.data() + o / 4);
        if (missing & kFormQ8U) {
          uint8_t* u = b.q8u.data() + o;
          for (int64_t i = 0; i < nc; ++i) u[i] = static_cast<uint8_t>(q8[o + static_cast<size_t>(i)]) ^ 0x80u;
        }
        if (missing & kFormQK) kt.act.q8_k(xt, nc, b.qk.data() + t * nb256 + c0 / kQK_K);
        if (missing & kFormF16) kt.act.round_f16(xt, b.xf.data() + o, nc);
        if (missing & kFormBF16) kt.act.round_bf16(xt, b.xf.data() + o, nc);
      }
    };
    const bool multi = pool != nullptr && pool->num_threads() > 1;
    if (multi && n_tok >= kMinParallelPrepTokens) {
      pool->parallel_chunks(n_tok, (missing & kFormIl) ? kern::kActIlTile : 4,
                            [&](int64_t t0, int64_t t1) { prepare(t0, t1, 0, cols); });
    } else if (multi && n_tok * cols >= kMinParallelPrepValues) {
      // Decode-sized batches: split by columns (all tokens of each chunk on one thread, so
      // threads write disjoint Act::q8_il block records). Chunks of kPrepColChunk columns (a
      // multiple of the Q8_K block); the last may be shorter (a multiple of 32, or of 256 when
      // Q8_K blocks are made: cols is then a multiple of 256).
      const int64_t nchunks = (cols + kPrepColChunk - 1) / kPrepColChunk;
      pool->parallel_chunks(nchunks, (nchunks + pool->num_threads() - 1) / pool->num_threads(),
                            [&](int64_t k0, int64_t k1) {
                              prepare(0, n_tok, k0 * kPrepColChunk, std::min(cols, k1 * kPrepColChunk));
                            });
    } else {
      prepare(0, n_tok, 0, cols);
    }
    // fp16 and bf16 share one buffer: only the form made last is valid.
    if (missing & kFormF16) p.have &= ~kFormBF16;
    if (missing & kFormBF16) p.have &= ~kFormF16;
    p.have |= missing;
  }
  act->n_tok = n_tok;
  act->cols = cols;
  act->xf = (want & (kFormF16 | kFormBF16)) ? b.xf.data() : p.x;
  act->q8 = (want & kFormQ8) ? b.q8.data() : nullptr;
  act->d8 = (want & kFormQ8) ? b.d8.data() : nullptr;
  act->s8 = (want & kFormQ8) ? b.s8.data() : nullptr;
  act->s1 = (want & kFormS1) ? b.s1.data() : nullptr;
  act->qk = (want & kFormQK) ? b.qk.data() : nullptr;
  act->q8_il = (want & kFormIl) ? p.il : nullptr;
  act->q16 = (want & kFormQ16) ? b.q16.data() : nullptr;
  act->q8u = (want & kFormQ8U) ? b.q8u.data() : nullptr;
  act->x16t = (want & kFormX16T) ? b.x16t.data() : nullptr;
}

}  // namespace

void prepare_activation_forms(PreparedActivations::Impl& p, kern::Layout layout, Isa isa, const kern::KernelTable& kt,
                              ThreadPool* pool, kern::Act* act) {
  prepare_forms(p, forms_for(layout, p.n_tok, isa), kt, pool, act);
}

}  // namespace ts::tensor
